package nn

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// SiLU computes out = x * sigmoid(x) element-wise. out may alias x.
func SiLU(out, x []float32) {
	tensor.Parallel(len(x), 8192, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v := x[i]
			out[i] = v * sigmoid(v)
		}
	})
}

// SiLUBackward accumulates dx += dout * silu'(x), with
// silu'(x) = s(x) (1 + x (1 - s(x))).
func SiLUBackward(dx, dout, x []float32) {
	tensor.Parallel(len(x), 8192, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v := x[i]
			s := sigmoid(v)
			dx[i] += dout[i] * s * (1 + v*(1-s))
		}
	})
}

// SwiGLU computes out = silu(gate) * up element-wise, the gated MLP activation of
// Llama. out may alias gate or up.
func SwiGLU(out, gate, up []float32) {
	tensor.Parallel(len(gate), 8192, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := gate[i]
			out[i] = g * sigmoid(g) * up[i]
		}
	})
}

// SwiGLUBackward accumulates the gradients of SwiGLU into dgate and dup (either
// may be nil).
func SwiGLUBackward(dgate, dup, dout, gate, up []float32) {
	tensor.Parallel(len(gate), 8192, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := gate[i]
			s := sigmoid(g)
			if dgate != nil {
				dgate[i] += dout[i] * up[i] * s * (1 + g*(1-s))
			}
			if dup != nil {
				dup[i] += dout[i] * g * s
			}
		}
	})
}
