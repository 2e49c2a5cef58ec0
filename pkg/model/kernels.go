package model

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The forward pass's own element-wise helpers: the few-row SwiGLU over fused
// gate/up rows, bias adds and the attention's inner products. Normalisation
// is pkg/nn's RMSNorm, which the drafters use too.

func sqrt64(x float64) float64 { return math.Sqrt(x) }

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
