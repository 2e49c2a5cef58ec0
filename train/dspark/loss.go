package dspark

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// LossWeights weigh DSpark's three loss terms (DeepSpec loss.py's and
// SpecForge's dspark_*_alpha defaults: 0.1, 0.9, 1.0).
type LossWeights struct {
	// CE weighs the hard cross-entropy of the draft logits (Markov bias
	// included) against the label tokens.
	CE float64 `json:"ce"`
	// L1 weighs Σ_v |softmax(draft)_v - softmax(target)_v| (twice the total
	// variation).
	L1 float64 `json:"l1"`
	// Confidence weighs the confidence head's binary cross-entropy toward
	// the detached acceptance α* = 1 - ½‖p_d - p_t‖₁, clamped to [0, 1].
	Confidence float64 `json:"confidence"`
}

// DefaultLossWeights are DeepSpec's: 0.1, 0.9, 1.0.
func DefaultLossWeights() LossWeights { return LossWeights{CE: 0.1, L1: 0.9, Confidence: 1} }

func (w LossWeights) validate() error {
	if !(w.CE >= 0 && w.L1 >= 0 && w.Confidence >= 0) || w.CE+w.L1 == 0 {
		return fmt.Errorf("dspark: loss weights ce %g, l1 %g, confidence %g: want non-negative weights with ce or l1 above 0 (the draft needs a term to learn from)", w.CE, w.L1, w.Confidence)
	}
	return nil
}

// LossStats are a batch's loss terms, each the w-weighted mean over its
// rows (w normalised by its sum), and Alpha the w-weighted mean α*.
type LossStats struct {
	Loss, CE, L1, BCE, Alpha float64
	// Weight is Σ w, the normaliser (0: the batch had no weighted row).
	Weight float64
}

// loss computes DSpark's combined objective over rows of block slots:
//
//	L = CE·CE_w + L1·L1_w + Confidence·BCE_w
//
// every term a sum over rows weighted by w_r / Σw (w = loss mask × slot
// decay), where CE_r = -log softmax(logits_r)[label_r], L1_r = Σ_v |q_v -
// p_v| for q = softmax(logits_r) and p row r of the target distribution,
// and BCE_r = BCE(σ(c_r), α*_r) on the confidence logit c_r with the
// detached target α*_r = clamp(1 - ½ L1_r, 0, 1). It holds its buffers for
// up to R rows of V logits.
type loss struct {
	w    LossWeights
	dL1  tensor.Tensor // [R, V] the L1 term's gradient
	wCE  tensor.Tensor // [R, 1] CE's row weights
	unit tensor.Tensor // [1, 1] LKLoss's unit row weight
	lab  tensor.Tensor // I32 [R, 1] the labels
	// Host copies.
	wce, wl1, conf, dconf []float32
	alpha                 []float64
	one                   []float32 // {1}, the unit weight's value
}

// tv is the LK form whose loss is 1 - α = ½ L1 (p and q each sum to one).
var tv = tensor.LK{TV: 1}

func newLoss(dev tensor.Device, w LossWeights, rows, vocab int, withGrad bool) (*loss, error) {
	if err := w.validate(); err != nil {
		return nil, err
	}
	al := tensor.Allocator{Dev: dev}
	l := &loss{w: w, wCE: al.F32(rows, 1), unit: al.F32(1, 1), lab: al.Alloc(tensor.I32, rows, 1)}
	if withGrad {
		l.dL1 = al.F32(rows, vocab)
	}
	if al.Err != nil {
		return nil, fmt.Errorf("dspark: loss buffers: %w", al.Err)
	}
	l.wce, l.wl1, l.conf, l.dconf = make([]float32, rows), make([]float32, rows), make([]float32, rows), make([]float32, rows)
	l.alpha, l.one = make([]float64, rows), []float32{1}
	return l, nil
}

// forward returns the loss over the rows of logits [rows, V] (Markov bias
// included), conf [rows, 1] (confidence logits; empty without a confidence
// head), the target distributions pT [rows, V], the labels and the weights
// w (host slices of rows values; a row of weight 0 is skipped). When
// dlogits is not empty it receives d(loss)/d(logits), overwritten (it may
// be logits itself, whose values are then consumed), and dconf [rows, 1]
// d(loss)/d(conf) (α* held constant). Every term is normalised by norm, the
// Σw of the whole batch these rows are part of (0: their own Σw), so that
// a batch's sequences, passed one at a time, add up to its loss. The
// per-row α (before clamping) stay in l.alpha.
func (l *loss) forward(dev tensor.Device, dlogits, dconf, logits, conf, pT tensor.Tensor, labels []int32, w []float32, norm float64) LossStats {
	rows := len(labels)
	var st LossStats
	for _, v := range w[:rows] {
		st.Weight += float64(v)
	}
	if norm == 0 {
		norm = st.Weight
	}
	if st.Weight == 0 {
		if !dlogits.Empty() {
			dev.Zero(dlogits.RowRange(0, rows))
		}
		if !dconf.Empty() {
			dev.Zero(dconf.RowRange(0, rows))
		}
		return st
	}
	inv := 1 / norm
	for r, v := range w[:rows] {
		l.wce[r] = float32(l.w.CE * float64(v) * inv)
		// TV = ½ L1, so the L1 term's weight doubles.
		l.wl1[r] = float32(2 * l.w.L1 * float64(v) * inv)
	}
	dev.Write(l.wCE.RowRange(0, rows), l.wce[:rows])
	dev.WriteI32(l.lab, labels[:rows])
	// α* needs every weighted row's own α, which LKLoss returns as a sum:
	// one call per row (the row's TV gradient comes with it). The rows are
	// computed with unit weight and scaled after, so α is exact whatever
	// the L1 weight (0 included).
	var l1 float64
	dev.Write(l.unit, l.one)
	for r, v := range w[:rows] {
		var dl tensor.Tensor
		if !dlogits.Empty() {
			dl = l.dL1.RowRange(r, r+1)
		}
		if v == 0 {
			l.alpha[r] = 0
			if !dl.Empty() {
				dev.Zero(dl)
			}
			continue
		}
		lr, a := dev.LKLoss(dl, logits.RowRange(r, r+1), pT.RowRange(r, r+1), l.unit, tv)
		l.alpha[r] = a
		l1 += float64(v) * inv * 2 * lr
		if !dl.Empty() {
			dev.Scale(dl, l.wl1[r])
		}
	}
	st.L1 = l1
	var dce tensor.Tensor
	if !dlogits.Empty() {
		dce = dlogits.RowRange(0, rows)
	}
	st.CE = dev.CrossEntropy(dce, logits.RowRange(0, rows), l.lab.RowRange(0, rows), l.wCE.RowRange(0, rows))
	if l.w.CE > 0 {
		st.CE /= l.w.CE
	} else {
		st.CE = 0
	}
	if !dce.Empty() {
		dev.Add(dce, l.dL1.RowRange(0, rows))
	}
	st.Loss = l.w.CE*st.CE + l.w.L1*st.L1
	for r, v := range w[:rows] {
		st.Alpha += float64(v) * inv * l.alpha[r]
	}
	if conf.Empty() {
		return st
	}
	dev.Read(l.conf[:rows], conf.RowRange(0, rows))
	for r, v := range w[:rows] {
		l.dconf[r] = 0
		if v == 0 {
			continue
		}
		a := min(max(l.alpha[r], 0), 1)
		c := float64(l.conf[r])
		// BCE with logits: softplus(c) - a·c, computed stably.
		sp := math.Max(c, 0) + math.Log1p(math.Exp(-math.Abs(c)))
		wr := float64(v) * inv
		st.BCE += wr * (sp - a*c)
		l.dconf[r] = float32(l.w.Confidence * wr * (sigmoid(c) - a))
	}
	st.Loss += l.w.Confidence * st.BCE
	if !dconf.Empty() {
		dev.Write(dconf.RowRange(0, rows), l.dconf[:rows])
	}
	return st
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
