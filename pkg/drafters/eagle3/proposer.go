package eagle3

import (
	"fmt"
	"math"
	"slices"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// proposer drafts with an EAGLE-3 draft layer fed by the target's three
// feature layers. Chains are drafted top-1 at temperature 0 and, at
// temperature > 0, sampled token by token from the draft distribution q (the
// draft's logits warped by the serving sampler's rule), which it keeps for
// verification by speculative sampling, min(1, p/q). Trees are EAGLE-2's
// deterministic top-k trees at every temperature.
type proposer struct {
	m       *model.Model
	d       *Draft
	s       *Session
	tapIdx  []int  // distinct tap indices requested from the target
	slot    [3]int // feature c is tap slot[c] (layers may repeat on small targets)
	chain   bool
	depth   int
	builder *spec.DynamicBuilder
	topK    int
	nodes   int

	feats   []float32 // [rows, 3H]
	tok32   []int32
	ids     []int32
	logp    []float32
	sessOf  []int // candidate index -> session node id
	parents []int
	ftoks   []int32
	chainB  []int32

	// Sampled chains (temperature > 0).
	sampled bool
	dsm     *sample.Sampler // the serving rule, applied to the draft's logits
	rng     *sample.RNG     // the runner's stream: drafting and verification share it
	lg      []float32       // [V] draft logits over the target vocabulary
	q       []float32       // [(depth+1), V] q of each chain position, verification's draft rows
	par     [1]int
	tok     [1]int32
}

// newProposer builds the proposer of a configured decoding setup for
// target m; rng is the decoding loop's random stream, from which sampled
// chains are drawn, and capacity bounds a sequence's committed positions.
func newProposer(m *model.Model, d *Draft, cfg drafters.Decoding, capacity int, rng *sample.RNG) (*proposer, error) {
	ids := d.LayerIDs
	if ids == nil {
		ids = EngineDefaultLayers(m.NumLayers())
	}
	p := &proposer{m: m, d: d, chain: cfg.Mode == drafters.ModeChain, depth: cfg.Depth}
	for c, id := range ids {
		// A feature is the residual stream after a decoder layer, as the
		// capture stored it and the engines read it: for index L that is
		// the last layer's output before the final norm, which the model's
		// tap L (Transformers' last hidden_states entry) is not.
		tap := id
		if id == m.NumLayers() {
			tap = model.PreNormLast
		}
		j := slices.Index(p.tapIdx, tap)
		if j < 0 {
			j = len(p.tapIdx)
			p.tapIdx = append(p.tapIdx, tap)
		}
		p.slot[c] = j
	}
	sessNodes := max(cfg.Depth-1, 1)
	if p.chain {
		p.nodes = cfg.Depth
		if !cfg.Sampling.Greedy() {
			sm, err := sample.NewSampler(m.VocabSize(), cfg.Sampling)
			if err != nil {
				return nil, err
			}
			V := m.VocabSize()
			p.sampled, p.dsm, p.rng = true, sm, rng
			p.lg, p.q = make([]float32, V), make([]float32, (cfg.Depth+1)*V)
		}
	} else {
		dp := spec.DynamicParams{Depth: cfg.Depth, TopK: cfg.TopK, TotalTokens: cfg.TotalTokens}
		b, err := spec.NewDynamicBuilder(dp)
		if err != nil {
			return nil, err
		}
		p.builder, p.topK = b, cfg.TopK
		p.nodes = cfg.TotalTokens - 1
		sessNodes = max(cfg.Depth*cfg.TopK, 1)
		p.ids = make([]int32, cfg.TopK)
		p.logp = make([]float32, cfg.TopK)
	}
	p.s = d.NewSession(capacity, sessNodes)
	return p, nil
}

// Taps implements drafters.Proposer: the feature layers' taps.
func (p *proposer) Taps() []int { return p.tapIdx }

// MaxNodes implements drafters.Proposer.
func (p *proposer) MaxNodes() int { return p.nodes }

// fuse gathers the three tapped layers of the given rows of res into p.feats
// as [len(rows), 3H], low layer first.
func (p *proposer) fuse(res *model.Result, rows []int) []float32 {
	H := p.m.HiddenSize()
	need := len(rows) * 3 * H
	if cap(p.feats) < need {
		p.feats = make([]float32, need)
	}
	f := p.feats[:need]
	for t := range 3 {
		hid := res.HiddenOf(p.slot[t], 0)
		for j, r := range rows {
			copy(f[(j*3+t)*H:(j*3+t+1)*H], hid[r*H:(r+1)*H])
		}
	}
	return f
}

// Start implements drafters.Proposer.
func (p *proposer) Start(prompt []int, first int, res *model.Result) error {
	n := len(prompt)
	p.s.Truncate(0)
	rows := p.parents[:0]
	for i := range n {
		rows = append(rows, i)
	}
	p.parents = rows
	p.tok32 = p.tok32[:0]
	for _, t := range prompt[1:] {
		p.tok32 = append(p.tok32, int32(t))
	}
	p.tok32 = append(p.tok32, int32(first))
	return p.s.Extend(p.fuse(res, rows), p.tok32)
}

// Accept implements drafters.Proposer.
func (p *proposer) Accept(rows []int, res *model.Result, tokens []int) error {
	p.tok32 = p.tok32[:0]
	for _, t := range tokens {
		p.tok32 = append(p.tok32, int32(t))
	}
	return p.s.Extend(p.fuse(res, rows), p.tok32)
}

// Propose implements drafters.Proposer.
func (p *proposer) Propose(t *spec.Tree, root int) error {
	t.Reset()
	if p.sampled {
		return p.sampleChain(t)
	}
	if p.chain {
		c, err := p.s.DraftChain(p.depth, p.chainB[:0])
		p.chainB = c
		if err != nil {
			return err
		}
		parent := spec.Root
		for _, tok := range c {
			if parent, err = t.Add(int(tok), parent, 0, 0); err != nil {
				return err
			}
		}
		return nil
	}
	p.sessOf = p.sessOf[:0]
	return p.builder.Build(t, p)
}

// sampleChain drafts the chain by sampling: at each step q = the serving
// rule applied to the draft's logits (over the target vocabulary, -Inf
// outside the draft vocabulary), a token drawn from q, and the draft run on
// it for the next step. Row i of p.q holds the q node i was drawn from (row 0
// the root's), the layout spec.Verifier.SampleRows reads.
func (p *proposer) sampleChain(t *spec.Tree) error {
	V := len(p.lg)
	p.s.ClearTree()
	cur, parent := -1, spec.Root
	for step := range p.depth {
		if err := p.s.TargetLogits(cur, p.lg); err != nil {
			return err
		}
		q := p.q[step*V : (step+1)*V]
		if err := p.dsm.Probs(p.lg, q); err != nil {
			return fmt.Errorf("eagle3: draft distribution at chain step %d: %w", step+1, err)
		}
		x, err := sample.SampleProbs(q, p.rng)
		if err != nil {
			return fmt.Errorf("eagle3: drawing chain step %d from the draft: %w", step+1, err)
		}
		if parent, err = t.Add(x, parent, 0, 0); err != nil {
			return err
		}
		if step == p.depth-1 {
			break
		}
		p.par[0], p.tok[0] = cur, int32(x)
		ids, err := p.s.AddNodes(p.par[:], p.tok[:])
		if err != nil {
			return err
		}
		cur = ids[0]
	}
	clear(p.q[p.depth*V:]) // the last node's row: no children, never read
	return nil
}

// DraftProbs implements drafters.SampledProposer: the draft rows the last
// Propose sampled from, in spec.Verifier.SampleRows' layout, or nil when the
// tree was drafted deterministically (top-1 chains, top-k trees).
func (p *proposer) DraftProbs() []float32 {
	if !p.sampled {
		return nil
	}
	return p.q
}

// Expand implements spec.Expander: it evaluates the frontier nodes in the
// draft session in one batch (the root needs none) and writes each one's top-k
// continuations.
func (p *proposer) Expand(cands *spec.Tree, frontier []int, k int, tokens []int, logps []float64) error {
	if len(frontier) == 1 && frontier[0] == spec.Root {
		return p.topInto(-1, k, tokens, logps)
	}
	p.parents, p.ftoks = p.parents[:0], p.ftoks[:0]
	for _, f := range frontier {
		nd := cands.Node(f)
		par := -1
		if nd.Parent != spec.Root {
			par = p.sessOf[nd.Parent]
			if par < 0 {
				return fmt.Errorf("eagle3: EAGLE-2 candidate %d expands before its parent %d was drafted", f, nd.Parent)
			}
		}
		p.parents = append(p.parents, par)
		p.ftoks = append(p.ftoks, int32(nd.Token))
	}
	ids, err := p.s.AddNodes(p.parents, p.ftoks)
	if err != nil {
		return err
	}
	for len(p.sessOf) < cands.Len() {
		p.sessOf = append(p.sessOf, -1)
	}
	for j, f := range frontier {
		p.sessOf[f] = ids[j]
		if err := p.topInto(ids[j], k, tokens[j*k:(j+1)*k], logps[j*k:(j+1)*k]); err != nil {
			return err
		}
	}
	return nil
}

// topInto writes node's top-k continuations, padding with -Inf when the draft
// vocabulary is smaller than k.
func (p *proposer) topInto(node, k int, tokens []int, logps []float64) error {
	n := p.s.TopK(node, k, p.ids[:k], p.logp[:k])
	for i := range k {
		if i < n {
			tokens[i] = int(p.ids[i])
			logps[i] = min(float64(p.logp[i]), 0)
		} else {
			tokens[i] = 0
			logps[i] = math.Inf(-1)
		}
	}
	return nil
}

// Finish implements drafters.Proposer.
func (p *proposer) Finish([]int) {}
