package testutil

import (
	"math"
	"math/rand/v2"
)

// RandNormal returns n values drawn from r's normal distribution, times
// scale, as float32.
func RandNormal(r *rand.Rand, n int, scale float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64() * scale)
	}
	return s
}

// LogSoftmax returns log(softmax(x)) in float64, the reference the float32
// kernels are checked against.
func LogSoftmax(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	var s float64
	for _, v := range x {
		s += math.Exp(v - m)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v - m - math.Log(s)
	}
	return out
}

// GemmRef computes alpha*op(A)*op(B) + beta*C in float64 for row-major A, B
// and C (op transposes when transA, transB; op(A) is m x k, op(B) k x n; lda,
// ldb, ldc the row strides), with beta = 0 ignoring C (as BLAS does, NaN
// included), and for each element the bound on the error of a float32
// evaluation: with u = 2^-24 the unit roundoff, any order of k float32
// multiply-adds (fused or not) is within γ·Σ|a||b| of the exact inner
// product, γ = (k+2)u/(1-(k+2)u) (Higham, Accuracy and Stability of
// Numerical Algorithms, 3.1; the +2 covers the final scaling by alpha and
// adding beta*C, each rounded once). The bound is worst-case, so a correct
// kernel always meets it, while a wrong or missing term misses it by the size
// of a term. Elements of C outside the product (its padding) are 0 in both.
func GemmRef(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) (want, tol []float64) {
	want = make([]float64, len(c))
	tol = make([]float64, len(c))
	const u = 1.0 / (1 << 24)
	g := float64(k+2) * u / (1 - float64(k+2)*u)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, sa float64
			for p := 0; p < k; p++ {
				var av, bv float32
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
				s += float64(av) * float64(bv)
				sa += math.Abs(float64(av) * float64(bv))
			}
			w := float64(alpha) * s
			t := math.Abs(float64(alpha)) * sa
			if beta != 0 {
				w += float64(beta) * float64(c[i*ldc+j])
				t += math.Abs(float64(beta) * float64(c[i*ldc+j]))
			}
			want[i*ldc+j] = w
			tol[i*ldc+j] = g*t + 1e-37 // plus the smallest normals
		}
	}
	return want, tol
}
