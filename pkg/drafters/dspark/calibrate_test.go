package dspark

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestECEHandComputed checks ECE on cases worked out by hand.
func TestECEHandComputed(t *testing.T) {
	for _, c := range []struct {
		name    string
		p, y, w []float64
		bins    int
		want    float64
	}{
		// Bin [0, .5): 0.1-0 + 0.2-1 = -0.7; bin [.5, 1]: 0.9-1 + 1-1 = -0.1
		// (p = 1 in the last bin). (0.7 + 0.1) / 4.
		{"two bins", []float64{0.1, 0.2, 0.9, 1}, []float64{0, 1, 1, 1}, nil, 2, 0.2},
		// The same with the second item weighing 3: |0.1 - 3·0.8| + 0.1 over 6.
		{"weighted", []float64{0.1, 0.2, 0.9, 1}, []float64{0, 1, 1, 1}, []float64{1, 3, 1, 1}, 2, 0.4},
		// Soft outcomes in one bin cancel: |-0.18 + 0.25| / 2 (apart
		// they would give 0.215).
		{"soft, same bin", []float64{0.32, 0.35}, []float64{0.5, 0.1}, nil, 10, 0.035},
		{"soft, two bins", []float64{0.32, 0.45}, []float64{0.5, 0.2}, nil, 10, (0.18 + 0.25) / 2},
		{"one bin is |mean p - mean y|", []float64{0.1, 0.9, 0.6}, []float64{1, 0, 1}, nil, 1, math.Abs(1.6-2) / 3},
		{"perfect", []float64{0, 1, 0.5, 0.5}, []float64{0, 1, 0, 1}, nil, 15, 0},
		{"empty", nil, nil, nil, 15, 0},
		// Out of [0, 1]: clamped into the end bins (1e300·15 is beyond
		// int's range): bin 0 holds -0.5-0 and 0.05-1, the last 1e300-1.
		{"out of range", []float64{-0.5, 0.05, 1e300}, []float64{0, 1, 1}, nil, 15, (1.45 + (1e300 - 1)) / 3},
		{"zero weight", []float64{0.3}, []float64{1}, []float64{0}, 15, 0},
	} {
		got, err := ECE(c.p, c.y, c.w, c.bins)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: ECE %.15g, want %.15g", c.name, got, c.want)
		}
	}
	if _, err := ECE([]float64{0.5}, nil, nil, 15); err == nil {
		t.Error("ECE accepted 1 prediction with 0 outcomes")
	}
	if _, err := ECE([]float64{0.5}, []float64{1}, []float64{1, 1}, 15); err == nil {
		t.Error("ECE accepted 2 weights for 1 item")
	}
	if _, err := ECE([]float64{0.5}, []float64{1}, nil, 0); err == nil {
		t.Error("ECE accepted 0 bins")
	}
}

// TestSTSGrid checks the grid: T = 1 first and exactly, every value once,
// log-spaced over 0.05..20.
func TestSTSGrid(t *testing.T) {
	g := STSGrid()
	if g[0] != 1 {
		t.Fatalf("the grid starts at %g, want exactly 1", g[0])
	}
	lo, hi := math.Inf(1), 0.0
	seen := map[float64]bool{}
	for i, v := range g {
		if seen[v] {
			t.Fatalf("%g twice", v)
		}
		seen[v] = true
		lo, hi = min(lo, v), max(hi, v)
		if i > 0 && math.Abs(math.Log(v)) < math.Abs(math.Log(g[i-1]))-1e-12 {
			t.Fatalf("grid[%d] = %g is nearer 1 than grid[%d] = %g: ties would not go toward 1", i, v, i-1, g[i-1])
		}
	}
	if lo > 0.051 || hi < 19.9 {
		t.Fatalf("grid spans %g..%g, want about 0.05..20", lo, hi)
	}
}

// synthBlocks draws n blocks of B slots whose slot k succeeds, given the
// slots before it did, with probability σ(z_k/T*_k): the confidence head
// is miscalibrated by exactly T*_k. soft gives the probabilities themselves
// as outcomes (as α is), else Bernoulli draws of them. A quarter of the
// blocks are cut short (as blocks near a response's end are).
func synthBlocks(seed uint64, n int, tStar []float64, soft bool) (logits, outcomes []float64, valid []int) {
	r := rand.New(rand.NewPCG(seed, 77))
	B := len(tStar)
	logits, outcomes, valid = make([]float64, n*B), make([]float64, n*B), make([]int, n)
	for b := range n {
		valid[b] = B
		if r.IntN(4) == 0 {
			valid[b] = r.IntN(B + 1)
		}
		for k := range B {
			z := 1 + 2*r.NormFloat64()
			p := logistic(z / tStar[k])
			logits[b*B+k] = z
			switch {
			case soft:
				outcomes[b*B+k] = p
			case r.Float64() < p:
				outcomes[b*B+k] = 1
			}
		}
	}
	return logits, outcomes, valid
}

// prefixECE is the ECE per slot of Π_{i≤k} σ(z_i/T_i) against the prefix
// outcomes with temperatures T, computed directly from the definition
// (independently of FitSTS's running products).
func prefixECE(t *testing.T, B int, logits, outcomes []float64, valid []int, T []float64) []float64 {
	t.Helper()
	out := make([]float64, B)
	for k := range B {
		var p, y []float64
		for b, v := range valid {
			if v <= k {
				continue
			}
			pp, yy := 1.0, 1.0
			for i := 0; i <= k; i++ {
				pp *= 1 / (1 + math.Exp(-logits[b*B+i]/T[i]))
				yy *= outcomes[b*B+i]
			}
			p, y = append(p, pp), append(y, yy)
		}
		var err error
		if out[k], err = ECE(p, y, nil, CalibrationBins); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestFitSTSRecoversTemperatures draws blocks miscalibrated by known
// per-slot temperatures (over-confident, under-confident, calibrated) and
// checks that the fit finds each within a small factor, and that on a
// separate draw (not fitted on) the calibrated products' ECE is lower than
// the raw ones' wherever T* ≠ 1 and close to that of the true temperatures.
func TestFitSTSRecoversTemperatures(t *testing.T) {
	tStar := []float64{0.5, 2, 1, 3, 0.7}
	B := len(tStar)
	for _, soft := range []bool{false, true} {
		// Bernoulli outcomes carry sampling noise; soft ones only the
		// binning's. The factors allowed are the grid step (1.06) plus
		// noise: over seeds 10..19 of this draw the worst ratio of a
		// Bernoulli fit was 1.32 (slot 3, T* = 3: a flat sigmoid, seen
		// through a product of four), so 1.35 (five steps); soft fits land
		// on the nearest grid point, so 1.12 (two steps).
		tol := 1.35
		if soft {
			tol = 1.12
		}
		logits, outcomes, valid := synthBlocks(1, 20000, tStar, soft)
		f, err := FitSTS(B, logits, outcomes, valid)
		if err != nil {
			t.Fatal(err)
		}
		for k, T := range f.Temperatures {
			if r := T / tStar[k]; r > tol || r < 1/tol {
				t.Errorf("soft %v slot %d: fitted T %.3f, true %.3f (ratio %.3f, allowed %.2f)", soft, k, T, tStar[k], r, tol)
			}
			if f.After[k] > f.Before[k] {
				t.Errorf("soft %v slot %d: ECE after %.4f > before %.4f on the fit data (T = 1 is on the grid)", soft, k, f.After[k], f.Before[k])
			}
		}
		// The fit's own ECEs are the definition's, and PrefixECE's.
		pe, err := PrefixECE(B, logits, outcomes, valid, f.Temperatures)
		if err != nil {
			t.Fatal(err)
		}
		pe1, err := PrefixECE(B, logits, outcomes, valid, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range prefixECE(t, B, logits, outcomes, valid, f.Temperatures) {
			if math.Abs(v-f.After[k]) > 1e-12 || math.Abs(v-pe[k]) > 1e-12 {
				t.Errorf("soft %v slot %d: fit reports ECE %.15g, PrefixECE %.15g, the definition gives %.15g", soft, k, f.After[k], pe[k], v)
			}
			if math.Abs(pe1[k]-f.Before[k]) > 1e-12 {
				t.Errorf("soft %v slot %d: fit reports ECE before %.15g, PrefixECE at T = 1 %.15g", soft, k, f.Before[k], pe1[k])
			}
		}
		tl, to, tv := synthBlocks(2, 20000, tStar, soft)
		ones := []float64{1, 1, 1, 1, 1}
		before, after, truth := prefixECE(t, B, tl, to, tv, ones), prefixECE(t, B, tl, to, tv, f.Temperatures), prefixECE(t, B, tl, to, tv, tStar)
		t.Logf("soft %v: T %.3f (true %v); held-out ECE before %.4f after %.4f with true T %.4f; counts %v",
			soft, f.Temperatures, tStar, before, after, truth, f.Counts)
		for k := range B {
			// Slot 2's T* is 1 but the products through it are not
			// calibrated until slots 0 and 1 are: every slot improves.
			if after[k] >= before[k] {
				t.Errorf("soft %v slot %d: held-out ECE after %.4f not below before %.4f", soft, k, after[k], before[k])
			}
			if after[k] > truth[k]+0.01 {
				t.Errorf("soft %v slot %d: held-out ECE after %.4f, with the true temperatures %.4f", soft, k, after[k], truth[k])
			}
		}
	}
}

// TestFitSTSCalibratedHead checks that a head calibrated already keeps T
// near 1 (Bernoulli noise moves it: over seeds 10..19 of this draw by up
// to 1.19, three grid steps, so four are allowed), exactly 1 when the
// outcomes equal the predictions, and exactly 1 on a tie: confidences so
// high that σ rounds to 1 for every T ≤ 1.
func TestFitSTSCalibratedHead(t *testing.T) {
	tStar := []float64{1, 1, 1, 1}
	B := len(tStar)
	logits, outcomes, valid := synthBlocks(3, 20000, tStar, false)
	f, err := FitSTS(B, logits, outcomes, valid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("calibrated head, Bernoulli outcomes: T %.3f, ECE %.4f -> %.4f", f.Temperatures, f.Before, f.After)
	for k, T := range f.Temperatures {
		if T > 1.26 || T < 1/1.26 {
			t.Errorf("slot %d: T %.3f for a calibrated head", k, T)
		}
	}
	logits, outcomes, valid = synthBlocks(3, 2000, tStar, true)
	if f, err = FitSTS(B, logits, outcomes, valid); err != nil {
		t.Fatal(err)
	}
	for k, T := range f.Temperatures {
		if T != 1 || f.Before[k] != 0 || f.After[k] != 0 {
			t.Errorf("slot %d: outcomes equal to the predictions give T %g, ECE %g -> %g; want 1, 0, 0", k, T, f.Before[k], f.After[k])
		}
	}
	for i := range logits {
		logits[i], outcomes[i] = 50, 1
	}
	if f, err = FitSTS(B, logits, outcomes, valid); err != nil {
		t.Fatal(err)
	}
	for k, T := range f.Temperatures {
		if T != 1 {
			t.Errorf("slot %d: a tie between T ≤ 1 went to %g", k, T)
		}
	}
}

// TestFitSTSEdges checks blocks that never reach a slot, determinism and
// that the fit's allocations do not grow with the number of blocks.
func TestFitSTSEdges(t *testing.T) {
	// No block reaches slot 2: T = 1, ECE 0, count 0.
	logits := []float64{2, -1, 0, 1, 3, 0}
	outcomes := []float64{1, 0, 0, 0, 1, 0}
	f, err := FitSTS(3, logits, outcomes, []int{2, 1})
	if err != nil {
		t.Fatal(err)
	}
	if f.Counts[0] != 2 || f.Counts[1] != 1 || f.Counts[2] != 0 || f.Temperatures[2] != 1 || f.After[2] != 0 {
		t.Fatalf("fit %+v", f)
	}
	if f, err = FitSTS(2, nil, nil, nil); err != nil || f.Temperatures[0] != 1 || f.Temperatures[1] != 1 {
		t.Fatalf("no blocks: %+v, %v", f, err)
	}
	tStar := []float64{0.6, 1.8, 1}
	l, o, v := synthBlocks(4, 3000, tStar, false)
	a, _ := FitSTS(3, l, o, v)
	b, _ := FitSTS(3, l, o, v)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two fits of the same blocks differ")
	}
	allocs := func(n int) float64 {
		l, o, v := synthBlocks(5, n, tStar, true)
		return testing.AllocsPerRun(3, func() {
			if _, err := FitSTS(3, l, o, v); err != nil {
				t.Fatal(err)
			}
		})
	}
	if small, large := allocs(50), allocs(5000); small != large || large > 20 {
		t.Fatalf("FitSTS allocates %v times for 50 blocks, %v for 5000: want a few, independent of the blocks", small, large)
	}
}

// TestFitSTSErrors checks the input checks.
func TestFitSTSErrors(t *testing.T) {
	for _, c := range []struct {
		name             string
		B                int
		logits, outcomes []float64
		valid            []int
		want             string
	}{
		{"block size", 0, nil, nil, nil, "block size"},
		{"lengths", 2, []float64{1}, []float64{1, 1}, []int{2}, "want 2 of each"},
		{"valid", 2, []float64{1, 1}, []float64{1, 1}, []int{3}, "valid slots"},
		{"logit", 2, []float64{1, math.NaN()}, []float64{1, 1}, []int{2}, "not finite"},
		{"outcome", 2, []float64{1, 1}, []float64{1, 1.5}, []int{2}, "outside [0, 1]"},
		{"outcome NaN", 2, []float64{1, 1}, []float64{math.NaN(), 1}, []int{1}, "outside [0, 1]"},
	} {
		_, err := FitSTS(c.B, c.logits, c.outcomes, c.valid)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
	if _, err := PrefixECE(2, []float64{1, 1}, []float64{1, 1}, []int{2}, []float64{1}); err == nil {
		t.Error("PrefixECE accepted 1 temperature for 2 slots")
	}
	if _, err := PrefixECE(2, []float64{1, 1}, []float64{1, 1}, []int{3}, nil); err == nil {
		t.Error("PrefixECE accepted 3 valid slots of 2")
	}
	// Past a block's valid slots nothing is checked: they are padding.
	if _, err := FitSTS(2, []float64{1, math.NaN()}, []float64{1, 7}, []int{1}); err != nil {
		t.Errorf("padding checked: %v", err)
	}
}

// TestCalibrateValidate checks that Calibrate's result validates for its
// block size and the errors Validate gives.
func TestCalibrateValidate(t *testing.T) {
	l, g, v := synthBlocks(6, 500, []float64{0.5, 2}, false)
	_, s, _ := synthBlocks(6, 500, []float64{0.5, 2}, true)
	c, err := Calibrate(2, l, g, s, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(2); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, n := range v {
		if n > 0 {
			want++
		}
	}
	if c.Blocks != want || len(c.ECE.GreedyBefore) != 2 || len(c.ECE.SampledAfter) != 2 {
		t.Fatalf("calibration %+v: want %d blocks and 2 ECEs per list", c, want)
	}
	if reflect.DeepEqual(c.Greedy, c.Sampled) && reflect.DeepEqual(c.ECE.GreedyBefore, c.ECE.SampledBefore) {
		t.Fatal("the greedy and sampled fits are the same: one rule's outcomes were used for both")
	}
	if _, err := Calibrate(2, l, g[:1], s, v); err == nil || !strings.Contains(err.Error(), "greedy") {
		t.Errorf("a short greedy set: %v", err)
	}
	for _, bad := range []struct {
		name string
		c    Calibration
		B    int
		want string
	}{
		{"method", Calibration{Method: "platt", Greedy: []float64{1}, Sampled: []float64{1}}, 1, "method"},
		{"greedy length", Calibration{Method: CalibrationSTS, Greedy: []float64{1}, Sampled: []float64{1, 1}}, 2, "greedy holds 1"},
		{"sampled length", Calibration{Method: CalibrationSTS, Greedy: []float64{1, 1}, Sampled: []float64{1}}, 2, "sampled holds 1"},
		{"zero", Calibration{Method: CalibrationSTS, Greedy: []float64{0}, Sampled: []float64{1}}, 1, "greedy[0]"},
		{"negative", Calibration{Method: CalibrationSTS, Greedy: []float64{1}, Sampled: []float64{-1}}, 1, "sampled[0]"},
		{"NaN", Calibration{Method: CalibrationSTS, Greedy: []float64{1, math.NaN()}, Sampled: []float64{1, 1}}, 2, "greedy[1]"},
		{"Inf", Calibration{Method: CalibrationSTS, Greedy: []float64{1}, Sampled: []float64{math.Inf(1)}}, 1, "sampled[0]"},
	} {
		if err := bad.c.Validate(bad.B); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error naming %q", bad.name, err, bad.want)
		}
	}
	if got := c.Temperatures(true); !reflect.DeepEqual(got, c.Greedy) {
		t.Error("Temperatures(true) is not Greedy")
	}
	if got := c.Temperatures(false); !reflect.DeepEqual(got, c.Sampled) {
		t.Error("Temperatures(false) is not Sampled")
	}
}

// TestCalibrateCrossFit: a rule's fit is applied only when, fitted on half
// the blocks, it lowers the ECE on the other half. A head miscalibrated by
// known temperatures on many blocks gets its fit; a head whose soft outcomes
// are exactly its own confidences (nothing to fix: the raw products'
// ECE is 0 on either half) keeps every T = 1; and on small draws of a
// calibrated head the decision and the temperatures agree either way.
func TestCalibrateCrossFit(t *testing.T) {
	tStar := []float64{0.5, 2, 1}
	l, g, v := synthBlocks(11, 4000, tStar, false)
	s := make([]float64, len(l)) // the same blocks' soft outcomes
	for i, z := range l {
		s[i] = logistic(z / tStar[i%3])
	}
	c, err := Calibrate(3, l, g, s, v)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("miscalibrated: greedy T %v cross %+v; sampled T %v cross %+v", c.Greedy, c.Cross.Greedy, c.Sampled, c.Cross.Sampled)
	for name, r := range map[string]struct {
		temps []float64
		cf    CrossFit
	}{"greedy": {c.Greedy, c.Cross.Greedy}, "sampled": {c.Sampled, c.Cross.Sampled}} {
		if !r.cf.Applied || !(r.cf.After < r.cf.Before) {
			t.Errorf("%s: a head off by %v on 4000 blocks: fit not applied (%+v)", name, tStar, r.cf)
		}
		for k, want := range tStar {
			if ratio := r.temps[k] / want; ratio < 1/1.35 || ratio > 1.35 {
				t.Errorf("%s: T[%d] = %g, want about %g", name, k, r.temps[k], want)
			}
		}
	}

	// Soft outcomes equal to the confidences: nothing to calibrate.
	for i := range s {
		s[i] = logistic(l[i])
	}
	c, err = Calibrate(3, l, g, s, v)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cross.Sampled.Applied || !slices.Equal(c.Sampled, []float64{1, 1, 1}) || !slices.Equal(c.ECE.SampledAfter, c.ECE.SampledBefore) {
		t.Errorf("a calibrated head: sampled T %v, ECE %v -> %v, cross %+v; want T = 1 kept", c.Sampled, c.ECE.SampledBefore, c.ECE.SampledAfter, c.Cross.Sampled)
	}

	// Small draws of a calibrated head: whichever way the check goes, the
	// temperatures follow it.
	rejected := 0
	for seed := range uint64(8) {
		l, g, v := synthBlocks(100+seed, 120, []float64{1, 1, 1}, false)
		c, err := Calibrate(3, l, g, g, v)
		if err != nil {
			t.Fatal(err)
		}
		cf := c.Cross.Greedy
		switch {
		case !cf.Applied:
			rejected++
			if !slices.Equal(c.Greedy, []float64{1, 1, 1}) || !slices.Equal(c.ECE.GreedyAfter, c.ECE.GreedyBefore) {
				t.Errorf("seed %d: fit rejected (%+v) but T %v, ECE after %v", seed, cf, c.Greedy, c.ECE.GreedyAfter)
			}
		case !(cf.After < cf.Before):
			t.Errorf("seed %d: applied with cross ECE %g -> %g", seed, cf.Before, cf.After)
		}
	}
	t.Logf("calibrated head, 120 blocks: the fit was rejected on %d of 8 draws", rejected)
	if rejected == 0 {
		t.Error("on 120 blocks of a calibrated head the fit was never rejected: the cross-fit check does not bite")
	}
}
