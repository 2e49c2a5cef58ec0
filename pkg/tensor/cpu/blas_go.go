package cpu

import (
	"sync"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/internal/kernel"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// goBLAS is the pure-Go backend; it builds with CGO_ENABLED=0. Its Sgemm runs
// drafter's own packed, cache-blocked kernels (AVX-512 or AVX2 assembly on
// amd64) and splits large products over the workers (tensor.Parallel) itself; gonum's BLAS
// remains for what they do not cover.
type goBLAS struct{}

func (goBLAS) Name() string { return "go" }

// gemms keeps the kernels' packing buffers (a few MiB each at most) for
// reuse, one per product in flight, so that a warm Sgemm allocates nothing. A
// product finding none allocates one, kept afterwards unless the list is
// full. It is the same process-wide free list as the worker pool's jobs.
var gemms = sync.OnceValue(func() chan *kernel.Gemm { return make(chan *kernel.Gemm, 16) })

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
	g := takeGemm()
	if g.Vector() {
		g.Sgemm(tensor.ParallelChunks, tensor.Workers(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	} else {
		gonum.Implementation{}.Sgemm(tr(transA), tr(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	}
	putGemm(g)
}

// takeGemm returns a Gemm from the free list, or a new one.
func takeGemm() *kernel.Gemm {
	select {
	case g := <-gemms():
		return g
	default:
		return kernel.NewGemm()
	}
}

// putGemm returns g to the free list, unless the list is full.
func putGemm(g *kernel.Gemm) {
	select {
	case gemms() <- g:
	default:
	}
}

func (goBLAS) Sgemv(t bool, m, n int, alpha float32, a []float32, lda int, x []float32, beta float32, y []float32) {
	if m == 0 || n == 0 {
		return
	}
	checkGemv(t, m, n, len(a), lda, len(x), len(y))
	if alpha == 1 && (beta == 0 || beta == 1) {
		// The vector kernels drafter's models use for single rows.
		if t {
			kernel.WeightedSum(y, x, a, lda, m, n, beta == 1)
		} else {
			kernel.DotRows(y, m, x, n, a, lda, 1, m, n, beta == 1)
		}
		return
	}
	gonum.Implementation{}.Sgemv(tr(t), m, n, alpha, a, lda, x, 1, beta, y, 1)
}
