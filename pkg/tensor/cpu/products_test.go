package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// oneThread is a backend saying that each call runs on one thread, so that
// Products splits its large products over the workers.
type oneThread struct{ cpu.Backend }

func (oneThread) Threads() int { return 1 }

// plain is a backend saying nothing of its threads: Products splits none of
// its GEMM products.
type plain struct{ cpu.Backend }

// productCase is one weight of TestProducts: its matrix, prepared or not,
// and its values widened to float32 for the reference.
type productCase struct {
	name string
	w    tensor.Weight
	ref  []float32
}

// productCases returns a float32 weight [n, k] plain and prepared, and its
// bf16 and f16 roundings.
func productCases(r *rand.Rand, p *cpu.Products, n, k int) []productCase {
	w, bf, hf := benchWeights(r, n, k)
	f := tensor.WeightOf(tensor.F32Matrix(w, n, k))
	prep := f
	p.Prepare(&prep)
	if (prep.ExtraBytes() != 0) != cpu.TransposedFast() {
		panic(fmt.Sprintf("Prepare of a %dx%d float32 weight kept %d bytes beside it (transposed kernels fast: %v)", n, k, prep.ExtraBytes(), cpu.TransposedFast()))
	}
	bw, hw := make([]float32, n*k), make([]float32, n*k)
	tensor.BF16ToF32(bw, bf)
	tensor.F16ToF32(hw, hf)
	return []productCase{
		{"f32", f, w},
		{"f32 prepared", prep, w},
		{"bf16", tensor.WeightOf(tensor.HalfMatrix(tensor.BF16, bf, n, k)), bw},
		{"f16", tensor.WeightOf(tensor.HalfMatrix(tensor.F16, hf, n, k)), hw},
	}
}

// TestProducts: MulT computes x·Wᵀ (or adds it) within float32 rounding on
// every backend, for every dtype and layout and row count (few rows, just
// past FewRows, many; past FewRows a bfloat16 weight's product is of the
// inputs rounded to bfloat16 where RoundsBF16Activations), split over the
// workers or not; and up to FewRows rows
// each row's result is bit for bit the one-row product's, whatever the
// rows beside it.
func TestProducts(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	backends := []cpu.Backend{cpu.DefaultBackend(), cpu.PureGo(), oneThread{cpu.DefaultBackend()}, plain{cpu.DefaultBackend()}}
	for _, shape := range [][2]int{{70, 45}, {640, 512}} {
		n, k := shape[0], shape[1]
		const maxRows = 100
		x := make([]float32, maxRows*k)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		xr := roundedBF16(x)
		for _, be := range backends {
			p := cpu.NewProducts(be)
			for _, c := range productCases(r, p, n, k) {
				for _, rows := range []int{1, 5, tensor.FewRows, tensor.FewRows + 1, maxRows} {
					for _, acc := range []bool{false, true} {
						what := fmt.Sprintf("%T %dx%d %s, %d rows, acc %v", be, n, k, c.name, rows, acc)
						out := make([]float32, rows*n)
						for i := range out {
							out[i] = float32(i%7) - 3
						}
						// A bfloat16 product past FewRows rows rounds x to
						// bfloat16 where RoundsBF16Activations.
						xs := x
						if c.name == "bf16" && rows > tensor.FewRows && cpu.RoundsBF16Activations() {
							xs = xr
						}
						want := make([]float64, rows*n)
						for i := range rows {
							for j := range n {
								if acc {
									want[i*n+j] = float64(out[i*n+j])
								}
								for q := range k {
									want[i*n+j] += float64(xs[i*k+q]) * float64(c.ref[j*k+q])
								}
							}
						}
						p.MulT(out, x, &c.w, rows, acc)
						for i := range want {
							if d := math.Abs(float64(out[i]) - want[i]); d > 1e-5*float64(k)*(1+math.Abs(want[i])) {
								t.Fatalf("%s: element %d is %g, want %g", what, i, out[i], want[i])
							}
						}
						if rows > tensor.FewRows || acc {
							continue
						}
						one := make([]float32, n)
						for i := range rows {
							p.MulT(one, x[i*k:], &c.w, 1, false)
							for j := range one {
								if got := out[i*n+j]; math.Float32bits(got) != math.Float32bits(one[j]) {
									t.Fatalf("%s: row %d column %d is %g, the one-row product %g", what, i, j, got, one[j])
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestPrepareChoosesFromTheSet: Prepare keeps transposed copies only of a
// set of float32 weights (on a processor that runs them fast) small enough
// to sit near the caches; one 16-bit weight in the set, or a set past the
// bound, gets none; and the matrices are unchanged.
func TestPrepareChoosesFromTheSet(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	p := cpu.NewProducts(cpu.PureGo())
	w, bf, _ := benchWeights(r, 96, 64)
	a, b := tensor.WeightOf(tensor.F32Matrix(w, 96, 64)), tensor.WeightOf(tensor.F32Matrix(w[:64*64], 64, 64))
	p.Prepare(&a, &b)
	if fast := cpu.TransposedFast(); (a.ExtraBytes() != 0) != fast || (b.ExtraBytes() != 0) != fast {
		t.Fatalf("small float32 set: %d and %d bytes beside the matrices, transposed kernels fast: %v", a.ExtraBytes(), b.ExtraBytes(), fast)
	}
	if m := a.Matrix(); &m.F32[0] != &w[0] || m.Rows != 96 {
		t.Fatal("Prepare changed the matrix")
	}
	c, h := tensor.WeightOf(tensor.F32Matrix(w, 96, 64)), tensor.WeightOf(tensor.HalfMatrix(tensor.BF16, bf, 96, 64))
	p.Prepare(&c, &h)
	if c.ExtraBytes() != 0 || h.ExtraBytes() != 0 {
		t.Fatal("a set with a bf16 weight got transposed copies")
	}
	// Only the sizes decide past the bound: the values are never read.
	big := tensor.WeightOf(tensor.Matrix{DType: tensor.F32, Rows: 1 << 13, Cols: 1 << 11})
	d := tensor.WeightOf(tensor.F32Matrix(w, 96, 64))
	p.Prepare(&big, &d)
	if big.ExtraBytes() != 0 || d.ExtraBytes() != 0 {
		t.Fatal("a set of more than 64 MiB got transposed copies")
	}
	var empty tensor.Weight
	if !empty.Empty() || empty.ExtraBytes() != 0 {
		t.Fatal("the zero Weight is not empty")
	}
}

// TestProductsDoNotAllocate: a warm product allocates nothing, split over
// the workers or not, in every path (the decode step's no-allocation test
// relies on it).
func TestProductsDoNotAllocate(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n, k = 640, 512
	x := make([]float32, 64*k)
	out := make([]float32, 64*n)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // testing.AllocsPerRun would use 1
	for _, be := range []cpu.Backend{cpu.PureGo(), oneThread{cpu.DefaultBackend()}} {
		p := cpu.NewProducts(be)
		for _, c := range productCases(r, p, n, k) {
			for _, rows := range []int{1, 5, 64} {
				f := func() { p.MulT(out, x, &c.w, rows, true) }
				f()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for range 20 {
					f()
				}
				runtime.ReadMemStats(&after)
				if a := (after.Mallocs - before.Mallocs) / 20; a != 0 {
					t.Errorf("%T %s, %d rows: %d allocations per product", be, c.name, rows, a)
				}
			}
		}
	}
}
