package cpu

import "math"

// The element-wise ops of Gemma's targets: the gelu_tanh gated MLP and the
// soft-capping of scores and logits, in float32 as PyTorch computes them.

// geluBeta and geluKappa are PyTorch's constants of gelu(approximate='tanh'):
// √(2/π) (M_SQRT2·M_2_SQRTPI·0.5) and 0.044715, rounded to float32.
const (
	geluBeta  = float32(math.Sqrt2 * (2 / math.SqrtPi) * 0.5)
	geluKappa = float32(0.044715)
)

// Tanhf returns tanh(x) rounded to float32 (from float64's tanh: within
// half an ulp but for double rounding, as a float32 libm tanh is).
func Tanhf(x float32) float32 { return float32(math.Tanh(float64(x))) }

// GELUTanh returns gelu_tanh(x) = 0.5·x·(1+tanh(β·(x+κ·x³))) in float32, in
// PyTorch's order of operations (x³ as (x·x)·x, then κ·x³, the sum, β times
// it, and 0.5·x times 1+tanh), each step rounded to float32.
func GELUTanh(x float32) float32 {
	cube := float32(x*x) * x
	inner := geluBeta * float32(x+float32(geluKappa*cube))
	return float32(0.5*x) * float32(1+Tanhf(inner))
}

// GELUTanhGLU computes out = gelu_tanh(gate)·up element-wise (out may alias
// gate): the gated MLP of Gemma's targets.
func GELUTanhGLU(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	for i, g := range gate {
		out[i] = GELUTanh(g) * up[i]
	}
}

// SoftcapValue returns c·tanh(v/c) in float32, in Hugging Face's order
// (divide, tanh, multiply): Gemma-2's soft-capping of attention scores and
// final logits.
func SoftcapValue(v, c float32) float32 { return Tanhf(v/c) * c }
