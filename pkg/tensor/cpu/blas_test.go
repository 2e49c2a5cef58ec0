package cpu

import (
	"github.com/drafter-ai/drafter/pkg/tensor"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

func TestSgemmAgainstNaive(t *testing.T) {
	be := DefaultBackend()
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		m, n, k int
		ta, tb  bool
	}{{1, 7, 5, false, true}, {13, 9, 17, false, false}, {13, 9, 17, true, false}, {8, 33, 64, false, true}, {31, 5, 2, true, true}} {
		ar, ac := tc.m, tc.k
		if tc.ta {
			ar, ac = tc.k, tc.m
		}
		br, bc := tc.k, tc.n
		if tc.tb {
			br, bc = tc.n, tc.k
		}
		a, b, c := testutil.RandNormal(r, ar*ac, 1), testutil.RandNormal(r, br*bc, 1), testutil.RandNormal(r, tc.m*tc.n, 1)
		want, _ := testutil.GemmRef(tc.ta, tc.tb, tc.m, tc.n, tc.k, 0.5, a, ac, b, bc, 2, c, tc.n)
		be.Sgemm(tc.ta, tc.tb, tc.m, tc.n, tc.k, 0.5, a, ac, b, bc, 2, c, tc.n)
		for i := range c {
			if w := float32(want[i]); math.Abs(float64(c[i]-w)) > 1e-4*(1+math.Abs(float64(w))) {
				t.Fatalf("%s %+v: c[%d]=%g want %g", be.Name(), tc, i, c[i], w)
			}
		}
	}
}

func TestSgemvAgainstNaive(t *testing.T) {
	be := DefaultBackend()
	r := rand.New(rand.NewPCG(3, 4))
	m, n := 37, 19
	a := testutil.RandNormal(r, m*n, 1)
	for _, trans := range []bool{false, true} {
		xl, yl := n, m
		if trans {
			xl, yl = m, n
		}
		x, y := testutil.RandNormal(r, xl, 1), testutil.RandNormal(r, yl, 1)
		// y = A x as a gemm with one column.
		var want []float64
		if trans {
			want, _ = testutil.GemmRef(true, false, n, 1, m, 1, a, n, x, 1, 0.25, y, 1)
		} else {
			want, _ = testutil.GemmRef(false, false, m, 1, n, 1, a, n, x, 1, 0.25, y, 1)
		}
		be.Sgemv(trans, m, n, 1, a, n, x, 0.25, y)
		for i := range y {
			if w := float32(want[i]); math.Abs(float64(y[i]-w)) > 1e-4*(1+math.Abs(float64(w))) {
				t.Fatalf("trans=%v y[%d]=%g want %g", trans, i, y[i], w)
			}
		}
	}
}

func TestMatMulSingleRowEqualsGemm(t *testing.T) {
	dev := New(DefaultBackend())
	r := rand.New(rand.NewPCG(5, 6))
	n, k := 23, 16
	x, w := testutil.RandNormal(r, 2*k, 1), testutil.RandNormal(r, n*k, 1)
	both := make([]float32, 2*n)
	dev.MatMul(HostTensor(both, 2, n), HostTensor(x, 2, k), HostTensor(w, n, k), false, true, 1, false)
	one := make([]float32, n)
	dev.MatMul(HostTensor(one, 1, n), HostTensor(x[:k], 1, k), HostTensor(w, n, k), false, true, 1, false)
	for j := 0; j < n; j++ {
		if math.Abs(float64(one[j]-both[j])) > 1e-5 {
			t.Fatalf("row 0 col %d: gemv %g gemm %g", j, one[j], both[j])
		}
	}
}

func TestParallelCoversRange(t *testing.T) {
	for _, n := range []int{0, 1, 5, 1000} {
		seen := make([]int32, n)
		tensor.Parallel(n, 3, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		for i, s := range seen {
			if s != 1 {
				t.Fatalf("n=%d index %d visited %d times", n, i, s)
			}
		}
	}
}

func BenchmarkSgemm256x576x8192(b *testing.B) {
	be := DefaultBackend()
	r := rand.New(rand.NewPCG(1, 1))
	m, n, k := 256, 8192, 576
	x, w, out := testutil.RandNormal(r, m*k, 1), testutil.RandNormal(r, n*k, 1), make([]float32, m*n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		be.Sgemm(false, true, m, n, k, 1, x, k, w, k, 0, out, n)
	}
	b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
