package dspark

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// Session is one sequence's drafting state: the backbone's context KV
// cache of the verified positions 0..Len()-1 (as dflash's session keeps
// it), and, after Backbone, the block's base logits lm_head(o_k) for every
// slot, which Step adds the Markov bias to one slot at a time.
type Session struct {
	d        *Draft
	net      *dflash.Net[float32]
	capacity int
	n        int
	kc, vc   [][]float32 // per layer [capacity, kvDim]
	kcv, vcv [][]float32 // their filled rows, per call
	pos      []int
	emb      []float32
	blocks   [1]dflash.Block

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
	s := &Session{d: d, capacity: capacity, net: dflash.NewNet[float32](g, d.Params, nil), dev: cpu.New(nil)}
	s.kc, s.vc = make([][]float32, g.Layers), make([][]float32, g.Layers)
	s.kcv, s.vcv = make([][]float32, g.Layers), make([][]float32, g.Layers)
	for l := range g.Layers {
		s.kc[l] = make([]float32, capacity*g.KVDim())
		s.vc[l] = make([]float32, capacity*g.KVDim())
	}
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

// Len is the number of cached context positions.
func (s *Session) Len() int { return s.n }

// Crop drops the cached positions from n on.
func (s *Session) Crop(n int) { s.n = min(s.n, max(n, 0)) }

// Append caches the context of m new positions Len()..Len()+m-1 from their
// fused target features feats [m, Features*H].
func (s *Session) Append(feats []float32) error {
	g := s.d.Geometry
	m := len(feats) / g.FCIn()
	if m*g.FCIn() != len(feats) {
		return fmt.Errorf("dspark: %d feature values are not rows of %d", len(feats), g.FCIn())
	}
	if s.n+m > s.capacity {
		return fmt.Errorf("dspark: %d context positions exceed the session's capacity %d", s.n+m, s.capacity)
	}
	if m == 0 {
		return nil
	}
	s.pos = s.pos[:0]
	for i := range m {
		s.pos = append(s.pos, s.n+i)
	}
	if err := s.net.Context(feats, s.pos); err != nil {
		return err
	}
	kd := g.KVDim()
	for l := range g.Layers {
		copy(s.kc[l][s.n*kd:(s.n+m)*kd], s.net.Kc[l])
		copy(s.vc[l][s.n*kd:(s.n+m)*kd], s.net.Vc[l])
	}
	s.n += m
	return nil
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
	kd := g.KVDim()
	for l := range g.Layers {
		s.kcv[l], s.vcv[l] = s.kc[l][:s.n*kd], s.vc[l][:s.n*kd]
	}
	s.blocks[0] = dflash.Block{Row0: 0, Start: s.n, Ctx: s.n}
	if err := s.net.Blocks(s.emb, s.blocks[:], s.kcv, s.vcv); err != nil {
		return err
	}
	s.dev.MatMul(cpu.HostTensor(s.base, B, V), cpu.HostTensor(s.net.Y[:B*h], B, h), cpu.HostTensor(s.d.LMHead, V, h), false, true, 1, false)
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
	s.conf.Forward(s.dev, cpu.HostTensor(s.c, 1, 1), cpu.HostTensor(s.net.Y[k*h:(k+1)*h], 1, h), e, s.cacts)
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
