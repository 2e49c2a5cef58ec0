package eval

import (
	"fmt"
	"math"
	"slices"

	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/medusa"
)

// Drafter is a loaded drafter, ready to run against one target model.
type Drafter struct {
	// Info describes where the drafter came from.
	Info   *DrafterInfo
	medusa *medusa.Heads
	eagle  *eagle3.Draft
}

// LoadDrafter loads the drafter info describes for target m. The loaders
// check the export's config against its weights exactly and refuse
// non-finite weights; LoadDrafter then checks the export against the
// drafter.json found for it (kind, shape, feature layers) and its geometry
// against the target's.
func LoadDrafter(info *DrafterInfo, m *model.Model) (*Drafter, error) {
	var d *Drafter
	switch info.Kind {
	case KindMedusa:
		ld, err := medusa.Load(info.Dir)
		if err != nil {
			return nil, fmt.Errorf("eval: loading Medusa heads: %w", err)
		}
		if err := info.checkMedusa(ld); err != nil {
			return nil, err
		}
		if d, err = NewMedusaDrafter(ld.Heads, m); err != nil {
			return nil, fmt.Errorf("%w (heads from %s)", err, ld.Weights)
		}
	case KindEagle3:
		dr, err := eagle3.LoadDraft(info.Dir, m.Embed, m.Backend())
		if err != nil {
			return nil, fmt.Errorf("eval: loading the EAGLE-3 draft: %w", err)
		}
		if err := info.checkEagle(dr); err != nil {
			return nil, err
		}
		if d, err = NewEagleDrafter(dr, m); err != nil {
			return nil, fmt.Errorf("%w (draft from %s)", err, info.Dir)
		}
	default:
		return nil, fmt.Errorf("eval: unknown drafter kind %q in %s", info.Kind, info.Dir)
	}
	d.Info = info
	return d, nil
}

// NewMedusaDrafter wraps Medusa heads held in memory (for example a trainer's)
// as a drafter for m.
func NewMedusaDrafter(h *medusa.Heads, m *model.Model) (*Drafter, error) {
	if h.Hidden != m.HiddenSize() || h.Vocab != m.VocabSize() {
		return nil, fmt.Errorf("eval: the Medusa heads do not fit the target: they read hidden states of size %d and score a vocabulary of %d, the target's hidden_size is %d and vocab_size %d (were they trained for another model?)",
			h.Hidden, h.Vocab, m.HiddenSize(), m.VocabSize())
	}
	return &Drafter{Info: &DrafterInfo{Kind: KindMedusa}, medusa: h}, nil
}

// NewEagleDrafter wraps an EAGLE-3 draft held in memory as a drafter for m.
// Feature layers the draft names must pass eagle3.CheckLayerIDs for m's
// layers; a draft that names none reads the engines' defaults 2, L/2, L-3.
func NewEagleDrafter(d *eagle3.Draft, m *model.Model) (*Drafter, error) {
	g := d.Geometry
	if g.Hidden != m.HiddenSize() || g.Vocab != m.VocabSize() {
		return nil, fmt.Errorf("eval: the EAGLE-3 draft does not fit the target: it is of hidden_size %d and vocab_size %d, the target's are %d and %d (was it trained for another model?)",
			g.Hidden, g.Vocab, m.HiddenSize(), m.VocabSize())
	}
	L := m.NumLayers()
	if d.LayerIDs != nil {
		if err := eagle3.CheckLayerIDs(d.LayerIDs, L); err != nil {
			return nil, fmt.Errorf("eval: EAGLE-3 draft with feature layers %v: %w", d.LayerIDs, err)
		}
	} else {
		for _, id := range defaultEagleLayers(L) {
			if id < 1 || id > L {
				return nil, fmt.Errorf("eval: the EAGLE-3 draft names no feature layers and the engines' defaults %v do not fit a target of %d layers", defaultEagleLayers(L), L)
			}
		}
	}
	return &Drafter{Info: &DrafterInfo{Kind: KindEagle3}, eagle: d}, nil
}

// medusaProposer drafts with Medusa heads on the target's final post-norm
// state of the newest committed position.
type medusaProposer struct {
	m      *model.Model
	h      *medusa.Heads
	static *spec.StaticTree
	widths []int // candidates needed per head: the tree's widths, at least hitK
	hitK   int
	heads  int // heads the tree uses
	tapIdx []int

	x      []float32 // [H] state the heads read
	xs     []float32 // [heads, H] each head's residual stream
	z      []float32 // [H] a block's pre-activation
	logits []float32 // [heads, V]
	shared bool      // every head uses the same lm_head slice
	topk   [][]int   // per head, best first
	// This prompt's predictions, scored when it ends: step s predicted after
	// output index roots[s], head h's top hitK in guesses[(s*heads+h)*hitK:].
	roots   []int
	guesses []int
	hits    []HeadHits
}

func newMedusaProposer(m *model.Model, h *medusa.Heads, cfg Config) (*medusaProposer, error) {
	choices := cfg.Tree
	if cfg.Mode == ModeChain {
		choices = chainChoices(cfg.Depth)
	}
	st, err := spec.CompileChoices(choices)
	if err != nil {
		return nil, fmt.Errorf("eval: tree: %w", err)
	}
	p := &medusaProposer{m: m, h: h, static: st, hitK: cfg.HitK, heads: h.Heads,
		tapIdx: []int{m.NumLayers()},
		x:      make([]float32, h.Hidden), xs: make([]float32, h.Heads*h.Hidden), z: make([]float32, h.Hidden),
		logits: make([]float32, h.Heads*h.Vocab), shared: true}
	for hd := range h.Heads {
		if len(h.LMHead[hd]) != h.Vocab*h.Hidden || &h.LMHead[hd][0] != &h.LMHead[0][0] {
			p.shared = false
		}
		if len(h.W[hd]) != h.Layers || len(h.B[hd]) != h.Layers {
			return nil, fmt.Errorf("eval: Medusa head %d has %d weight and %d bias blocks, want %d", hd, len(h.W[hd]), len(h.B[hd]), h.Layers)
		}
	}
	tw := st.Widths()
	p.widths = make([]int, h.Heads)
	p.topk = make([][]int, h.Heads)
	p.hitK = min(cfg.HitK, h.Vocab)
	for hd := range h.Heads {
		w := p.hitK
		if hd < len(tw) {
			w = max(w, tw[hd])
		}
		p.widths[hd] = min(w, h.Vocab)
		p.topk[hd] = make([]int, 0, p.widths[hd])
	}
	p.hits = make([]HeadHits, h.Heads)
	for hd := range p.hits {
		p.hits[hd] = HeadHits{Head: hd, K: p.hitK}
	}
	return p, nil
}

func (p *medusaProposer) taps() []int   { return p.tapIdx }
func (p *medusaProposer) maxNodes() int { return p.static.Len() }

// predict runs every head on p.x and records the candidates for root. It
// computes what medusa.Heads.Logits computes, with the same kernels in the
// same order, on the calling goroutine and without allocating: each head's
// residual blocks, then the output products, one batched product over all
// heads when they share the target's lm_head.
func (p *medusaProposer) predict(root int) {
	p.roots = append(p.roots, root)
	H, V := p.h.Hidden, p.h.Vocab
	be := p.m.Backend()
	for hd := range p.heads {
		xh := p.xs[hd*H : (hd+1)*H]
		copy(xh, p.x)
		for l := 0; l < p.h.Layers; l++ {
			tensor.MatMulT(be, p.z, xh, p.h.W[hd][l], 1, H, H)
			if b := p.h.B[hd][l]; b != nil {
				for i, v := range b[:H] {
					p.z[i] += v
				}
			}
			for i, v := range p.z {
				xh[i] += v / (1 + float32(math.Exp(float64(-v))))
			}
		}
	}
	if p.shared {
		tensor.MatMulT(be, p.logits[:p.heads*V], p.xs[:p.heads*H], p.h.LMHead[0], p.heads, V, H)
	} else {
		for hd := range p.heads {
			tensor.MatMulT(be, p.logits[hd*V:(hd+1)*V], p.xs[hd*H:(hd+1)*H], p.h.LMHead[hd], 1, V, H)
		}
	}
	for hd := range p.heads {
		p.topk[hd] = topK(p.logits[hd*V:(hd+1)*V], p.widths[hd], p.topk[hd][:0])
		p.guesses = append(p.guesses, p.topk[hd][:p.hitK]...)
	}
}

func (p *medusaProposer) start(prompt []int, first int, res *model.Result) error {
	hid := res.HiddenOf(0, 0)
	H := p.h.Hidden
	copy(p.x, hid[(len(prompt)-1)*H:len(prompt)*H])
	p.roots, p.guesses = p.roots[:0], p.guesses[:0]
	p.predict(0)
	return nil
}

func (p *medusaProposer) propose(t *spec.Tree, root int) error {
	if n := len(p.roots); n == 0 || p.roots[n-1] != root {
		return fmt.Errorf("eval: Medusa heads have no prediction after output token %d", root)
	}
	return p.static.Build(t, p.topk)
}

func (p *medusaProposer) accept(rows []int, res *model.Result, tokens []int) error {
	hid := res.HiddenOf(0, 0)
	H := p.h.Hidden
	last := rows[len(rows)-1]
	copy(p.x, hid[last*H:(last+1)*H])
	// The step appended tokens after the old root: the newest is
	// len(tokens) places further in the output.
	p.predict(p.roots[len(p.roots)-1] + len(tokens))
	return nil
}

// finish scores every recorded prediction against the generated tokens: head
// h's guess after output index r is right when it equals out[r+h+1].
func (p *medusaProposer) finish(out []int) {
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

// eagleProposer drafts with an EAGLE-3 draft layer fed by the target's three
// feature layers. Chains are drafted top-1 at temperature 0 and, at
// temperature > 0, sampled token by token from the draft distribution q (the
// draft's logits warped by the serving sampler's rule), which it keeps for
// verification by speculative sampling, min(1, p/q). Trees are EAGLE-2's
// deterministic top-k trees at every temperature.
type eagleProposer struct {
	m       *model.Model
	d       *eagle3.Draft
	s       *eagle3.Session
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

// newEagleProposer builds the proposer; rng is the runner's random stream, from
// which sampled chains are drawn.
func newEagleProposer(m *model.Model, d *eagle3.Draft, cfg Config, capacity int, rng *sample.RNG) (*eagleProposer, error) {
	ids := d.LayerIDs
	if ids == nil {
		ids = defaultEagleLayers(m.NumLayers())
	}
	p := &eagleProposer{m: m, d: d, chain: cfg.Mode == ModeChain, depth: cfg.Depth}
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
				return nil, fmt.Errorf("eval: %w", err)
			}
			V := m.VocabSize()
			p.sampled, p.dsm, p.rng = true, sm, rng
			p.lg, p.q = make([]float32, V), make([]float32, (cfg.Depth+1)*V)
		}
	} else {
		dp := spec.DynamicParams{Depth: cfg.Depth, TopK: cfg.TopK, TotalTokens: cfg.TotalTokens}
		b, err := spec.NewDynamicBuilder(dp)
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
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

func (p *eagleProposer) taps() []int   { return p.tapIdx }
func (p *eagleProposer) maxNodes() int { return p.nodes }

// fuse gathers the three tapped layers of the given rows of res into p.feats
// as [len(rows), 3H], low layer first.
func (p *eagleProposer) fuse(res *model.Result, rows []int) []float32 {
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

func (p *eagleProposer) start(prompt []int, first int, res *model.Result) error {
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

func (p *eagleProposer) accept(rows []int, res *model.Result, tokens []int) error {
	p.tok32 = p.tok32[:0]
	for _, t := range tokens {
		p.tok32 = append(p.tok32, int32(t))
	}
	return p.s.Extend(p.fuse(res, rows), p.tok32)
}

func (p *eagleProposer) propose(t *spec.Tree, root int) error {
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
func (p *eagleProposer) sampleChain(t *spec.Tree) error {
	V := len(p.lg)
	p.s.ClearTree()
	cur, parent := -1, spec.Root
	for step := range p.depth {
		if err := p.s.TargetLogits(cur, p.lg); err != nil {
			return err
		}
		q := p.q[step*V : (step+1)*V]
		if err := p.dsm.Probs(p.lg, q); err != nil {
			return fmt.Errorf("eval: draft distribution at chain step %d: %w", step+1, err)
		}
		x, err := sample.SampleProbs(q, p.rng)
		if err != nil {
			return fmt.Errorf("eval: drawing chain step %d from the draft: %w", step+1, err)
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

// draftProbs returns the draft rows the last propose sampled from, in
// spec.Verifier.SampleRows' layout, or nil when the tree was drafted
// deterministically (top-1 chains, top-k trees).
func (p *eagleProposer) draftProbs() []float32 {
	if !p.sampled {
		return nil
	}
	return p.q
}

// Expand implements spec.Expander: it evaluates the frontier nodes in the
// draft session in one batch (the root needs none) and writes each one's top-k
// continuations.
func (p *eagleProposer) Expand(cands *spec.Tree, frontier []int, k int, tokens []int, logps []float64) error {
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
				return fmt.Errorf("eval: EAGLE-2 candidate %d expands before its parent %d was drafted", f, nd.Parent)
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
func (p *eagleProposer) topInto(node, k int, tokens []int, logps []float64) error {
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

func (p *eagleProposer) finish([]int) {}
