package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// opElems returns op(A)[i,p] and op(B)[p,j] of row-major A and B.
func opElems(transA, transB bool, a []float32, lda int, b []float32, ldb int, i, j, p int) (av, bv float32) {
	if transA {
		av = a[p*lda+i]
	} else {
		av = a[i*lda+p]
	}
	if transB {
		bv = b[j*ldb+p]
	} else {
		bv = b[p*ldb+j]
	}
	return av, bv
}

// naive computes the reference product in float64.
func naiveGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float32 {
	out := make([]float32, len(c))
	copy(out, c)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				av, bv := opElems(transA, transB, a, lda, b, ldb, i, j, p)
				s += float64(av) * float64(bv)
			}
			out[i*ldc+j] = float32(float64(alpha)*s + float64(beta)*float64(c[i*ldc+j]))
		}
	}
	return out
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

func TestSgemmAgainstNaive(t *testing.T) {
	be := CPU()
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
		a, b, c := randSlice(r, ar*ac), randSlice(r, br*bc), randSlice(r, tc.m*tc.n)
		want := naiveGemm(tc.ta, tc.tb, tc.m, tc.n, tc.k, 0.5, a, ac, b, bc, 2, c, tc.n)
		be.Sgemm(tc.ta, tc.tb, tc.m, tc.n, tc.k, 0.5, a, ac, b, bc, 2, c, tc.n)
		for i := range c {
			if math.Abs(float64(c[i]-want[i])) > 1e-4*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%s %+v: c[%d]=%g want %g", be.Name(), tc, i, c[i], want[i])
			}
		}
	}
}

func TestSgemvAgainstNaive(t *testing.T) {
	be := CPU()
	r := rand.New(rand.NewPCG(3, 4))
	m, n := 37, 19
	a := randSlice(r, m*n)
	for _, trans := range []bool{false, true} {
		xl, yl := n, m
		if trans {
			xl, yl = m, n
		}
		x, y := randSlice(r, xl), randSlice(r, yl)
		// y = A x as a gemm with one column.
		var want []float32
		if trans {
			want = naiveGemm(true, false, n, 1, m, 1, a, n, x, 1, 0.25, y, 1)
		} else {
			want = naiveGemm(false, false, m, 1, n, 1, a, n, x, 1, 0.25, y, 1)
		}
		be.Sgemv(trans, m, n, 1, a, n, x, 0.25, y)
		for i := range y {
			if math.Abs(float64(y[i]-want[i])) > 1e-4*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("trans=%v y[%d]=%g want %g", trans, i, y[i], want[i])
			}
		}
	}
}

func TestMatMulTSingleRowEqualsGemm(t *testing.T) {
	be := CPU()
	r := rand.New(rand.NewPCG(5, 6))
	n, k := 23, 16
	x, w := randSlice(r, 2*k), randSlice(r, n*k)
	both := make([]float32, 2*n)
	MatMulT(be, both, x, w, 2, n, k)
	one := make([]float32, n)
	MatMulT(be, one, x[:k], w, 1, n, k)
	for j := 0; j < n; j++ {
		if math.Abs(float64(one[j]-both[j])) > 1e-5 {
			t.Fatalf("row 0 col %d: gemv %g gemm %g", j, one[j], both[j])
		}
	}
}

func TestParallelCoversRange(t *testing.T) {
	for _, n := range []int{0, 1, 5, 1000} {
		seen := make([]int32, n)
		Parallel(n, 3, func(lo, hi int) {
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
	be := CPU()
	r := rand.New(rand.NewPCG(1, 1))
	m, n, k := 256, 8192, 576
	x, w, out := randSlice(r, m*k), randSlice(r, n*k), make([]float32, m*n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		MatMulT(be, out, x, w, m, n, k)
	}
	b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
