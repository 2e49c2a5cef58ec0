package cuda

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// The loss group's checks beyond the conformance suite, at the sizes a
// model runs them at (a vocabulary-wide row, k in the hundreds) and against
// the CPU device itself: the conformance suite's rows are at most 300 wide.

// lossTensor returns a new [rows, cols] float32 tensor of d holding v.
func lossTensor(t *testing.T, d tensor.Device, v []float32, rows, cols int) tensor.Tensor {
	t.Helper()
	x, err := d.Alloc(tensor.F32, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	d.Write(x, v)
	return x
}

// lossRand returns n normal values of scale s, rounded to multiples of
// round when round > 0 (few distinct values: ties).
func lossRand(r *rand.Rand, n int, s, round float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		x := r.NormFloat64() * s
		if round > 0 {
			x = math.Round(x/round) * round
		}
		v[i] = float32(x)
	}
	return v
}

// TestTopKWide checks TopK on vocabulary-sized rows against the CPU
// device's: the same indices in the same order, ties included.
func TestTopKWide(t *testing.T) {
	d := openTest(t)
	cpu := cpu.New(nil)
	r := rand.New(rand.NewPCG(31, 7))
	for _, c := range []struct {
		n     int
		round float64
		mask  bool // all but every 500th value -Inf (a constrained vocabulary)
	}{{128256, 0, false}, {131072, 0.25, false}, {50000, 1, false}, {60000, 0, true}} {
		v := lossRand(r, c.n, 3, c.round)
		v[17] = float32(math.Inf(-1))
		for i := range v {
			if c.mask && i%500 != 3 {
				v[i] = float32(math.Inf(-1))
			}
		}
		x, xc := lossTensor(t, d, v, 1, c.n), lossTensor(t, cpu, v, 1, c.n)
		for _, k := range []int{1, 40, 300, 2000, 5000} { // past 1024 and 4096: the radix path
			got, want := make([]int, k), make([]int, k)
			if g, w := d.TopK(got, x), cpu.TopK(want, xc); g != w || !slices.Equal(got, want) {
				t.Fatalf("TopK %d of %d values (rounded to %v): differs from the CPU's (%d, %d)", k, c.n, c.round, g, w)
			}
		}
	}
}

// TestLossesWide runs the row ops on a few vocabulary-wide rows against the
// CPU device: ArgMax exactly, Softmax and the gradients within 1e-6, the
// losses within 1e-6 relative, and the loss's bits the same twice.
func TestLossesWide(t *testing.T) {
	d := openTest(t)
	cpu := cpu.New(nil)
	r := rand.New(rand.NewPCG(32, 7))
	const rows, v = 3, 32000
	lv := lossRand(r, rows*v, 4, 0)
	lv[v+5] = float32(math.Inf(-1))
	targets := []int32{7, -1, 31999}
	weights := []float32{1, 0.5, 0.25}
	dev := func(dv tensor.Device) (x, tg, w, g tensor.Tensor) {
		x = lossTensor(t, dv, lv, rows, v)
		tg, err := dv.Alloc(tensor.I32, rows, 1)
		if err != nil {
			t.Fatal(err)
		}
		dv.WriteI32(tg, targets)
		w = lossTensor(t, dv, weights, rows, 1)
		g = lossTensor(t, dv, make([]float32, rows*v), rows, v)
		return x, tg, w, g
	}
	x, tg, w, g := dev(d)
	xc, tgc, wc, gc := dev(cpu)

	ia, ib := make([]int32, rows), make([]int32, rows)
	d.ArgMax(ia, x)
	cpu.ArgMax(ib, xc)
	if !slices.Equal(ia, ib) {
		t.Fatalf("ArgMax %v, the CPU's %v", ia, ib)
	}

	near := func(what string, a, b tensor.Tensor) {
		t.Helper()
		ga, gb := make([]float32, rows*v), make([]float32, rows*v)
		d.Read(ga, a)
		cpu.Read(gb, b)
		for i := range ga {
			if diff := math.Abs(float64(ga[i] - gb[i])); !(diff <= 1e-6) {
				t.Fatalf("%s: value %d is %v, the CPU's %v", what, i, ga[i], gb[i])
			}
		}
	}
	closeTo := func(what string, a, b float64) {
		t.Helper()
		if diff := math.Abs(a - b); !(diff <= 1e-6*math.Max(1, math.Abs(b))) {
			t.Fatalf("%s: %.12g, the CPU's %.12g", what, a, b)
		}
	}

	la, lb := d.CrossEntropy(g, x, tg, w), cpu.CrossEntropy(gc, xc, tgc, wc)
	closeTo("CrossEntropy", la, lb)
	near("CrossEntropy dlogits", g, gc)
	if again := d.CrossEntropy(tensor.Tensor{}, x, tg, w); again != la {
		t.Fatalf("CrossEntropy %v, then %v", la, again)
	}
	// Target weights that need not sum to 1, over logits without the -Inf
	// (0·-Inf in Σp·x would make the loss NaN, on either device).
	pv := lossRand(r, rows*v, 1e-4, 0)
	for i := range pv {
		pv[i] = float32(math.Abs(float64(pv[i])))
	}
	p, pc := lossTensor(t, d, pv, rows, v), lossTensor(t, cpu, pv, rows, v)
	sv := slices.Clone(lv)
	sv[v+5] = 0
	sx, sxc := lossTensor(t, d, sv, rows, v), lossTensor(t, cpu, sv, rows, v)
	la, lb = d.SoftCrossEntropy(g, sx, p, w), cpu.SoftCrossEntropy(gc, sxc, pc, wc)
	closeTo("SoftCrossEntropy", la, lb)
	near("SoftCrossEntropy dlogits", g, gc)
	// The LK losses: against the same target weights (α over a support
	// whose mass is not 1) and against the one-hot targets, the -Inf logit
	// in the skipped row.
	for _, l := range []tensor.LK{{KL: 1}, {TV: 1}, {NLA: 1}, {Hybrid: 1, Eta: 3}, {KL: 0.1, TV: 0.9, NLA: 0.3, Hybrid: 0.5, Eta: 1.5}} {
		la, aa := d.LKLoss(g, sx, p, w, l)
		lb, ab := cpu.LKLoss(gc, sxc, pc, wc, l)
		closeTo("LKLoss", la, lb)
		closeTo("LKLoss α", aa, ab)
		near("LKLoss dlogits", g, gc)
		if again, _ := d.LKLoss(tensor.Tensor{}, sx, p, w, l); again != la {
			t.Fatalf("LKLoss %v, then without dlogits %v", la, again)
		}
		la, aa = d.LKLossHard(g, x, tg, w, l)
		lb, ab = cpu.LKLossHard(gc, xc, tgc, wc, l)
		closeTo("LKLossHard", la, lb)
		closeTo("LKLossHard α", aa, ab)
		near("LKLossHard dlogits", g, gc)
	}

	ra, rb := make([]float64, rows), make([]float64, rows)
	ka, kb := make([]int32, rows), make([]int32, rows)
	d.CrossEntropyEval(ra, ka, x, tg)
	cpu.CrossEntropyEval(rb, kb, xc, tgc)
	for i := range ra {
		closeTo("CrossEntropyEval", ra[i], rb[i])
	}
	if !slices.Equal(ka, kb) {
		t.Fatalf("CrossEntropyEval ranks %v, the CPU's %v", ka, kb)
	}

	d.Softmax(x, 1/0.7)
	cpu.Softmax(xc, 1/0.7)
	near("Softmax", x, xc)
}

// TestLossNoAllocs checks that the loss ops allocate nothing on the Go heap
// per call (TopK and ArgMax run once per decoded token).
func TestLossNoAllocs(t *testing.T) {
	d := openTest(t)
	r := rand.New(rand.NewPCG(33, 7))
	const rows, v = 4, 300
	x := lossTensor(t, d, lossRand(r, rows*v, 2, 0), rows, v)
	g := lossTensor(t, d, make([]float32, rows*v), rows, v)
	row := x.RowRange(1, 2)
	tg, err := d.Alloc(tensor.I32, rows, 1)
	if err != nil {
		t.Fatal(err)
	}
	d.WriteI32(tg, []int32{1, 2, -1, 299})
	cols, err := d.Alloc(tensor.I32, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	d.WriteI32(cols, []int32{0, 5, 299})
	out, _ := d.Alloc(tensor.F32, rows, 3)
	idx, am := make([]int, 20), make([]int32, rows)
	rl, rk := make([]float64, rows), make([]int32, rows)
	allocs := testing.AllocsPerRun(5, func() {
		d.TopK(idx, row)
		d.ArgMax(am, x)
		d.GatherCols(out, x, cols)
		d.CrossEntropy(g, x, tg, tensor.Tensor{})
		d.SoftCrossEntropy(g, x, x, tensor.Tensor{})
		d.LKLoss(g, x, x, tensor.Tensor{}, tensor.LK{Hybrid: 1, Eta: 3})
		d.LKLossHard(g, x, tg, tensor.Tensor{}, tensor.LK{NLA: 1})
		d.CrossEntropyEval(rl, rk, x, tg)
		d.Softmax(g, 1)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run of the loss ops, want 0", allocs)
	}
}
