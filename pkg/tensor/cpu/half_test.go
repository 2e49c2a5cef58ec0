package cpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// benchWeights returns random float32 weights [n, k] and their bfloat16 and
// binary16 roundings.
func benchWeights(r *rand.Rand, n, k int) ([]float32, []uint16, []uint16) {
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.02)
	}
	bf, hf := make([]uint16, len(w)), make([]uint16, len(w))
	tensor.F32ToBF16(bf, w)
	tensor.F32ToF16(hf, w)
	return w, bf, hf
}

// BenchmarkDecodeHalf measures products of one and eight rows split over
// the workers in 64-row blocks of the weight, as the model splits a decode
// step's products, over float32, bfloat16 and binary16 weights: GB/s of
// weight bytes (the weights of the large shapes do not fit in the caches).
func BenchmarkDecodeHalf(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range []struct{ n, k int }{{4096, 4096}, {14336, 4096}, {32000, 512}, {1536, 512}} {
		w32, bf, hf := benchWeights(r, s.n, s.k)
		for _, m := range []int{1, 8} {
			x := make([]float32, m*s.k)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			out := make([]float32, m*s.n)
			for _, f := range []string{"f32", "bf16", "f16"} {
				bytes := 2
				if f == "f32" {
					bytes = 4
				}
				chunk := func(_, lo, hi int) {
					lo, hi = lo*64, min(hi*64, s.n)
					switch f {
					case "f32":
						cpu.DotRows(out[lo:], s.n, x, s.k, w32[lo*s.k:], s.k, m, hi-lo, s.k, false)
					case "bf16":
						cpu.DotRowsBF16(out[lo:], s.n, x, s.k, bf[lo*s.k:], s.k, m, hi-lo, s.k, false)
					case "f16":
						cpu.DotRowsF16(out[lo:], s.n, x, s.k, hf[lo*s.k:], s.k, m, hi-lo, s.k, false)
					}
				}
				b.Run(fmt.Sprintf("%dx%d/m%d/%s", s.n, s.k, m, f), func(b *testing.B) {
					for b.Loop() {
						tensor.ParallelChunks((s.n+63)/64, 4*tensor.Workers(), chunk)
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(bytes*s.n*s.k)/sec/1e9, "GB/s")
					b.ReportMetric(sec*1e6, "us/op")
				})
			}
		}
	}
}

// BenchmarkPrefillHalf measures the prefill product x·Wᵀ of 512 rows over
// float32 weights (the CPU backend's Sgemm: OpenBLAS where it is installed)
// and bfloat16 and binary16 weights (SgemmBF16, SgemmF16), split over the
// workers.
func BenchmarkPrefillHalf(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	be := cpu.DefaultBackend()
	for _, s := range [][3]int{{512, 1536, 512}, {512, 512, 1536}, {512, 4096, 4096}} {
		m, n, k := s[0], s[1], s[2]
		w32, bf, hf := benchWeights(r, n, k)
		x, c := make([]float32, m*k), make([]float32, m*n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for _, f := range []string{"f32", "bf16", "f16"} {
			name := f
			if f == "f32" {
				name += "-" + be.Name()
			}
			b.Run(fmt.Sprintf("%dx%dx%d/%s", m, n, k, name), func(b *testing.B) {
				for b.Loop() {
					switch f {
					case "f32":
						be.Sgemm(false, true, m, n, k, 1, x, k, w32, k, 0, c, n)
					case "bf16":
						cpu.SgemmBF16(false, true, m, n, k, 1, x, k, bf, k, 0, c, n)
					case "f16":
						cpu.SgemmF16(false, true, m, n, k, 1, x, k, hf, k, 0, c, n)
					}
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
