package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestOpenBLASSplitMatchesGo(t *testing.T) {
	be := DefaultBackend()
	if be.Name() != "openblas" {
		t.Skip("no openblas")
	}
	r := rand.New(rand.NewPCG(3, 4))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	m, n, k := 100, 333, 64
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			lda, ldb := k+3, n+5
			if ta {
				lda = m + 3
			}
			if tb {
				ldb = k + 5
			}
			a, b := fill(lda*max(m, k)), fill(ldb*max(n, k))
			c := fill(m * (n + 2))
			c2 := append([]float32(nil), c...)
			be.Sgemm(ta, tb, m, n, k, 0.5, a, lda, b, ldb, 0.25, c, n+2)
			goBLAS{}.Sgemm(ta, tb, m, n, k, 0.5, a, lda, b, ldb, 0.25, c2, n+2)
			for i := range c {
				if math.Abs(float64(c[i]-c2[i])) > 1e-4 {
					t.Fatalf("ta=%v tb=%v: c[%d] = %g, want %g", ta, tb, i, c[i], c2[i])
				}
			}
		}
	}
	a, x, y := fill(1200*300), fill(300), fill(1200)
	y2 := append([]float32(nil), y...)
	be.Sgemv(false, 1200, 290, 2, a, 300, x, 0.5, y)
	goBLAS{}.Sgemv(false, 1200, 290, 2, a, 300, x, 0.5, y2)
	for i := range y {
		if math.Abs(float64(y[i]-y2[i])) > 1e-4 {
			t.Fatalf("gemv y[%d] = %g, want %g", i, y[i], y2[i])
		}
	}
}
