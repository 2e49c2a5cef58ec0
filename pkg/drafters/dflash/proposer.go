package dflash

import (
	"fmt"
	"slices"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// proposer drafts a chain of Depth tokens per round from one DFlash block
// forward: greedy (each slot's argmax) at temperature 0; above it each slot's
// token is sampled from its draft distribution q_k (the serving rule applied
// to the slot's logits), which it keeps for verification by speculative
// sampling, min(1, p/q). The slots are drafted in parallel, so q_k does not
// depend on the tokens drawn at earlier slots: it is the distribution the
// k-th token was drawn from given everything before it, which is what
// lossless verification needs.
type proposer struct {
	d      *Draft
	s      *Session
	tgt    Target
	depth  int
	tapIdx []int // distinct taps requested from the target
	slot   []int // feature c is tap slot[c]
	anchor int   // the newest verified token, slot 0 of the next block
	feats  []float32
	lg     []float32 // [(B-1), V] the last block's logits

	sampled bool
	dsm     *sample.Sampler
	rng     *sample.RNG
	q       []float32 // [(depth+1), V] verification's draft rows
}

func newProposer(d *Draft, tgt Target, numLayers int, cfg drafters.Decoding, capacity int, rng *sample.RNG) (*proposer, error) {
	g := d.Geometry
	p := &proposer{d: d, tgt: tgt, depth: cfg.Depth, s: d.NewSession(capacity), lg: make([]float32, (g.BlockSize-1)*g.Vocab)}
	for _, id := range d.LayerIDs {
		// HF index L is the last layer's output before the final norm, as
		// the capture stored it and the engines read it; the model's tap L
		// is after the norm.
		tap := id
		if id == numLayers {
			tap = model.PreNormLast
		}
		j := slices.Index(p.tapIdx, tap)
		if j < 0 {
			j = len(p.tapIdx)
			p.tapIdx = append(p.tapIdx, tap)
		}
		p.slot = append(p.slot, j)
	}
	if !cfg.Sampling.Greedy() {
		sm, err := sample.NewSampler(g.Vocab, cfg.Sampling)
		if err != nil {
			return nil, err
		}
		p.sampled, p.dsm, p.rng = true, sm, rng
		p.q = make([]float32, (cfg.Depth+1)*g.Vocab)
	}
	return p, nil
}

// Taps implements drafters.Proposer.
func (p *proposer) Taps() []int { return p.tapIdx }

// MaxNodes implements drafters.Proposer.
func (p *proposer) MaxNodes() int { return p.depth }

// fuse gathers the tapped layers of rows of res as [len(rows), Features*H],
// in the draft's layer order.
func (p *proposer) fuse(res *model.Result, rows []int) []float32 {
	H := p.d.Geometry.TargetHidden
	F := len(p.slot)
	p.feats = grow(p.feats, len(rows)*F*H)
	for c, sl := range p.slot {
		hid := res.HiddenOf(sl, 0)
		for j, r := range rows {
			copy(p.feats[(j*F+c)*H:(j*F+c+1)*H], hid[r*H:(r+1)*H])
		}
	}
	return p.feats
}

// Start implements drafters.Proposer: the prompt's rows are the first
// context, the first generated token the first anchor.
func (p *proposer) Start(prompt []int, first int, res *model.Result) error {
	p.s.Crop(0)
	rows := make([]int, len(prompt))
	for i := range rows {
		rows[i] = i
	}
	p.anchor = first
	return p.s.Append(p.fuse(res, rows))
}

// Accept implements drafters.Proposer: the kept rows (the old anchor and the
// accepted drafts) become context; the bonus token, which has no target
// state yet, is the next anchor.
func (p *proposer) Accept(rows []int, res *model.Result, tokens []int) error {
	if len(tokens) == 0 {
		return fmt.Errorf("dflash: Accept without tokens")
	}
	p.anchor = tokens[len(tokens)-1]
	return p.s.Append(p.fuse(res, rows))
}

// Propose implements drafters.Proposer: one block forward, then a chain of
// Depth tokens.
func (p *proposer) Propose(t *spec.Tree, _ int) error {
	t.Reset()
	if err := p.s.Block(p.tgt, p.anchor, p.lg); err != nil {
		return err
	}
	V := p.d.Geometry.Vocab
	parent := spec.Root
	for k := range p.depth {
		row := p.lg[k*V : (k+1)*V]
		var x int
		if p.sampled {
			q := p.q[k*V : (k+1)*V]
			if err := p.dsm.Probs(row, q); err != nil {
				return fmt.Errorf("dflash: draft distribution of slot %d: %w", k+1, err)
			}
			var err error
			if x, err = sample.SampleProbs(q, p.rng); err != nil {
				return fmt.Errorf("dflash: drawing slot %d from the draft: %w", k+1, err)
			}
		} else {
			x = argmax(row)
		}
		var err error
		if parent, err = t.Add(x, parent, 0, 0); err != nil {
			return err
		}
	}
	if p.sampled {
		clear(p.q[p.depth*V:]) // the last node's row: no children, never read
	}
	return nil
}

// argmax is the first largest value's index.
func argmax(v []float32) int {
	b := 0
	for i, x := range v {
		if x > v[b] {
			b = i
		}
	}
	return b
}

// DraftProbs implements drafters.SampledProposer.
func (p *proposer) DraftProbs() []float32 {
	if !p.sampled {
		return nil
	}
	return p.q
}

// Finish implements drafters.Proposer.
func (p *proposer) Finish([]int) {}
