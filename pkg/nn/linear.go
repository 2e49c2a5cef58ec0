package nn

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Linear is a Hugging Face nn.Linear on a device: out = x·Wᵀ + b for the
// weight W [out, in] and the optional bias b [1, out].
//
// A trainer's Linear multiplies by the weight it updates, through the
// device's MatMul; a frozen one (Freeze) through the device's weight
// products (MulT), which may keep the weight in other layouts (transposed
// copies) that would go stale if it changed.
type Linear struct {
	// W is the weight [out, in] and B the bias [1, out] (empty: none).
	W, B   tensor.Tensor
	w      tensor.Weight
	frozen bool
}

// NewLinear returns the layer of weight w [out, in] and bias b (nil: none)
// on dev. Where dev's memory is the host's it views w's and b's values, so
// that an optimiser updating them in place updates the layer.
func NewLinear(dev tensor.Device, w tensor.Matrix, b []float32) (*Linear, error) {
	l := &Linear{w: tensor.WeightOf(w)}
	var err error
	if l.W, err = dev.Upload(w); err != nil {
		return nil, fmt.Errorf("nn: linear weight: %w", err)
	}
	if b != nil {
		if len(b) != w.Rows {
			return nil, fmt.Errorf("nn: linear bias of %d values for %d output features", len(b), w.Rows)
		}
		if l.B, err = dev.Upload(tensor.F32Matrix(b, 1, w.Rows)); err != nil {
			return nil, fmt.Errorf("nn: linear bias: %w", err)
		}
	}
	return l, nil
}

// Freeze prepares the layers' weights, which must not change afterwards,
// for inference: the device chooses their layouts (all of them at once,
// sized against their total).
func Freeze(dev tensor.Device, ls ...*Linear) {
	ws := make([]*tensor.Weight, len(ls))
	for i, l := range ls {
		ws[i], l.frozen = &l.w, true
	}
	dev.PrepareWeights(ws...)
}

// Forward computes out = x·Wᵀ + b over x's rows.
func (l *Linear) Forward(dev tensor.Device, out, x tensor.Tensor) {
	if l.frozen {
		dev.MulT(out, x, &l.w, false)
	} else {
		dev.MatMul(out, x, l.W, false, true, 1, false)
	}
	if !l.B.Empty() {
		dev.AddBias(out.RowRange(0, x.Rows()), l.B)
	}
}

// Backward accumulates dx += dout·W, dw += doutᵀ·x and db += the sum of
// dout's rows, given dout at Forward's output for the input x; any of dx,
// dw, db may be empty (not needed).
func (l *Linear) Backward(dev tensor.Device, dx, dw, db, dout, x tensor.Tensor) {
	if !dx.Empty() {
		dev.MatMul(dx, dout, l.W, false, false, 1, true)
	}
	if !dw.Empty() {
		dev.MatMul(dw, dout, x, true, false, 1, true)
	}
	if !db.Empty() {
		dev.SumRows(db, dout)
	}
}
