package dspark

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// Session is one sequence's drafting state: DFlash's context of the
// verified positions (dflash.Context) and, after Backbone, the block's base
// logits lm_head(o_k) for every slot, which Step adds the Markov bias to
// one slot at a time.
type Session struct {
	*dflash.Context
	d   *Draft
	emb []float32
	y   []float32 // [B, Hd] the last Backbone's outputs o_k

	// The heads on a host device over the draft's own slices.
	dev    tensor.Device
	markov *Markov
	conf   *Confidence
	cacts  *ConfActs
	base   []float32 // [B, V] lm_head(o_k)
	e      []float32 // [1, r] W1[prev]
	c      []float32 // [1, 1] confidence logit
	prev   [1]int32
}

// NewSession allocates a drafting session for up to capacity verified
// positions.
func (d *Draft) NewSession(capacity int) (*Session, error) {
	g := d.Geometry
	s := &Session{d: d, Context: dflash.NewContext(g, d.Params, capacity), dev: cpu.New(nil)}
	B, V, h := g.BlockSize, g.Vocab, g.Hidden
	s.emb, s.base = make([]float32, B*h), make([]float32, B*V)
	sh := d.Heads.Shape
	if sh.Rank > 0 {
		s.markov = &Markov{W1: cpu.HostTensor(d.Heads.W1, V, sh.Rank), W2: cpu.HostTensor(d.Heads.W2, V, sh.Rank)}
		s.e = make([]float32, sh.Rank)
	}
	if sh.Confidence {
		proj, err := nn.NewLinear(s.dev, tensor.F32Matrix(d.Heads.ConfW, 1, sh.ConfIn(h)), d.Heads.ConfB)
		if err != nil {
			return nil, fmt.Errorf("dspark: confidence head: %w", err)
		}
		s.conf = &Confidence{Proj: proj, WithMarkov: sh.WithMarkov}
		if s.cacts, _, err = s.conf.NewActs(s.dev, 1, h, sh.Rank, false); err != nil {
			return nil, err
		}
		s.c = make([]float32, 1)
	}
	return s, nil
}

// Backbone runs the backbone once on the block [anchor, mask, ..., mask]
// at positions Len()..Len()+B-1 over the whole cached context (strictly
// before the anchor) and keeps every slot's base logits lm_head(o_k).
func (s *Session) Backbone(anchor int) error {
	g := s.d.Geometry
	B, h, V := g.BlockSize, g.Hidden, g.Vocab
	if anchor < 0 || anchor >= V || g.MaskToken >= V {
		return fmt.Errorf("dspark: anchor token %d is outside the vocabulary [0, %d)", anchor, V)
	}
	copy(s.emb[:h], s.d.Embed[anchor*h:(anchor+1)*h])
	for k := 1; k < B; k++ {
		copy(s.emb[k*h:(k+1)*h], s.d.Embed[g.MaskToken*h:(g.MaskToken+1)*h])
	}
	y, err := s.Forward(s.emb)
	if err != nil {
		return err
	}
	s.y = y
	s.dev.MatMul(cpu.HostTensor(s.base, B, V), cpu.HostTensor(y, B, h), cpu.HostTensor(s.d.LMHead, V, h), false, true, 1, false)
	return nil
}

// Step writes into dst [V] slot k's logits after the last Backbone:
// lm_head(o_k) plus the Markov bias of prev (the anchor for slot 0, slot
// k-1's drafted token after it), and returns the confidence head's
// probability that slot k's draft is accepted given that slots < k were
// (NaN without a confidence head).
func (s *Session) Step(k, prev int, dst []float32) (float32, error) {
	g := s.d.Geometry
	V, h := g.Vocab, g.Hidden
	if k < 0 || k >= g.BlockSize || len(dst) != V {
		return 0, fmt.Errorf("dspark: step %d of a block of %d into %d logits, want %d", k, g.BlockSize, len(dst), V)
	}
	if prev < 0 || prev >= V {
		return 0, fmt.Errorf("dspark: previous token %d is outside the vocabulary [0, %d)", prev, V)
	}
	copy(dst, s.base[k*V:(k+1)*V])
	s.prev[0] = int32(prev)
	r := s.d.Heads.Shape.Rank
	if s.markov != nil {
		s.markov.Forward(s.dev, cpu.HostTensor(dst, 1, V), cpu.HostTensor(s.e, 1, r), s.prev[:])
	}
	if s.conf == nil {
		return float32(math.NaN()), nil
	}
	var e tensor.Tensor
	if r > 0 {
		e = cpu.HostTensor(s.e, 1, r)
	}
	s.conf.Forward(s.dev, cpu.HostTensor(s.c, 1, 1), cpu.HostTensor(s.y[k*h:(k+1)*h], 1, h), e, s.cacts)
	return sigmoid(float64(s.c[0]), 1), nil
}

// ConfidenceLogit is the confidence head's logit of the last Step (NaN
// without a confidence head), which a calibration rescales.
func (s *Session) ConfidenceLogit() float64 {
	if s.conf == nil {
		return math.NaN()
	}
	return float64(s.c[0])
}

// sigmoid is σ(z/temp).
func sigmoid(z, temp float64) float32 {
	return float32(1 / (1 + math.Exp(-z/temp)))
}
