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

// mxfp4Weight returns a random MXFP4 weight [n, k] (every byte value, scales
// 127 ± 10) and its values widened, in float64 from the format's definition
// and in float32 as a float32 matrix.
func mxfp4Weight(t *testing.T, r *rand.Rand, n, k int) (tensor.Weight, []float64, tensor.Weight) {
	t.Helper()
	blocks, scales := make([]uint8, n*k/2), make([]uint8, n*k/32)
	for i := range blocks {
		blocks[i] = uint8(r.Uint32())
	}
	for i := range scales {
		scales[i] = uint8(117 + r.IntN(21))
	}
	m, err := tensor.MXFP4Matrix(blocks, scales, n, k)
	if err != nil {
		t.Fatal(err)
	}
	lut := [16]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}
	w64, w32 := make([]float64, n*k), make([]float32, n*k)
	for i := range w64 {
		b := blocks[i/2]
		if i%2 == 1 {
			b >>= 4
		}
		w64[i] = lut[b&15] * math.Ldexp(1, int(scales[i/32])-127)
		w32[i] = float32(w64[i])
	}
	return tensor.WeightOf(m), w64, tensor.WeightOf(tensor.F32Matrix(w32, n, k))
}

// TestProductsMXFP4: MulT by an MXFP4 weight, on every backend, few rows,
// just past FewRows and many (several panels for the largest weight),
// split over the workers or not, with and without accumulation:
//
//   - is within float32 summation's rounding bound, (k+2)·2^-24·Σ|terms|,
//     of the float64 product over the values the format defines;
//   - is bit for bit the product by the widened float32 matrix (the same
//     kernels in the same order);
//   - up to FewRows rows gives each row bit for bit its one-row product.
func TestProductsMXFP4(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 11))
	backends := []cpu.Backend{cpu.DefaultBackend(), cpu.PureGo(), oneThread{cpu.DefaultBackend()}, plain{cpu.DefaultBackend()}}
	for _, shape := range [][3]int{{70, 64, 0}, {640, 512, 0}, {2112, 1024, 1}} {
		n, k := shape[0], shape[1]
		rowCounts := []int{1, 5, tensor.FewRows, tensor.FewRows + 1, 100}
		if shape[2] == 1 {
			// Three panels of a product of many rows.
			rowCounts = []int{3, tensor.FewRows + 1}
		}
		x := make([]float32, 100*k)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		w, w64, wf := mxfp4Weight(t, r, n, k)
		for _, be := range backends {
			p := cpu.NewProducts(be)
			for _, rows := range rowCounts {
				for _, acc := range []bool{false, true} {
					what := fmt.Sprintf("%T %dx%d, %d rows, acc %v", be, n, k, rows, acc)
					out := make([]float32, rows*n)
					for i := range out {
						out[i] = float32(i%7) - 3
					}
					ref := append([]float32(nil), out...)
					want, bound := make([]float64, rows*n), make([]float64, rows*n)
					for i := range rows {
						for j := range n {
							var s, a float64
							if acc {
								s, a = float64(out[i*n+j]), math.Abs(float64(out[i*n+j]))
							}
							for q := range k {
								v := float64(x[i*k+q]) * w64[j*k+q]
								s += v
								a += math.Abs(v)
							}
							want[i*n+j], bound[i*n+j] = s, float64(k+2)*0x1p-24*a
						}
					}
					p.MulT(out, x, &w, rows, acc)
					for i := range want {
						if d := math.Abs(float64(out[i]) - want[i]); !(d <= bound[i]) {
							t.Fatalf("%s: element %d is %g, want %g (difference %.3g, bound %.3g)", what, i, out[i], want[i], d, bound[i])
						}
					}
					p.MulT(ref, x, &wf, rows, acc)
					for i := range ref {
						if math.Float32bits(out[i]) != math.Float32bits(ref[i]) {
							t.Fatalf("%s: element %d is %g, the float32 weight's product %g", what, i, out[i], ref[i])
						}
					}
					if rows > tensor.FewRows || acc {
						continue
					}
					one := make([]float32, n)
					for i := range rows {
						p.MulT(one, x[i*k:], &w, 1, false)
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

// TestProductsMXFP4DoNotAllocate: a warm product by an MXFP4 weight
// allocates nothing, few rows or many, split over the workers or not.
func TestProductsMXFP4DoNotAllocate(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, shape := range [][2]int{{640, 512}, {2112, 1024}} {
		n, k := shape[0], shape[1]
		x := make([]float32, 64*k)
		out := make([]float32, 64*n)
		w, _, _ := mxfp4Weight(t, r, n, k)
		for _, be := range []cpu.Backend{cpu.PureGo(), oneThread{cpu.DefaultBackend()}} {
			p := cpu.NewProducts(be)
			for _, rows := range []int{1, 5, 64} {
				f := func() { p.MulT(out, x, &w, rows, true) }
				procs := 2
				if rows > tensor.FewRows {
					// A panel's widening and GEMM outlast the pool's
					// spin: its workers park on a channel, where the
					// runtime now and then allocates a waiter (a sudog)
					// that is none of the product's. One thread runs
					// the same code inline.
					procs = 1
				}
				prev := runtime.GOMAXPROCS(procs)
				f()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for range 20 {
					f()
				}
				runtime.ReadMemStats(&after)
				runtime.GOMAXPROCS(prev)
				if a := (after.Mallocs - before.Mallocs) / 20; a != 0 {
					t.Errorf("%T %dx%d, %d rows: %d allocations per product", be, n, k, rows, a)
				}
			}
		}
	}
}
