package medusa

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// proposer drafts with Medusa heads on the target's final post-norm state of
// the newest committed position, and scores each head's guesses against the
// generated tokens (drafters.HitReporter).
type proposer struct {
	m      *model.Model
	h      *Heads
	static *spec.StaticTree
	widths []int // candidates needed per head: the tree's widths, at least hitK
	hitK   int
	heads  int // heads the tree uses
	tapIdx []int

	x     []float32 // [H] state the heads read
	score *Scorer
	topk  [][]int // per head, best first
	// This prompt's predictions, scored when it ends: step s predicted after
	// output index roots[s], head h's top hitK in guesses[(s*heads+h)*hitK:].
	roots   []int
	guesses []int
	hits    []drafters.HeadHits
}

// newProposer builds the proposer of a configured decoding setup.
func newProposer(m *model.Model, h *Heads, d drafters.Decoding) (*proposer, error) {
	choices := d.Tree
	if d.Mode == drafters.ModeChain {
		choices = chainChoices(d.Depth)
	}
	st, err := spec.CompileChoices(choices)
	if err != nil {
		return nil, fmt.Errorf("tree: %w", err)
	}
	// Only the heads the tree reaches are run: a chain of 4 drafted by a
	// 6-head export costs 4 heads, as it would in an engine told to draft 4.
	used := min(max(choices.Depth(), 1), h.Heads)
	// The heads compute on a sibling of the target's device (a device
	// serves one caller).
	sc, err := h.NewScorer(m.Device().Sibling(), used)
	if err != nil {
		return nil, err
	}
	p := &proposer{m: m, h: h, static: st, heads: used, tapIdx: []int{m.NumLayers()},
		x: make([]float32, h.Hidden), score: sc}
	tw := st.Widths()
	p.widths = make([]int, used)
	p.topk = make([][]int, used)
	p.hitK = min(d.HitK, h.Vocab)
	for hd := range used {
		w := p.hitK
		if hd < len(tw) {
			w = max(w, tw[hd])
		}
		p.widths[hd] = min(w, h.Vocab)
		p.topk[hd] = make([]int, p.widths[hd])
	}
	p.hits = make([]drafters.HeadHits, used)
	for hd := range p.hits {
		p.hits[hd] = drafters.HeadHits{Head: hd, K: p.hitK}
	}
	return p, nil
}

// chainChoices returns the static tree of a chain of depth heads: top-1 of
// each head.
func chainChoices(depth int) spec.Choices {
	c := make(spec.Choices, depth)
	for d := range depth {
		c[d] = make([]int, d+1)
	}
	return c
}

// Taps implements drafters.Proposer: the final post-norm state.
func (p *proposer) Taps() []int { return p.tapIdx }

// MaxNodes implements drafters.Proposer.
func (p *proposer) MaxNodes() int { return p.static.Len() }

// predict runs the heads the tree uses on p.x and records the candidates
// for root.
func (p *proposer) predict(root int) {
	p.roots = append(p.roots, root)
	p.score.Score(p.x)
	for hd := range p.heads {
		p.score.TopK(hd, p.topk[hd])
		p.guesses = append(p.guesses, p.topk[hd][:p.hitK]...)
	}
}

// Start implements drafters.Proposer.
func (p *proposer) Start(prompt []int, first int, res *model.Result) error {
	hid := res.HiddenOf(0, 0)
	H := p.h.Hidden
	copy(p.x, hid[(len(prompt)-1)*H:len(prompt)*H])
	p.roots, p.guesses = p.roots[:0], p.guesses[:0]
	p.predict(0)
	return nil
}

// Propose implements drafters.Proposer.
func (p *proposer) Propose(t *spec.Tree, root int) error {
	if n := len(p.roots); n == 0 || p.roots[n-1] != root {
		return fmt.Errorf("medusa: the heads have no prediction after output token %d", root)
	}
	return p.static.Build(t, p.topk)
}

// Accept implements drafters.Proposer.
func (p *proposer) Accept(rows []int, res *model.Result, tokens []int) error {
	hid := res.HiddenOf(0, 0)
	H := p.h.Hidden
	last := rows[len(rows)-1]
	copy(p.x, hid[last*H:(last+1)*H])
	// The step appended tokens after the old root: the newest is
	// len(tokens) places further in the output.
	p.predict(p.roots[len(p.roots)-1] + len(tokens))
	return nil
}

// Finish scores every recorded prediction against the generated tokens: head
// h's guess after output index r is right when it equals out[r+h+1].
func (p *proposer) Finish(out []int) {
	for s, root := range p.roots {
		for hd := range p.heads {
			j := root + hd + 1
			if j >= len(out) {
				break
			}
			hh := &p.hits[hd]
			hh.Count++
			top := p.guesses[(s*p.heads+hd)*p.hitK : (s*p.heads+hd+1)*p.hitK]
			for rank, tok := range top {
				if tok == out[j] {
					if rank == 0 {
						hh.Top1++
					}
					hh.TopK++
					break
				}
			}
		}
	}
	p.roots, p.guesses = p.roots[:0], p.guesses[:0]
}

// HeadHits implements drafters.HitReporter.
func (p *proposer) HeadHits() (string, []drafters.HeadHits) { return "Medusa head", p.hits }
