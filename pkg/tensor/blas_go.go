package tensor

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// goBLAS is the pure-Go backend (gonum's BLAS); it builds with CGO_ENABLED=0.
type goBLAS struct{}

func (goBLAS) Name() string { return "go" }

func tr(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

func (goBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	checkGemm(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	gonum.Implementation{}.Sgemm(tr(transA), tr(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func (goBLAS) Sgemv(t bool, m, n int, alpha float32, a []float32, lda int, x []float32, beta float32, y []float32) {
	if m == 0 || n == 0 {
		return
	}
	checkGemv(t, m, n, len(a), lda, len(x), len(y))
	gonum.Implementation{}.Sgemv(tr(t), m, n, alpha, a, lda, x, 1, beta, y, 1)
}
