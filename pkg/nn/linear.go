package nn

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Linear is a Hugging Face nn.Linear on a device: out = x·Wᵀ + b for the
// weight W [out, in] and the optional bias b [1, out].
//
// A trainer's Linear (NewLinear) multiplies by the weight it updates, through
// the device's MatMul, and has a backward pass; a frozen one (NewFrozen, or a
// trainer's after Freeze) through the device's weight products (MulT), which
// may keep the weight in other layouts (transposed copies, a GPU's upload)
// that would go stale if it changed.
type Linear struct {
	// W is the weight as the device's products take it; B the bias [1,
	// out] (empty: none).
	W tensor.Weight
	B tensor.Tensor
	// wt is W as a device tensor, for a trainer's products and backward
	// (empty for a layer built frozen).
	wt     tensor.Tensor
	frozen bool
}

// NewLinear returns the trainable layer of weight w [out, in] and bias b
// (nil: none) on dev. Where dev's memory is the host's it views w's and b's
// values, so that an optimiser updating them in place updates the layer.
func NewLinear(dev tensor.Device, w tensor.Matrix, b []float32) (*Linear, error) {
	l, err := NewFrozen(dev, w, b)
	if err != nil {
		return nil, err
	}
	if l.wt, err = dev.Upload(w); err != nil {
		return nil, fmt.Errorf("nn: linear weight: %w", err)
	}
	l.frozen = false
	return l, nil
}

// NewLinearOf returns the trainable layer over the float32 tensors w [out,
// in] and b [1, out] (empty: no bias) of a device: a trainer's master
// weights, which it allocates and updates on the device. The layer
// multiplies by w itself and has a backward pass; it has no host matrix, so
// it cannot be frozen.
func NewLinearOf(w, b tensor.Tensor) (*Linear, error) {
	if w.DType() != tensor.F32 || (!b.Empty() && b.DType() != tensor.F32) {
		return nil, fmt.Errorf("nn: a trainable linear layer of %s weights and %s bias, want float32", w.DType(), b.DType())
	}
	if !b.Empty() && b.Len() != w.Rows() {
		return nil, fmt.Errorf("nn: linear bias of %d values for %d output features", b.Len(), w.Rows())
	}
	return &Linear{B: b, wt: w}, nil
}

// NewFrozen returns the inference-only layer of weight w [out, in] (in its
// checkpoint's dtype) and bias b (nil: none) on dev, whose weight the caller
// prepares with Freeze.
func NewFrozen(dev tensor.Device, w tensor.Matrix, b []float32) (*Linear, error) {
	l := &Linear{W: tensor.WeightOf(w), frozen: true}
	if b != nil {
		if len(b) != w.Rows {
			return nil, fmt.Errorf("nn: linear bias of %d values for %d output features", len(b), w.Rows)
		}
		var err error
		if l.B, err = dev.Upload(tensor.F32Matrix(b, 1, w.Rows)); err != nil {
			return nil, fmt.Errorf("nn: linear bias: %w", err)
		}
	}
	return l, nil
}

// Freeze prepares for inference the weights of the layers, which must not
// change afterwards, together with the other weights the caller multiplies
// by (fused matrices, an embedding): the device chooses their layouts all at
// once, sized against their total (tensor.Device.PrepareWeights). The layers
// then multiply through the device's weight products.
func Freeze(dev tensor.Device, others []*tensor.Weight, ls ...*Linear) {
	ws := append([]*tensor.Weight(nil), others...)
	for _, l := range ls {
		if l.W.Empty() {
			panic("nn: Freeze of a layer over a trainer's device tensors (NewLinearOf)")
		}
		ws, l.frozen = append(ws, &l.W), true
	}
	dev.PrepareWeights(ws...)
}

// Forward computes out = x·Wᵀ + b over x's rows.
func (l *Linear) Forward(dev tensor.Device, out, x tensor.Tensor) { l.forward(dev, out, x, false) }

// ForwardAcc computes out += x·Wᵀ + b over x's rows (a residual block's
// output projection).
func (l *Linear) ForwardAcc(dev tensor.Device, out, x tensor.Tensor) { l.forward(dev, out, x, true) }

func (l *Linear) forward(dev tensor.Device, out, x tensor.Tensor, acc bool) {
	if l.frozen {
		dev.MulT(out, x, &l.W, acc)
	} else {
		dev.MatMul(out, x, l.wt, false, true, 1, acc)
	}
	if !l.B.Empty() {
		dev.AddBias(out.RowRange(0, x.Rows()), l.B)
	}
}

// Backward accumulates dx += dout·W, dw += doutᵀ·x and db += the sum of
// dout's rows, given dout at Forward's output for the input x; any of dx,
// dw, db may be empty (not needed). The layer must be trainable
// (NewLinear).
func (l *Linear) Backward(dev tensor.Device, dx, dw, db, dout, x tensor.Tensor) {
	if !dx.Empty() {
		if l.wt.Empty() {
			panic("nn: Backward through a layer built frozen")
		}
		dev.MatMul(dx, dout, l.wt, false, false, 1, true)
	}
	if !dw.Empty() {
		dev.MatMul(dw, dout, x, true, false, 1, true)
	}
	if !db.Empty() {
		dev.SumRows(db, dout)
	}
}
