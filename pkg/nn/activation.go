package nn

import (
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The activations compute in float32 with the inference kernels' exponential
// (tensor.Expf): silu(g) = g / (1 + Expf(-g)), the arithmetic of
// tensor.SwiGLU, which the target model and the frozen drafts run, so that a
// layer trains with the very values it drafts with. The backwards take the
// sigmoid s = 1 / (1 + Expf(-g)) from the same exponential.

// sigmoid returns 1 / (1 + e^-x) with tensor.Expf's exponential.
func sigmoid(x float32) float32 { return 1 / (1 + tensor.Expf(-x)) }

// SiLU computes out = x * sigmoid(x) element-wise, as x / (1 + Expf(-x))
// (tensor.SwiGLU's arithmetic with up = 1). out may alias x.
func SiLU(out, x []float32) {
	tensor.Parallel(len(x), 8192, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v := x[i]
			out[i] = v / (1 + tensor.Expf(-v))
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
// Llama, with tensor.SwiGLU (bit for bit, whatever the split over the
// workers: the kernel computes each element alone). out may alias gate or up.
func SwiGLU(out, gate, up []float32) {
	tensor.Parallel(len(gate), 8192, func(lo, hi int) {
		tensor.SwiGLU(out[lo:hi], gate[lo:hi], up[lo:hi])
	})
}

// SwiGLUBackward accumulates the gradients of SwiGLU into dgate and dup (either
// may be nil): dup gets dout * silu(gate) with the forward's very silu, dgate
// dout * up * s (1 + g (1 - s)).
func SwiGLUBackward(dgate, dup, dout, gate, up []float32) {
	tensor.Parallel(len(gate), 8192, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := gate[i]
			e := tensor.Expf(-g)
			s := 1 / (1 + e)
			if dgate != nil {
				dgate[i] += dout[i] * up[i] * s * (1 + g*(1-s))
			}
			if dup != nil {
				dup[i] += dout[i] * (g / (1 + e))
			}
		}
	})
}
