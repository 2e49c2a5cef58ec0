package dspark

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Markov is DSpark's vanilla low-rank Markov head (DeepSpec's markov_head,
// markov_head_type "vanilla"): a first-order transition bias added to each
// block slot's logits, logits_k += W2·W1[prev_k], where prev_k is the token
// before slot k's prediction (the anchor x_p for slot 0, the token at slot
// k-1 after it: ground truth in training, the drafted token at inference).
// It makes the block semi-autoregressive without re-running the backbone:
// the bias needs one row gather and one rank-r product per drafted token.
type Markov struct {
	// W1 is the transition embedding [V, r] (markov_head.markov_w1.weight),
	// W2 the output projection [V, r] (markov_head.markov_w2.weight, an
	// nn.Linear r -> V without bias), both float32 on the device.
	W1, W2 tensor.Tensor
}

// Rank is r, the head's low rank.
func (m *Markov) Rank() int { return m.W1.Cols() }

// Forward writes into e [rows, r] the rows W1[prev] and adds e·W2ᵀ to
// logits [rows, V], for rows = len(prev). e is kept for Backward (and is the
// confidence head's Markov input).
func (m *Markov) Forward(dev tensor.Device, logits, e tensor.Tensor, prev []int32) {
	rows := len(prev)
	e = e.RowRange(0, rows)
	dev.GatherRows(e, m.W1, prev)
	dev.MatMul(logits.RowRange(0, rows), e, m.W2, false, true, 1, true)
}

// Backward accumulates dW2 += dlogitsᵀ·e and dW1[prev] += de + dlogits·W2,
// given dlogits at Forward's logits and e its gathered rows. de [rows, r]
// holds on entry the gradient at e from its other readers (the confidence
// head's, or zeros) and is consumed. Repeated prev tokens add up in order.
// ones holds at least rows ones (AddScaledRows' scale).
func (m *Markov) Backward(dev tensor.Device, dW1, dW2, de, dlogits, e tensor.Tensor, prev []int32, ones []float32) {
	rows := len(prev)
	e, de, dlogits = e.RowRange(0, rows), de.RowRange(0, rows), dlogits.RowRange(0, rows)
	dev.MatMul(dW2, dlogits, e, true, false, 1, true)
	dev.MatMul(de, dlogits, m.W2, false, false, 1, true)
	dev.AddScaledRows(dW1, de, prev, ones[:rows])
}

// Confidence is DSpark's confidence head (DeepSpec's AcceptRatePredictor,
// confidence_head.proj): one linear unit with bias over the slot's backbone
// output o_k, concatenated with the slot's Markov row W1[prev_k] when
// WithMarkov (confidence_head_with_markov). Its output is the logit of the
// probability that slot k's draft is accepted given that the slots before
// it were.
type Confidence struct {
	// Proj is the Linear(Hd [+ r], 1) with bias.
	Proj *nn.Linear
	// WithMarkov feeds [o_k ; W1[prev_k]] instead of o_k.
	WithMarkov bool
}

// ConfActs are the confidence head's activations over up to R rows: In
// [R, Hd+r], the concatenated input (with WithMarkov only).
type ConfActs struct {
	In tensor.Tensor
	// parts is ConcatCols' and SplitCols' list, kept so that a call
	// allocates nothing.
	parts []tensor.Tensor
}

// ConfScratch holds Backward's temporaries for up to R rows: DIn [R, Hd+r]
// and its split DO [R, Hd], DE [R, r] (with WithMarkov only).
type ConfScratch struct {
	DIn, DO, DE tensor.Tensor
}

// NewActs allocates the activations and backward scratch (withGrad) for up
// to rows rows of a backbone of width hd and a Markov head of rank r.
func (c *Confidence) NewActs(dev tensor.Device, rows, hd, r int, withGrad bool) (*ConfActs, *ConfScratch, error) {
	a, s := &ConfActs{}, &ConfScratch{}
	if !c.WithMarkov {
		return a, s, nil
	}
	al := tensor.Allocator{Dev: dev}
	a.In = al.F32(rows, hd+r)
	if withGrad {
		s.DIn, s.DO, s.DE = al.F32(rows, hd+r), al.F32(rows, hd), al.F32(rows, r)
	}
	if al.Err != nil {
		return nil, nil, fmt.Errorf("dspark: confidence head buffers: %w", al.Err)
	}
	return a, s, nil
}

// Forward writes the confidence logits [rows, 1] of the rows of o [rows, Hd]
// and e [rows, r] (the Markov head's gathered rows; unused without
// WithMarkov).
func (c *Confidence) Forward(dev tensor.Device, out, o, e tensor.Tensor, a *ConfActs) {
	rows := o.Rows()
	if !c.WithMarkov {
		c.Proj.Forward(dev, out.RowRange(0, rows), o)
		return
	}
	in := a.In.RowRange(0, rows)
	a.parts = append(a.parts[:0], o, e.RowRange(0, rows))
	dev.ConcatCols(in, a.parts)
	c.Proj.Forward(dev, out.RowRange(0, rows), in)
}

// Backward accumulates into do and de the gradients at Forward's o and e
// (de untouched without WithMarkov) and into dW, db the projection's, given
// dout [rows, 1] at its output.
func (c *Confidence) Backward(dev tensor.Device, do, de, dW, db, dout, o tensor.Tensor, a *ConfActs, s *ConfScratch) {
	rows := o.Rows()
	dout = dout.RowRange(0, rows)
	if !c.WithMarkov {
		c.Proj.Backward(dev, do, dW, db, dout, o)
		return
	}
	din := s.DIn.RowRange(0, rows)
	dev.Zero(din)
	c.Proj.Backward(dev, din, dW, db, dout, a.In.RowRange(0, rows))
	dO, dE := s.DO.RowRange(0, rows), s.DE.RowRange(0, rows)
	a.parts = append(a.parts[:0], dO, dE)
	dev.SplitCols(din, a.parts)
	dev.Add(do, dO)
	dev.Add(de.RowRange(0, rows), dE)
}
