package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// BenchmarkSmall compares DotRows with the backend's Sgemm (Sgemv for one
// row) on the products of a small model, to choose SmallRows.
func BenchmarkSmall(b *testing.B) {
	be := DefaultBackend()
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range []struct{ n, k int }{{64, 64}, {172, 64}, {64, 172}, {512, 64}} {
		for _, m := range []int{1, 2, 5, 8, 16, 33, 64} {
			x, w, out := testutil.RandNormal(r, m*s.k, 1), testutil.RandNormal(r, s.n*s.k, 1), make([]float32, m*s.n)
			b.Run(fmt.Sprintf("n%d-k%d-m%d/dot", s.n, s.k, m), func(b *testing.B) {
				for b.Loop() {
					DotRows(out, s.n, x, s.k, w, s.k, m, s.n, s.k, false)
				}
			})
			b.Run(fmt.Sprintf("n%d-k%d-m%d/%s", s.n, s.k, m, be.Name()), func(b *testing.B) {
				for b.Loop() {
					if m == 1 {
						be.Sgemv(false, s.n, s.k, 1, w, s.k, x, 0, out)
					} else {
						be.Sgemm(false, true, m, s.n, s.k, 1, x, s.k, w, s.k, 0, out, s.n)
					}
				}
			})
		}
	}
}
