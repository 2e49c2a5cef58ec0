package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMulT checks MulT against a float64 product, with and without acc, for
// row counts that exercise both kernels and column counts around the block
// sizes; and that every row and every column block computes bit for bit what
// a one-row product and a column-split product compute.
func TestMulT(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 5, 63, 64, 65, 127, 128, 129, 200, 344, 512} {
		for _, k := range []int{1, 3, 64, 172} {
			w := make([]float32, n*k)
			for i := range w {
				w[i] = float32(r.NormFloat64())
			}
			wt, ldw := TransposeForMulT(w, n, k)
			for _, m := range []int{1, 2, 3, 4, 5, 8, 9, 13, 17} {
				ldx, ldo := k+3, n+5
				x := make([]float32, (m-1)*ldx+k)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				init := make([]float32, (m-1)*ldo+n)
				for i := range init {
					init[i] = float32(r.NormFloat64())
				}
				for _, acc := range []bool{false, true} {
					out := append([]float32(nil), init...)
					MulT(out, ldo, x, ldx, wt, ldw, m, n, k, acc)
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							var s, mag float64
							for p := 0; p < k; p++ {
								v := float64(x[i*ldx+p]) * float64(w[j*k+p])
								s += v
								mag += math.Abs(v)
							}
							if acc {
								s += float64(init[i*ldo+j])
								mag += math.Abs(float64(init[i*ldo+j]))
							}
							if got := float64(out[i*ldo+j]); math.Abs(got-s) > 1e-5*mag+1e-6 {
								t.Fatalf("n=%d k=%d m=%d acc=%v: out[%d][%d] = %g, want %g", n, k, m, acc, i, j, got, s)
							}
						}
						// Outside the n columns nothing is written.
						for j := n; j < ldo && i*ldo+j < len(out); j++ {
							if out[i*ldo+j] != init[i*ldo+j] {
								t.Fatalf("n=%d k=%d m=%d: out[%d][%d] past the width was written", n, k, m, i, j)
							}
						}
						// The row alone, and split at a column block.
						one := append([]float32(nil), init[i*ldo:i*ldo+n]...)
						MulT(one, n, x[i*ldx:], ldx, wt, ldw, 1, n, k, acc)
						for j := range one {
							if math.Float32bits(one[j]) != math.Float32bits(out[i*ldo+j]) {
								t.Fatalf("n=%d k=%d m=%d acc=%v: row %d column %d alone %g, in the batch %g", n, k, m, acc, i, j, one[j], out[i*ldo+j])
							}
						}
					}
					if n > MulTPad {
						split := append([]float32(nil), init...)
						MulT(split, ldo, x, ldx, wt, ldw, m, MulTPad, k, acc)
						MulT(split[MulTPad:], ldo, x, ldx, wt[MulTPad:], ldw, m, n-MulTPad, k, acc)
						for i := range split {
							if math.Float32bits(split[i]) != math.Float32bits(out[i]) {
								t.Fatalf("n=%d k=%d m=%d acc=%v: element %d split %g, whole %g", n, k, m, acc, i, split[i], out[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestMulTChecks checks that MulT refuses an unpadded weight.
func TestMulTChecks(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("MulT accepted ldw 100 for 100 columns (needs 128)")
		}
	}()
	MulT(make([]float32, 100), 100, make([]float32, 4), 4, make([]float32, 400), 100, 1, 100, 4, false)
}

// BenchmarkMulT compares MulT with DotRows on products of stories260k's
// shapes (gate and up fused 344x64, down 64x172) and on a 1 MiB weight that
// sits in the L2 cache, for the row counts of a decode step and of draft
// verification.
func BenchmarkMulT(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct{ n, k int }{{344, 64}, {64, 172}, {512, 512}} {
		w := make([]float32, s.n*s.k)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		wt, ldw := TransposeForMulT(w, s.n, s.k)
		for _, m := range []int{1, 5, 8} {
			x := make([]float32, m*s.k)
			out := make([]float32, m*s.n)
			flops := float64(2 * m * s.n * s.k)
			name := func(kind string) string {
				return kind + "/" + itoa(s.n) + "x" + itoa(s.k) + "/m" + itoa(m)
			}
			b.Run(name("mult"), func(b *testing.B) {
				for b.Loop() {
					MulT(out, s.n, x, s.k, wt, ldw, m, s.n, s.k, false)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
			b.Run(name("dotrows"), func(b *testing.B) {
				for b.Loop() {
					DotRows(out, s.n, x, s.k, w, s.k, m, s.n, s.k, false)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; v > 0; v /= 10 {
		i--
		b[i] = byte('0' + v%10)
	}
	return string(b[i:])
}
