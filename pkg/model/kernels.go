package model

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The element-wise kernels of the forward pass, in float32 with the checks
// hoisted out of the loops. They match pkg/nn's definitions (RMSNorm sums the
// squares in float64, as Transformers' float32 upcast does at this precision);
// they exist here because the decode loop must not allocate, and nn's
// versions spawn goroutines per call.

func sqrt64(x float64) float64 { return math.Sqrt(x) }

// rmsNormRows normalises rows [lo, hi) of x [.., n] into out with weight w.
// out may alias x.
func rmsNormRows(out, x, w []float32, lo, hi, n int, eps float32) {
	w = w[:n]
	for r := lo; r < hi; r++ {
		xr := x[r*n : r*n+n]
		or := out[r*n : r*n+n]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		rs := float32(1 / math.Sqrt(ss/float64(n)+float64(eps)))
		for i, v := range xr {
			or[i] = v * rs * w[i]
		}
	}
}

// swigluRows computes rows [lo, hi) of out[r] = silu(gu[r][:I]) * gu[r][I:],
// where each row of gu holds the gate and up projections side by side.
func swigluRows(out, gu []float32, lo, hi, I int) {
	for r := lo; r < hi; r++ {
		tensor.SwiGLU(out[r*I:(r+1)*I], gu[2*r*I:(2*r+1)*I], gu[(2*r+1)*I:(2*r+2)*I])
	}
}

func addBias(out, b []float32) {
	n := len(b)
	for r := 0; r+n <= len(out); r += n {
		o := out[r : r+n]
		for i, v := range b {
			o[i] += v
		}
	}
}

// dot returns the inner product of a and b (len(b) >= len(a)).
func dot(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy computes y += a*x (len(x) >= len(y)).
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		y[i] += a * x[i]
		y[i+1] += a * x[i+1]
		y[i+2] += a * x[i+2]
		y[i+3] += a * x[i+3]
	}
	for ; i < len(y); i++ {
		y[i] += a * x[i]
	}
}
