package cpu

import "github.com/drafter-ai/drafter/pkg/tensor/internal/kernel"

// The element-wise arithmetic of gpt-oss's targets: the experts' clamped
// SwiGLU and the attention sinks' softmax, in float32 as PyTorch computes
// them.

// ClampedSwiGLU computes gpt-oss's expert activation element-wise (out may
// alias gate): g = min(gate, limit), u = clamp(up, -limit, limit), out =
// (u+1)·(g·sigmoid(alpha·g)), each step rounded to float32 in that order,
// sigmoid(x) = 1/(1+Expf(-x)). A NaN stays NaN through the clamps, as
// torch.clamp keeps it.
func ClampedSwiGLU(out, gate, up []float32, alpha, limit float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	for i, g := range gate {
		if g > limit {
			g = limit
		}
		u := up[i]
		if u > limit {
			u = limit
		} else if u < -limit {
			u = -limit
		}
		ag := alpha * g
		sig := 1 / (1 + kernel.Expf(-ag))
		glu := g * sig
		out[i] = (u + 1) * glu
	}
}

// SoftmaxUnscaledSink replaces x by e^(x - M) and returns their sum plus
// e^(sink - M), M the larger of x's maximum and sink: the numerators of a
// softmax over x and one more score sink (an attention sink) and its
// denominator, the sink's own numerator dropped. x must not be empty.
func SoftmaxUnscaledSink(x []float32, sink float32) float32 {
	mx := x[0]
	for _, v := range x[1:] {
		if v > mx {
			mx = v
		}
	}
	if sink > mx {
		mx = sink
	}
	return kernel.ExpShift(x, mx) + kernel.Expf(sink-mx)
}
