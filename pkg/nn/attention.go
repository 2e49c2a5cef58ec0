package nn

import "github.com/drafter-ai/drafter/pkg/tensor"

// Attention is a Llama self-attention block, with its backward pass: the
// projections q, k, v of its input, the optional per-head RMSNorm of q and k
// (Qwen3), the rotary position embedding, the attention itself (an
// Attender, which the caller supplies: over a KV cache, or the unrolled
// steps of EAGLE-3's training) and the output projection. The target's and
// the EAGLE-3 draft layer's.
type Attention struct {
	Q, K, V, O *Linear
	// QKV is Q's, K's and V's weights as one matrix where a checkpoint
	// holds them back to back, else empty: a frozen block then runs one
	// product instead of three (each part's bias added after).
	QKV tensor.Weight
	// QNorm and KNorm are the per-head RMSNorm weights [1, HeadDim], or
	// empty; Eps their epsilon.
	QNorm, KNorm tensor.Tensor
	Eps          float32
	// Rot holds the rotary tables; Shape the head layout.
	Rot   *tensor.Rotary
	Shape tensor.AttnShape
}

// Attender computes the attention itself.
type Attender interface {
	// Attend writes the attention output o [rows, heads·head_dim] of the
	// rows' queries q (RoPE applied, not scaled: the attender scales them,
	// and may do so in place), whose own keys k (RoPE applied) and values v
	// it keeps wherever its algorithm attends to them.
	Attend(dev tensor.Device, o, q, k, v tensor.Tensor)
}

// AttenderGrad is an Attender with a backward pass.
type AttenderGrad interface {
	Attender
	// AttendBackward accumulates into dq the gradient of the rows' queries,
	// given do at the output o of Attend, and returns the complete
	// gradients of the rows' (RoPE'd) keys and values.
	AttendBackward(dev tensor.Device, dq, do, o, q tensor.Tensor) (dk, dv tensor.Tensor)
}

// AttnActs are an application's activations over up to R rows: the RoPE'd
// queries Q and keys K, the values V, the attention output O (before the
// output projection), and Fused [R, qDim+2·kvDim] for the fused product's
// output (with QKV only). Parts must hold three tensors' room: Forward
// points them at Q, K and V for the fused product's split.
type AttnActs struct {
	Q, K, V, O, Fused tensor.Tensor
	Parts             []tensor.Tensor
}

// Forward computes out = O(attention(x)) over x's rows at the positions pos
// (I32, one per row), or adds it to out when acc is true (a residual block),
// attending through attn.
func (a *Attention) Forward(dev tensor.Device, out, x, pos tensor.Tensor, s *AttnActs, attn Attender, acc bool) {
	rows := x.Rows()
	q, k, v, o := s.Q.RowRange(0, rows), s.K.RowRange(0, rows), s.V.RowRange(0, rows), s.O.RowRange(0, rows)
	if !a.QKV.Empty() {
		fused := s.Fused.RowRange(0, rows)
		dev.MulT(fused, x, &a.QKV, false)
		s.Parts = append(s.Parts[:0], q, k, v)
		dev.SplitCols(fused, s.Parts)
		if !a.Q.B.Empty() {
			dev.AddBias(q, a.Q.B)
			dev.AddBias(k, a.K.B)
			dev.AddBias(v, a.V.B)
		}
	} else {
		a.Q.Forward(dev, q, x)
		a.K.Forward(dev, k, x)
		a.V.Forward(dev, v, x)
	}
	hd := a.Shape.HeadDim
	if !a.QNorm.Empty() { // Qwen3: RMSNorm over each head, before RoPE
		qh, kh := q.Reshape(rows*a.Shape.Heads, hd), k.Reshape(rows*a.Shape.KVHeads, hd)
		dev.RMSNorm(qh, qh, a.QNorm, a.Eps)
		dev.RMSNorm(kh, kh, a.KNorm, a.Eps)
	}
	dev.RoPE(q, a.Shape.Heads, pos, a.Rot)
	dev.RoPE(k, a.Shape.KVHeads, pos, a.Rot)
	attn.Attend(dev, o, q, k, v)
	if acc {
		a.O.ForwardAcc(dev, out, o)
	} else {
		a.O.Forward(dev, out, o)
	}
}

// AttnGrads are the gradients of the projections' weights, accumulated by
// Backward.
type AttnGrads struct {
	Q, K, V, O tensor.Tensor
}

// AttnScratch holds Backward's temporaries for up to R rows: DO and DQ [R,
// heads·head_dim].
type AttnScratch struct {
	DO, DQ tensor.Tensor
}

// Backward accumulates into dx the gradient at Forward's input x, and the
// projections' gradients into g, given dout at its output; s holds
// Forward's activations, attn the attention that ran. It supports the
// blocks a trainer builds: separate projections, no per-head norms.
func (a *Attention) Backward(dev tensor.Device, dx, dout, x, pos tensor.Tensor, s *AttnActs, attn AttenderGrad, g AttnGrads, sc *AttnScratch) {
	if !a.QNorm.Empty() || !a.QKV.Empty() {
		panic("nn: Attention.Backward of a block with per-head norms or fused projections")
	}
	rows := x.Rows()
	q, o := s.Q.RowRange(0, rows), s.O.RowRange(0, rows)
	dO, dQ := sc.DO.RowRange(0, rows), sc.DQ.RowRange(0, rows)
	dev.Zero(dO)
	a.O.Backward(dev, dO, g.O, tensor.Tensor{}, dout, o)
	dev.Zero(dQ)
	dk, dv := attn.AttendBackward(dev, dQ, dO, o, q)
	dev.RoPEBackward(dQ, a.Shape.Heads, pos, a.Rot)
	dev.RoPEBackward(dk, a.Shape.KVHeads, pos, a.Rot)
	a.Q.Backward(dev, dx, g.Q, tensor.Tensor{}, dQ, x)
	a.K.Backward(dev, dx, g.K, tensor.Tensor{}, dk, x)
	a.V.Backward(dev, dx, g.V, tensor.Tensor{}, dv, x)
}
