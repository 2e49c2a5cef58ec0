package sample

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// naiveProbs is the textbook version of the Hugging Face warper chain with full
// sorts: temperature, top-k (ties with the k-th kept), top-p (ascending
// cumulative sum, drop entries <= 1-top_p, keep the top token), min-p.
func naiveProbs(logits []float32, p Params) []float64 {
	n := len(logits)
	out := make([]float64, n)
	if p.Temperature == 0 {
		best := 0
		for i := range logits {
			if logits[i] > logits[best] {
				best = i
			}
		}
		out[best] = 1
		return out
	}
	z := make([]float64, n)
	for i, v := range logits {
		z[i] = float64(v) / p.Temperature
	}
	if p.TopK > 0 && p.TopK < n {
		s := append([]float64(nil), z...)
		sort.Sort(sort.Reverse(sort.Float64Slice(s)))
		thr := s[p.TopK-1]
		for i := range z {
			if z[i] < thr {
				z[i] = math.Inf(-1)
			}
		}
	}
	softmax := func() {
		m := math.Inf(-1)
		for _, v := range z {
			m = math.Max(m, v)
		}
		var sum float64
		for i, v := range z {
			out[i] = math.Exp(v - m)
			sum += out[i]
		}
		for i := range out {
			out[i] /= sum
		}
	}
	softmax()
	if p.TopP > 0 && p.TopP < 1 {
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		// Ascending probability; among equals the higher id first, so the
		// lower id ranks higher.
		sort.Slice(order, func(a, b int) bool {
			if out[order[a]] != out[order[b]] {
				return out[order[a]] < out[order[b]]
			}
			return order[a] > order[b]
		})
		var cum float64
		for r, i := range order {
			cum += out[i]
			if cum <= 1-p.TopP && r != n-1 {
				z[i] = math.Inf(-1)
			}
		}
		softmax()
	}
	if p.MinP > 0 {
		m := 0.0
		for _, v := range out {
			m = math.Max(m, v)
		}
		for i, v := range out {
			if v < p.MinP*m {
				z[i] = math.Inf(-1)
			}
		}
		softmax()
	}
	return out
}

func TestGreedyTies(t *testing.T) {
	logits := []float32{1, 3, float32(math.Inf(-1)), 3, 2}
	s, err := NewSampler(len(logits), Params{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Sample(logits, NewRNG(1, 0))
	if err != nil || got != 1 {
		t.Fatalf("greedy with tied maxima at 1 and 3: got %d, %v; want 1", got, err)
	}
	out := make([]float32, len(logits))
	if err := s.Probs(logits, out); err != nil {
		t.Fatal(err)
	}
	for i, v := range out {
		if want := float32(0); i == 1 && v != 1 || i != 1 && v != want {
			t.Fatalf("greedy Probs = %v; want one-hot at 1", out)
		}
	}
	// Ties among the top-k threshold are all kept (Hugging Face rule).
	s2, _ := NewSampler(5, Params{Temperature: 1, TopK: 1})
	if err := s2.Probs([]float32{0, 5, 1, 5, 5}, out); err != nil {
		t.Fatal(err)
	}
	for i, v := range out {
		want := float32(0)
		if i == 1 || i == 3 || i == 4 {
			want = 1.0 / 3
		}
		if math.Abs(float64(v-want)) > 1e-7 {
			t.Fatalf("top-1 with three tied maxima: %v; want 1/3 on tokens 1, 3, 4", out)
		}
	}
}

func TestBadLogits(t *testing.T) {
	s, _ := NewSampler(3, Params{Temperature: 1})
	out := make([]float32, 3)
	ninf := float32(math.Inf(-1))
	for _, l := range [][]float32{
		{0, float32(math.NaN()), 1},
		{0, float32(math.Inf(1)), 1},
		{ninf, ninf, ninf},
	} {
		if err := s.Probs(l, out); err == nil {
			t.Errorf("Probs(%v) succeeded; want an error", l)
		}
		if _, err := s.Sample(l, NewRNG(0, 0)); err == nil {
			t.Errorf("Sample(%v) succeeded; want an error", l)
		}
	}
	if err := s.Probs([]float32{1, 2}, out); err == nil {
		t.Error("Probs with a short logits vector succeeded")
	}
	for _, p := range []Params{{Temperature: -1}, {Temperature: math.NaN()}, {Temperature: 1, TopP: 1.5}, {Temperature: 1, TopK: -1}, {Temperature: 1, MinP: -0.1}} {
		if _, err := NewSampler(3, p); err == nil {
			t.Errorf("NewSampler(%+v) succeeded; want an error", p)
		}
	}
}

// TestProbsAgainstNaive compares masks and values with the full-sort
// implementation over random logits and parameters, including vocabularies
// large enough to exercise the chunked top-p selection.
func TestProbsAgainstNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	cases := []Params{
		{Temperature: 1},
		{Temperature: 0.7, TopK: 5},
		{Temperature: 1.3, TopP: 0.9},
		{Temperature: 1, MinP: 0.05},
		{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.02},
		{Temperature: 2, TopP: 0.99},
		{Temperature: 1, TopK: 1},
		{Temperature: 0.5, TopP: 0.3},
	}
	for _, n := range []int{3, 17, 300, 5000} {
		for _, p := range cases {
			s, err := NewSampler(n, p)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]float32, n)
			for trial := 0; trial < 20; trial++ {
				logits := testutil.RandNormal(r, n, 1+float64(trial%4))
				// Some repeated values and masked tokens.
				logits[r.IntN(n)] = logits[r.IntN(n)]
				logits[r.IntN(n)] = float32(math.Inf(-1))
				if err := s.Probs(logits, out); err != nil {
					t.Fatal(err)
				}
				want := naiveProbs(logits, p)
				var sum float64
				for i := range out {
					sum += float64(out[i])
					if (out[i] > 0) != (want[i] > 0) {
						t.Fatalf("n=%d %v trial %d: token %d kept=%v, naive kept=%v (p=%g)", n, p, trial, i, out[i] > 0, want[i] > 0, want[i])
					}
					if d := math.Abs(float64(out[i]) - want[i]); d > 1e-6+1e-5*want[i] {
						t.Fatalf("n=%d %v trial %d: p[%d]=%g, naive %g", n, p, trial, i, out[i], want[i])
					}
				}
				if math.Abs(sum-1) > 1e-5 {
					t.Fatalf("n=%d %v: probabilities sum to %g", n, p, sum)
				}
			}
		}
	}
}

// TestSampleMatchesProbs draws many tokens with a fixed seed and checks by a
// chi-square test that Sample draws from the distribution Probs reports; the
// same counts tested against a slightly perturbed distribution must fail.
func TestSampleMatchesProbs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 20
	const draws = 200000
	for ci, p := range []Params{
		{Temperature: 1},
		{Temperature: 0.9, TopK: 8, TopP: 0.9, MinP: 0.01},
	} {
		s, _ := NewSampler(n, p)
		logits := testutil.RandNormal(r, n, 1)
		probs := make([]float32, n)
		if err := s.Probs(logits, probs); err != nil {
			t.Fatal(err)
		}
		rng := NewRNG(42, uint64(ci))
		counts := make([]int, n)
		for i := 0; i < draws; i++ {
			tok, err := s.Sample(logits, rng)
			if err != nil {
				t.Fatal(err)
			}
			counts[tok]++
		}
		want := make([]float64, n)
		for i, v := range probs {
			want[i] = float64(v)
		}
		if pv, _ := testutil.ChiSquareP(counts, want, draws); pv < 1e-4 {
			t.Errorf("%v: chi-square p-value %g < 1e-4: Sample does not draw from Probs", p, pv)
		}
		// Perturb: move 0.01 of mass from the most to the least probable kept token.
		hi, lo := 0, -1
		for i, v := range want {
			if v > want[hi] {
				hi = i
			}
			if v > 0 && (lo < 0 || v < want[lo]) {
				lo = i
			}
		}
		want[hi] -= 0.01
		want[lo] += 0.01
		if pv, _ := testutil.ChiSquareP(counts, want, draws); pv >= 1e-4 {
			t.Errorf("%v: a perturbed distribution passed (p-value %g): the test cannot fail", p, pv)
		}
	}
}

func TestReproducibleAndResumable(t *testing.T) {
	s, _ := NewSampler(50, Params{Temperature: 1, TopP: 0.95})
	logits := testutil.RandNormal(rand.New(rand.NewPCG(3, 4)), 50, 2)
	a, b := NewRNG(9, 5), NewRNG(9, 5)
	for i := 0; i < 100; i++ {
		x, _ := s.Sample(logits, a)
		y, _ := s.Sample(logits, b)
		if x != y {
			t.Fatalf("draw %d: same (seed, stream) gave %d and %d", i, x, y)
		}
	}
	state, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var c RNG
	if err := c.UnmarshalBinary(state); err != nil {
		t.Fatal(err)
	}
	if c.Seed() != 9 || c.Stream() != 5 {
		t.Fatalf("restored seed/stream %d/%d; want 9/5", c.Seed(), c.Stream())
	}
	for i := 0; i < 100; i++ {
		if x, y := a.Uint64(), c.Uint64(); x != y {
			t.Fatalf("draw %d after restore: %d != %d", i, x, y)
		}
	}
	if err := c.UnmarshalBinary([]byte("garbage")); err == nil {
		t.Fatal("UnmarshalBinary accepted garbage")
	}
	if err := c.UnmarshalBinary(state[:len(state)-3]); err == nil {
		t.Fatal("UnmarshalBinary accepted a truncated state")
	}
	a.Reset(9, 5)
	d := NewRNG(9, 5)
	if a.Uint64() != d.Uint64() {
		t.Fatal("Reset does not rewind to the start of the stream")
	}
}

// TestStreamsIndependent checks that neighbouring streams and seeds give
// different sequences and that paired draws are independent (chi-square on a
// 10x10 contingency table of uniform draws).
func TestStreamsIndependent(t *testing.T) {
	pairs := [][2]*RNG{
		{NewRNG(1, 0), NewRNG(1, 1)},
		{NewRNG(1, 0), NewRNG(2, 0)},
		{NewRNG(0, 1), NewRNG(1, 0)},
	}
	for pi, pr := range pairs {
		const n = 100000
		counts := make([]int, 100)
		same := 0
		for i := 0; i < n; i++ {
			u, v := pr[0].Float64(), pr[1].Float64()
			if u == v {
				same++
			}
			counts[int(u*10)*10+int(v*10)]++
		}
		if same > 0 {
			t.Errorf("pair %d: %d identical draws", pi, same)
		}
		probs := make([]float64, 100)
		for i := range probs {
			probs[i] = 0.01
		}
		if pv, _ := testutil.ChiSquareP(counts, probs, n); pv < 1e-4 {
			t.Errorf("pair %d: joint draws not independent uniform (p-value %g)", pi, pv)
		}
	}
}

func TestNoAllocations(t *testing.T) {
	const n = 32000
	r := rand.New(rand.NewPCG(5, 6))
	logits := testutil.RandNormal(r, n, 3)
	rng := NewRNG(1, 1)
	for _, p := range []Params{{}, {Temperature: 1}, {Temperature: 0.8, TopK: 50, TopP: 0.9, MinP: 0.05}, {Temperature: 1, TopP: 0.95}} {
		s, _ := NewSampler(n, p)
		allocs := testing.AllocsPerRun(20, func() {
			if _, err := s.Sample(logits, rng); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocations per Sample; want 0", p, allocs)
		}
	}
}

func TestKthLargest(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for trial := 0; trial < 200; trial++ {
		n := 1 + r.IntN(60)
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.IntN(5)) // many ties
		}
		s := append([]float32(nil), v...)
		sort.Slice(s, func(a, b int) bool { return s[a] > s[b] })
		k := 1 + r.IntN(n)
		if got := kthLargest(v, k); got != s[k-1] {
			t.Fatalf("kthLargest(k=%d) = %v; want %v", k, got, s[k-1])
		}
	}
}

func BenchmarkSample(b *testing.B) {
	const n = 128256
	logits := testutil.RandNormal(rand.New(rand.NewPCG(1, 1)), n, 3)
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"greedy", Params{}},
		{"t1", Params{Temperature: 1}},
		{"topk50", Params{Temperature: 1, TopK: 50}},
		{"topp0.9", Params{Temperature: 1, TopP: 0.9}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, _ := NewSampler(n, c.p)
			rng := NewRNG(1, 1)
			for b.Loop() {
				if _, err := s.Sample(logits, rng); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
