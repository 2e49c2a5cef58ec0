package cpu

import (
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor/internal/kernel"
)

// TestSgemmHalfMatchesWidened checks SgemmBF16 and SgemmF16, split over the
// workers, against the float32 GEMM kernels on the weights widened
// beforehand, bit for bit, and against the float64 product within
// gemmTol, in the four transpose cases.
func TestSgemmHalfMatchesWidened(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	m, n, k := 130, 201, 300 // past gemmParallelMin: the product is split
	for _, tt := range [][2]bool{{false, true}, {false, false}, {true, true}, {true, false}} {
		for _, bf := range []bool{true, false} {
			ta, tb := tt[0], tt[1]
			lda, ldb := k, n
			if ta {
				lda = m
			}
			if tb {
				ldb = k
			}
			a := make([]float32, m*k)
			b32 := make([]float32, n*k)
			for i := range a {
				a[i] = float32(r.NormFloat64())
			}
			for i := range b32 {
				b32[i] = float32(r.NormFloat64())
			}
			b16 := make([]uint16, len(b32))
			sgemm := SgemmBF16
			if bf {
				tensor.F32ToBF16(b16, b32)
				tensor.BF16ToF32(b32, b16)
			} else {
				sgemm = SgemmF16
				tensor.F32ToF16(b16, b32)
				tensor.F16ToF32(b32, b16)
			}
			c0 := make([]float32, m*n)
			for i := range c0 {
				c0[i] = float32(r.NormFloat64())
			}
			got := append([]float32(nil), c0...)
			want := append([]float32(nil), c0...)
			sgemm(ta, tb, m, n, k, 1.5, a, lda, b16, ldb, 0.5, got, n)
			kernel.NewGemm().Sgemm(tensor.ParallelChunks, tensor.Workers(), ta, tb, m, n, k, 1.5, a, lda, b32, ldb, 0.5, want, n)
			exact, tol := testutil.GemmRef(ta, tb, m, n, k, 1.5, a, lda, b32, ldb, 0.5, c0, n)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("bf16=%v ta=%v tb=%v: c[%d] = %v, the float32 kernels on the widened B give %v", bf, ta, tb, i, got[i], want[i])
				}
				if d := math.Abs(float64(got[i]) - exact[i]); d > tol[i] {
					t.Fatalf("bf16=%v ta=%v tb=%v: c[%d] = %v, want %v", bf, ta, tb, i, got[i], exact[i])
				}
			}
		}
	}
}
