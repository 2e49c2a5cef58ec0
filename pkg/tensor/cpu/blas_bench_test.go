package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas/gonum"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// gonumBLAS is the previous pure-Go backend, gonum's BLAS, kept for
// comparison in benchmarks.
type gonumBLAS struct{ goBLAS }

func (gonumBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gonum.Implementation{}.Sgemm(tr(transA), tr(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// BenchmarkSgemm compares the pure-Go backend's Sgemm with gonum's and, when
// the build has cgo and the library is installed, OpenBLAS's (split over the
// workers as the backend does), on the model's prefill product (x·wᵀ, NT)
// and training-shaped TN (dW = dYᵀ·X) and NN (dX = dY·W) products. Compare
// the GFLOP/s within one run: the machine may be shared. GFLOP/cpu-s divides
// by the CPU time of all threads instead of the wall-clock time.
func BenchmarkSgemm(b *testing.B) {
	bes := []Backend{goBLAS{}, gonumBLAS{}}
	if o, err := OpenBLAS(); err == nil {
		bes = append(bes, o)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct {
		name           string
		transA, transB bool
		m, n, k        int
	}{
		{"NT", false, true, 512, 1536, 512},
		{"NT", false, true, 512, 512, 1536},
		{"TN", true, false, 512, 1536, 512},
		{"NN", false, false, 512, 512, 1536},
		// A batch of 192 rows whole, and in the pieces pkg/model hands the
		// backend today.
		{"NT", false, true, 192, 1536, 512},
		{"NT", false, true, 192, 64, 512},
	} {
		lda, ldb := s.k, s.n
		if s.transA {
			lda = s.m
		}
		if s.transB {
			ldb = s.k
		}
		a, bb, c := testutil.RandNormal(r, s.m*s.k, 1), testutil.RandNormal(r, s.n*s.k, 1), testutil.RandNormal(r, s.m*s.n, 1)
		for _, be := range bes {
			name := be.Name()
			if _, ok := be.(gonumBLAS); ok {
				name = "gonum"
			}
			b.Run(fmt.Sprintf("%s/%dx%dx%d/%s", s.name, s.m, s.n, s.k, name), func(b *testing.B) {
				c0 := testutil.ProcessCPU()
				for b.Loop() {
					be.Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
				}
				flops := 2 * float64(s.m*s.n*s.k) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				// Per second of CPU time of all threads: what a core does
				// while it runs, whatever else shares the machine.
				b.ReportMetric(flops/(testutil.ProcessCPU()-c0)/1e9, "GFLOP/cpu-s")
			})
		}
	}
}
