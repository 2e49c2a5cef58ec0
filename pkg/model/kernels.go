package model

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The forward pass's own element-wise helpers: the few-row SwiGLU over fused
// gate/up rows and bias adds. Normalisation is pkg/nn's RMSNorm, which the
// drafters use too; the attention's kernels are pkg/tensor's.

func sqrt64(x float64) float64 { return math.Sqrt(x) }

// swigluRows computes rows [lo, hi) of out[r] = silu(gu[r][:I]) * gu[r][I:],
// where each row of gu holds the gate and up projections side by side.
func swigluRows(out, gu []float32, lo, hi, I int) {
	for r := lo; r < hi; r++ {
		tensor.SwiGLU(out[r*I:(r+1)*I], gu[2*r*I:(2*r+1)*I], gu[(2*r+1)*I:(2*r+2)*I])
	}
}

// addBias adds b to every row of out (rows of len(b)).
func addBias(out, b []float32) {
	n := len(b)
	for r := 0; r+n <= len(out); r += n {
		o := out[r : r+n]
		for i, v := range b {
			o[i] += v
		}
	}
}
