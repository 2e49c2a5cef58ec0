package nn

import "github.com/drafter-ai/drafter/pkg/tensor"

// MLP is a gated feed-forward block, Down(act(Gate(x))·Up(x)): Llama's
// SwiGLU, with its backward pass, or Gemma's GELU-tanh or gpt-oss's clamped
// SwiGLU (forward only: only frozen targets have them). The target's and
// the EAGLE-3 draft layer's.
type MLP struct {
	Gate, Up, Down *Linear
	// GateUp is Gate's and Up's weights as one [2I, H] matrix where a
	// checkpoint holds them back to back (and neither has a bias), else
	// empty: a frozen MLP then runs one product instead of two.
	GateUp tensor.Weight
	// Act is the gate's activation.
	Act Activation
	// Alpha and Limit are ClampedSwiGLU's constants (gpt-oss's 1.702 and
	// its config's swiglu_limit), which the block carries because they
	// come from the checkpoint; other activations ignore them.
	Alpha, Limit float32
}

// Activation is a gated MLP's activation.
type Activation uint8

const (
	// SiLU is silu(gate)·up (SwiGLU).
	SiLU Activation = iota
	// GELUTanh is gelu(gate, approximate="tanh")·up (Gemma's
	// gelu_pytorch_tanh).
	GELUTanh
	// ClampedSwiGLU is gpt-oss's expert activation,
	// (clamp(up, -Limit, Limit)+1)·g·sigmoid(Alpha·g) with g = min(gate,
	// Limit) (tensor.Device.ClampedSwiGLU): the clamps bound the experts'
	// activations, so a plain SwiGLU would not reproduce the model.
	ClampedSwiGLU
)

// glu applies the block's activation: out = act(gate)·up (up empty: gate
// holds both, side by side).
func (f *MLP) glu(dev tensor.Device, out, gate, up tensor.Tensor) {
	switch f.Act {
	case GELUTanh:
		dev.GELUTanhGLU(out, gate, up)
	case ClampedSwiGLU:
		dev.ClampedSwiGLU(out, gate, up, f.Alpha, f.Limit)
	default:
		dev.SwiGLU(out, gate, up)
	}
}

// MLPActs are an application's activations over up to R rows: Gate and Up
// [R, I] (the two products; with GateUp, Fused [R, 2I] holds them side by
// side instead) and Act [R, I], swiglu(Gate, Up), which may be left empty
// when no backward follows: the activation then overwrites Gate.
type MLPActs struct {
	Gate, Up, Fused, Act tensor.Tensor
}

// Forward computes out = Down(swiglu(Gate(x), Up(x))) over x's rows, or adds
// it to out when acc is true (a residual block).
func (f *MLP) Forward(dev tensor.Device, out, x tensor.Tensor, a *MLPActs, acc bool) {
	rows := x.Rows()
	gate := a.Gate.RowRange(0, rows)
	act := gate
	if !a.Act.Empty() {
		act = a.Act.RowRange(0, rows)
	}
	if !f.GateUp.Empty() {
		fused := a.Fused.RowRange(0, rows)
		dev.MulT(fused, x, &f.GateUp, false)
		f.glu(dev, act, fused, tensor.Tensor{})
	} else {
		up := a.Up.RowRange(0, rows)
		f.Gate.Forward(dev, gate, x)
		f.Up.Forward(dev, up, x)
		f.glu(dev, act, gate, up)
	}
	if acc {
		f.Down.ForwardAcc(dev, out, act)
	} else {
		f.Down.Forward(dev, out, act)
	}
}

// MLPGrads are the gradients of an MLP's weights, accumulated by Backward.
type MLPGrads struct {
	Gate, Up, Down tensor.Tensor
}

// MLPScratch holds Backward's temporaries for up to R rows, [R, I] each.
type MLPScratch struct {
	Act, DAct, DGate, DUp tensor.Tensor
}

// Backward accumulates into dx the gradient at Forward's input x, and the
// weights' gradients into g, given dout at its output; a holds Forward's
// Gate and Up (separate: a trainer's MLP does not fuse them), whose
// activation it recomputes. It supports SwiGLU, the only activation a
// trainer's block has.
func (f *MLP) Backward(dev tensor.Device, dx, dout, x tensor.Tensor, a *MLPActs, g MLPGrads, s *MLPScratch) {
	if f.Act != SiLU {
		panic("nn: MLP.Backward of a block whose activation is not SiLU")
	}
	rows := x.Rows()
	r := func(t tensor.Tensor) tensor.Tensor { return t.RowRange(0, rows) }
	gate, up := r(a.Gate), r(a.Up)
	act, dAct, dGate, dUp := r(s.Act), r(s.DAct), r(s.DGate), r(s.DUp)
	dev.SwiGLU(act, gate, up)
	dev.Zero(dAct)
	f.Down.Backward(dev, dAct, g.Down, tensor.Tensor{}, dout, act)
	dev.Zero(dGate)
	dev.Zero(dUp)
	dev.SwiGLUBackward(dGate, dUp, dAct, gate, up)
	f.Gate.Backward(dev, dx, g.Gate, tensor.Tensor{}, dGate, x)
	f.Up.Backward(dev, dx, g.Up, tensor.Tensor{}, dUp, x)
}
