package eagle3

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/kvcache"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// Draft is an inference-only EAGLE-3 drafter, computed the way the engines run
// an exported draft: fc on the fused target features of committed positions,
// then per draft step embed the token, run the draft layer against a KV cache
// (committed context plus the draft's own chain), and map the draft-vocabulary
// argmax or top-k through d2t to target ids.
type Draft struct {
	Geometry Geometry
	Vocab    *Vocab
	// LayerIDs are the HF hidden_states indices written in the config, or nil
	// when the export used the defaults (2, L/2, L-3).
	LayerIDs []int
	layer    *Layer
	// dev is the device the layer's weights were uploaded to and prepared
	// on; each session computes on a sibling of it (a device serves one
	// caller).
	dev   tensor.Device
	embed tensor.Weight // the target's input embedding [V, H], in its dtype
}

// Freeze prepares the draft for inference with parameters that no longer
// change: its products then run in the layouts the device chooses (on the
// CPU, transposed copies for the few-row products of a draft step, where
// the processor runs them fast). A draft that wraps a trainer's live
// parameters must not be frozen. LoadDraft freezes what it loads.
func (d *Draft) Freeze() { d.layer.Freeze(d.dev) }

// NewDraft wraps parameters (for example a trainer's, read back from its
// device by Layer.ReadWeights) as a drafter, uploading them to dev. embed
// is the target's input embedding [V, H] (model.Model.Embed, kept in the
// target's dtype: the draft widens the rows it reads).
//
// dev is the run's device (the CPU device when nil); the draft computes on a
// sibling of it.
func NewDraft(g Geometry, p *Params, voc *Vocab, embed tensor.Matrix, dev tensor.Device) (*Draft, error) {
	if embed.Rows != g.Vocab || embed.Cols != g.Hidden {
		return nil, fmt.Errorf("eagle3: a draft for a target of hidden_size %d and vocab_size %d, but the target's embedding is [%d, %d]: the draft was made for another model",
			g.Hidden, g.Vocab, embed.Rows, embed.Cols)
	}
	dev = cpu.SiblingOf(dev)
	l, err := NewLayer(dev, g, p, 1)
	if err != nil {
		return nil, err
	}
	return &Draft{Geometry: g, Vocab: voc, layer: l, dev: dev, embed: tensor.WeightOf(embed)}, nil
}

// Session is one sequence's drafting state: the draft layer's KV cache over
// the committed context (one entry per position whose target feature has been
// consumed) and a scratch tree of draft nodes above the last committed
// position. Node -1 is the root: the last committed position's own output.
//
// The cache is a kvcache.Cache, the target's type, read by the device's
// Attend as the target's is: committed positions are its committed rows, the
// tree's nodes its pending nodes (node i at row Len()+i, with its parent), so
// it holds capacity+maxNodes rows.
type Session struct {
	d        *Draft
	dev      tensor.Device
	capacity int            // committed positions the session holds
	kv       *kvcache.Cache // the draft layer's keys and values
	// root is the hidden state the draft carries on from position Len()-1:
	// its pre-norm output, or with Norms.NormOutput its normed output.
	root   tensor.Tensor // [1, H]
	rootLg tensor.Tensor // [1, N] its draft logits

	maxNodes     int
	nh           tensor.Tensor // per node the hidden state it carries on (as root) [maxNodes, H]
	nlg          tensor.Tensor // per node logits [maxNodes, N]
	lgHost       []float32     // [N] a row of logits read back, where the device's memory is not the host's
	chainScratch []int
	idScratch    []int
	tokScratch   []int   // the rows' tokens, for Gather
	posScratch   []int32 // the rows' positions, for WriteI32

	// committed says whether the rows the layer runs are new context
	// positions (else the newest tree nodes), for Attend.
	committed bool
	// The layer's rows, sized for max(maxNodes, extendChunk) rows.
	acts    *Acts
	scratch *Scratch
	feat    tensor.Tensor // [extendChunk, 3H] fused features
	fcActs  *FCActs       // the norms before fc, over extendChunk rows
	fn      tensor.Tensor // [R, H] normed outputs
	seqs    [1]tensor.AttnSeq
	mask    []bool // [R, maxNodes] the new nodes' ancestor masks
}

// extendChunk bounds the rows Extend processes at once.
const extendChunk = 64

// NewSession allocates a session for up to capacity committed positions and
// maxNodes draft nodes (a chain of k steps needs k-1; EAGLE-2's default tree
// with depth 7 and top-k 10 needs up to 70). Neither may be negative.
func (d *Draft) NewSession(capacity, maxNodes int) *Session {
	s, err := d.newSession(capacity, maxNodes)
	if err != nil {
		// Only a negative size gets here, which make would refuse alike.
		panic(fmt.Sprintf("eagle3: NewSession(%d, %d): %v", capacity, maxNodes, err))
	}
	return s
}

func (d *Draft) newSession(capacity, maxNodes int) (*Session, error) {
	g := d.Geometry
	h, kw, N := g.Hidden, g.KVDim(), g.DraftVocab
	R := max(maxNodes, extendChunk)
	dev := d.dev.Sibling()
	kv, err := kvcache.New(dev, 1, kw, capacity+maxNodes)
	if err != nil {
		return nil, err
	}
	s := &Session{d: d, dev: dev, capacity: capacity, kv: kv, maxNodes: maxNodes,
		lgHost: make([]float32, N), tokScratch: make([]int, R), posScratch: make([]int32, R),
		mask: make([]bool, R*maxNodes)}
	if s.acts, err = d.layer.NewActs(dev, R); err != nil {
		return nil, err
	}
	// No backward follows: the activation may overwrite the gate.
	if s.scratch, err = d.layer.NewScratch(dev, R, true); err != nil {
		return nil, err
	}
	if s.fcActs, err = d.layer.NewFCActs(dev, extendChunk, false); err != nil {
		return nil, err
	}
	al := tensor.Allocator{Dev: dev}
	s.root, s.rootLg = al.F32(1, h), al.F32(1, N)
	s.nh, s.nlg = al.F32(maxNodes, h), al.F32(maxNodes, N)
	s.feat, s.fn = al.F32(extendChunk, 3*h), al.F32(R, h)
	return s, wrapAlloc(al.Err)
}

// Len returns the number of committed positions.
func (s *Session) Len() int { return s.kv.Len() }

// Truncate drops committed positions beyond n (after a rejected draft) and the
// draft tree. Extend must follow before drafting again.
func (s *Session) Truncate(n int) {
	if n < s.kv.Len() {
		_ = s.kv.Truncate(max(n, 0)) // in range: cannot fail
	}
	s.kv.ClearPending()
}

// Extend commits m new positions: feats holds their fused target features
// (m rows of 3H: the three selected layers concatenated, low to high) and
// tokens the token FOLLOWING each position (tokens[j] is the token at position
// Len()+j+1, the last one being the target's newest token). It fills the KV
// cache and computes the root: the draft's step-0 output at the last position,
// whose logits predict the token after tokens[m-1]. The tree is cleared.
func (s *Session) Extend(feats []float32, tokens []int32) error {
	d, g, dev := s.d, s.d.Geometry, s.dev
	h := g.Hidden
	m := len(tokens)
	if len(feats) != m*3*h {
		return fmt.Errorf("eagle3: Extend: %d feature values for %d tokens, want %d", len(feats), m, m*3*h)
	}
	if s.kv.Len()+m > s.capacity {
		return fmt.Errorf("eagle3: Extend: %d positions exceed the session capacity %d", s.kv.Len()+m, s.capacity)
	}
	if m == 0 {
		return nil
	}
	s.kv.ClearPending()
	for c := 0; c < m; c += extendChunk {
		r := min(extendChunk, m-c)
		feat := s.feat.RowRange(0, r)
		dev.Write(feat, feats[c*3*h:(c+r)*3*h])
		d.layer.FC(dev, s.acts.H, feat, s.fcActs)
		for i := 0; i < r; i++ {
			s.posScratch[i] = int32(s.kv.Len() + i)
		}
		if err := s.layer(r, tokens[c:c+r], true); err != nil {
			return err
		}
		if err := s.kv.Append(r); err != nil {
			return fmt.Errorf("eagle3: Extend: %w", err)
		}
	}
	last := m - 1 - (m-1)/extendChunk*extendChunk
	dev.Copy(s.root, s.acts.Out.RowRange(last, last+1))
	d.layer.Logits(dev, s.rootLg, s.fn, s.root)
	s.carry(s.root)
	return nil
}

// carry replaces the pre-norm outputs in hs, whose logits were just computed
// into s.fn's first rows, with the normed outputs when the draft feeds those
// forward (Norms.NormOutput): the engines then pass the lm_head's input on
// as the next step's hidden state, so the norm is applied once for both.
func (s *Session) carry(hs tensor.Tensor) {
	if s.d.Geometry.NormOutput {
		s.dev.Copy(hs, s.fn.RowRange(0, hs.Rows()))
	}
}

// layer runs the draft layer over r rows whose hidden inputs are in
// s.acts.H, tokens tok and positions s.posScratch. committed: the rows are
// new context positions (their keys go to the cache's rows after the
// committed ones, and each attends causally to the cache); otherwise they
// are the last r pending tree nodes (keys to their rows) attending to the
// committed context, their ancestors and themselves. It allocates nothing.
func (s *Session) layer(r int, tok []int32, committed bool) error {
	d, g := s.d, s.d.Geometry
	ids := s.tokScratch[:r]
	for i, id := range tok[:r] {
		if id < 0 || int(id) >= g.Vocab {
			return fmt.Errorf("eagle3: draft token %d is outside the target vocabulary [0, %d)", id, g.Vocab)
		}
		ids[i] = int(id)
	}
	s.dev.Gather(s.acts.E.RowRange(0, r), &d.embed, ids)
	s.dev.WriteI32(s.acts.Pos, s.posScratch[:r])
	s.committed = committed
	d.layer.Forward(s.dev, s.acts, s.scratch, r, (*sessionAttention)(s))
	return nil
}

// sessionAttention is the session as the layer's attention (an nn.Attender).
type sessionAttention Session

// Attend implements Attention for the session's rows through the device's
// Attend over the session's cache, as the target's attention runs:
// committed rows store their keys and values in the cache after the
// committed ones and attend causally; tree nodes store theirs at their
// pending rows and attend to the committed context and, through an ancestor
// mask over the pending nodes, to their ancestors and themselves.
func (a *sessionAttention) Attend(dev tensor.Device, o, q, k, v tensor.Tensor) {
	s := (*Session)(a)
	r := q.Rows()
	base := 0 // committed rows go right after the committed ones
	seq := tensor.AttnSeq{KV: s.kv.KV(), T: r, N: s.kv.Len()}
	if !s.committed {
		base = s.kv.Pending() - r // the newest r pending nodes
		w := base + r
		mask := s.mask[:r*w]
		clear(mask)
		for i := 0; i < r; i++ {
			for nd := base + i; nd >= 0; nd = s.kv.Parent(nd) {
				mask[i*w+nd] = true
			}
		}
		seq.P, seq.Mask = base, mask
	}
	s.kv.Write(0, base, k, v)
	dev.Scale(q, s.d.layer.Scale())
	s.seqs[0] = seq
	dev.Attend(o, q, 0, s.d.layer.Shape(), s.seqs[:])
}

// logitsOf returns the draft logits after node (-1: the root), [1, N].
func (s *Session) logitsOf(nodeID int) tensor.Tensor {
	if nodeID >= 0 {
		return s.nlg.RowRange(nodeID, nodeID+1)
	}
	return s.rootLg
}

// logits returns the draft logits after node (-1: the root) on the host.
func (s *Session) logits(nodeID int) []float32 {
	t := s.logitsOf(nodeID)
	if v, ok := s.dev.HostF32(t); ok {
		return v
	}
	s.dev.Read(s.lgHost, t)
	return s.lgHost
}

// AddNodes evaluates new tree nodes in one batch: node j continues parents[j]
// (-1: the root) with target token tokens[j], sits at position Len()-1+depth
// and attends to the committed context, its ancestors and itself. It returns
// the new node ids, whose TopK gives the next step's candidates, in a slice
// the session reuses: it is valid until the next AddNodes.
func (s *Session) AddNodes(parents []int, tokens []int32) ([]int, error) {
	r := len(parents)
	if len(tokens) != r {
		return nil, fmt.Errorf("eagle3: AddNodes: %d parents but %d tokens", r, len(tokens))
	}
	n := s.kv.Len()
	if n == 0 {
		return nil, fmt.Errorf("eagle3: AddNodes before any Extend")
	}
	base := s.kv.Pending()
	if base+r > s.maxNodes {
		return nil, fmt.Errorf("eagle3: AddNodes: %d nodes exceed the session's %d", base+r, s.maxNodes)
	}
	for _, par := range parents {
		if par < -1 || par >= base {
			return nil, fmt.Errorf("eagle3: AddNodes: parent %d is not an existing node (have %d)", par, base)
		}
	}
	if err := s.kv.AddPending(parents); err != nil {
		return nil, fmt.Errorf("eagle3: AddNodes: %w", err)
	}
	h1 := func(t tensor.Tensor, i int) tensor.Tensor { return t.RowRange(i, i+1) }
	for i, par := range parents {
		src := s.root
		if par >= 0 {
			src = h1(s.nh, par)
		}
		s.dev.Copy(h1(s.acts.H, i), src)
		// A child of the root (the position n-1) sits at n, each further
		// ancestor one later.
		s.posScratch[i] = int32(n + s.kv.Depth(base+i))
	}
	if err := s.layer(r, tokens, false); err != nil {
		s.kv.DropPending(base)
		return nil, err
	}
	out := s.acts.Out.RowRange(0, r)
	s.dev.Copy(s.nh.RowRange(base, base+r), out)
	s.d.layer.Logits(s.dev, s.nlg.RowRange(base, base+r), s.fn, out)
	s.carry(s.nh.RowRange(base, base+r))
	ids := s.idScratch[:0]
	for i := range r {
		ids = append(ids, base+i)
	}
	s.idScratch = ids
	return ids, nil
}

// TopK writes the k most likely next tokens after node (-1: the root) as
// target ids into ids, with their draft log-probabilities into logp, best
// first (ties to the lower draft index), and returns how many it wrote.
func (s *Session) TopK(nodeID, k int, ids []int32, logp []float32) int {
	N := s.d.Geometry.DraftVocab
	lg := s.logits(nodeID)
	k = min(k, N, len(ids), len(logp))
	if k <= 0 {
		return 0
	}
	mx := lg[0]
	for _, v := range lg {
		mx = max(mx, v)
	}
	var z float64
	for _, v := range lg {
		z += math.Exp(float64(v - mx))
	}
	lz := float64(mx) + math.Log(z)
	if cap(s.chainScratch) < k {
		s.chainScratch = make([]int, k)
	}
	idx := s.chainScratch[:k]
	cnt := s.dev.TopK(idx, s.logitsOf(nodeID))
	for i := 0; i < cnt; i++ {
		ids[i] = s.d.Vocab.IDs[idx[i]]
		logp[i] = float32(float64(lg[idx[i]]) - lz)
	}
	return cnt
}

// ClearTree drops the draft tree above the committed context (the root's
// prediction stays), so AddNodes starts a new tree.
func (s *Session) ClearTree() { s.kv.ClearPending() }

// TargetLogits writes the draft logits after node (-1: the root) as a row over
// the target vocabulary into dst (len Geometry.Vocab): each draft-vocabulary
// logit at its target id (through d2t), -Inf at ids outside the draft
// vocabulary. A sampler over the target vocabulary turns the row into the
// draft distribution q at any temperature, with the target's warping.
func (s *Session) TargetLogits(nodeID int, dst []float32) error {
	g := s.d.Geometry
	N := g.DraftVocab
	if len(dst) != g.Vocab {
		return fmt.Errorf("eagle3: TargetLogits: a row of %d values, want the target vocabulary %d", len(dst), g.Vocab)
	}
	if nodeID < -1 || nodeID >= s.kv.Pending() {
		return fmt.Errorf("eagle3: TargetLogits: node %d is not an existing node (have %d)", nodeID, s.kv.Pending())
	}
	lg := s.logits(nodeID)
	inf := float32(math.Inf(-1))
	for i := range dst {
		dst[i] = inf
	}
	ids := s.d.Vocab.IDs[:N]
	for i, x := range lg[:N] {
		dst[ids[i]] = x
	}
	return nil
}

// DraftChain greedily drafts k tokens (EAGLE-3 chain drafting) from the root
// into dst (target ids) and returns it; the tree is cleared first and holds
// the chain afterwards.
func (s *Session) DraftChain(k int, dst []int32) ([]int32, error) {
	s.kv.ClearPending()
	dst = dst[:0]
	var id [1]int32
	cur := -1
	for step := 0; step < k; step++ {
		id[0] = s.best(cur)
		dst = append(dst, id[0])
		if step == k-1 {
			break
		}
		nodes, err := s.AddNodes([]int{cur}, id[:])
		if err != nil {
			return dst, err
		}
		cur = nodes[0]
	}
	return dst, nil
}

// best returns TopK(nodeID, 1)'s token without its log-probability: the
// target id of the first largest draft logit after node (-1: the root).
func (s *Session) best(nodeID int) int32 {
	lg := s.logits(nodeID)
	b := 0
	for v, x := range lg {
		if x > lg[b] {
			b = v
		}
	}
	return s.d.Vocab.IDs[b]
}
