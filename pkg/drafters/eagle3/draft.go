package eagle3

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/kvcache"
	"github.com/drafter-ai/drafter/pkg/tensor"
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
	embed    tensor.Matrix // the target's input embedding [V, H], in its dtype
}

// Freeze prepares the draft for inference with parameters that no longer
// change: where the processor runs tensor.Transposed products fast, the
// sessions then multiply by transposed copies of the matrices (a draft step
// is a one-row product on each, which those kernels run at several times the
// rate of the row-major ones). A draft that wraps a trainer's live
// parameters must not be frozen. LoadDraft freezes what it loads.
func (d *Draft) Freeze() {
	if !tensor.TransposedFast() {
		return
	}
	g, p := d.Geometry, d.layer.P
	h, qw, kw, I := g.Hidden, g.QDim(), g.KVDim(), g.Intermediate
	d.layer.t = &draftMats{
		fc: tensor.NewTransposed(p.FC, h, 3*h),
		q:  tensor.NewTransposed(p.Q, qw, 2*h), k: tensor.NewTransposed(p.K, kw, 2*h), v: tensor.NewTransposed(p.V, kw, 2*h),
		o:    tensor.NewTransposed(p.O, h, qw),
		gate: tensor.NewTransposed(p.Gate, I, h), up: tensor.NewTransposed(p.Up, I, h), down: tensor.NewTransposed(p.Down, h, I),
		lm: tensor.NewTransposed(p.LMHead, g.DraftVocab, h),
	}
}

// NewDraft wraps parameters (for example a trainer's) as a drafter. embed
// is the target's input embedding [V, H] (model.Model.Embed, kept in the
// target's dtype: the draft widens the rows it reads).
func NewDraft(g Geometry, p *Params, voc *Vocab, embed tensor.Matrix, be tensor.Backend) (*Draft, error) {
	if embed.Rows != g.Vocab || embed.Cols != g.Hidden {
		return nil, fmt.Errorf("eagle3: a draft for a target of hidden_size %d and vocab_size %d, but the target's embedding is [%d, %d]: the draft was made for another model",
			g.Hidden, g.Vocab, embed.Rows, embed.Cols)
	}
	l, err := newLayer(g, p, be, 1, tensor.SwiGLU)
	if err != nil {
		return nil, err
	}
	return &Draft{Geometry: g, Vocab: voc, layer: l, embed: embed}, nil
}

// Session is one sequence's drafting state: the draft layer's KV cache over
// the committed context (one entry per position whose target feature has been
// consumed) and a scratch tree of draft nodes above the last committed
// position. Node -1 is the root: the last committed position's own output.
//
// The cache is a kvcache.Cache, the target's type: committed positions are
// its committed rows, the tree's nodes its pending nodes (node i at row
// Len()+i, with its parent), so it holds capacity+maxNodes rows.
type Session struct {
	d        *Draft
	capacity int            // committed positions the session holds
	kv       *kvcache.Cache // the draft layer's keys and values
	dev      tensor.Device  // the cache's device, which also selects TopK's tokens
	root     []float32      // [H] pre-norm output at position Len()-1
	rootLg   []float32      // [N] its draft logits

	maxNodes     int
	nh           []float32 // per node pre-norm output [maxNodes, H]
	nlg          []float32 // per node logits [maxNodes, N]
	chainScratch []int
	ancScratch   []int
	idScratch    []int

	// committed says whether the rows the layer runs are new context
	// positions (else the newest tree nodes), for Attend.
	committed bool
	// The layer's rows, sized for max(maxNodes, extendChunk) rows.
	acts    Acts
	scratch Scratch
	fn      []float32
	sc      []float32
}

// extendChunk bounds the rows Extend processes at once.
const extendChunk = 64

// NewSession allocates a session for up to capacity committed positions and
// maxNodes draft nodes (a chain of k steps needs k-1; EAGLE-2's default tree
// with depth 7 and top-k 10 needs up to 70). Neither may be negative.
func (d *Draft) NewSession(capacity, maxNodes int) *Session {
	g := d.Geometry
	h, kw, qw, I, N := g.Hidden, g.KVDim(), g.QDim(), g.Intermediate, g.DraftVocab
	R := max(maxNodes, extendChunk)
	f := func(n int) []float32 { return make([]float32, n) }
	// The session's cache lives on a CPU device of its own (one per
	// session: a device serves one caller); the layer reads it on the host.
	dev := tensor.NewCPU(d.layer.be)
	kv, err := kvcache.New(dev, 1, kw, capacity+maxNodes)
	if err != nil {
		// Only a negative size gets here, which make would refuse alike.
		panic(fmt.Sprintf("eagle3: NewSession(%d, %d): %v", capacity, maxNodes, err))
	}
	s := &Session{d: d, capacity: capacity, kv: kv, dev: dev, maxNodes: maxNodes,
		root: f(h), rootLg: f(N), nh: f(maxNodes * h), nlg: f(maxNodes * N),
		fn: f(R * h), sc: f(capacity + maxNodes + 1)}
	s.acts = Acts{E: f(R * h), H: f(R * h), Pos: make([]int32, R), X: f(R * 2 * h),
		Q: f(R * qw), K: f(R * kw), V: f(R * kw), O: f(R * qw), A1: f(R * h), N2: f(R * h),
		Gate: f(R * I), Up: f(R * I), Out: f(R * h)}
	// No backward follows: the activation may overwrite the gate.
	s.scratch = Scratch{XE: f(R * h), XH: f(R * h), Act: s.acts.Gate}
	return s
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
	d, g := s.d, s.d.Geometry
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
		d.layer.FC(s.acts.H, feats[c*3*h:(c+r)*3*h], r)
		for i := 0; i < r; i++ {
			s.acts.Pos[i] = int32(s.kv.Len() + i)
		}
		if err := s.layer(r, tokens[c:c+r], true); err != nil {
			return err
		}
		if err := s.kv.Append(r); err != nil {
			return fmt.Errorf("eagle3: Extend: %w", err)
		}
	}
	copy(s.root, s.acts.Out[(m-1-(m-1)/extendChunk*extendChunk)*h:][:h])
	d.layer.Logits(s.rootLg, s.fn, s.root, 1)
	return nil
}

// layer runs the draft layer over r rows whose hidden inputs are in
// s.acts.H, tokens tok and positions s.acts.Pos. committed: the rows are new
// context positions (their keys go to the cache's rows after the committed
// ones, and each attends causally to the cache); otherwise they are the last
// r pending tree nodes (keys to their rows) attending to the committed
// context, their ancestors and themselves. It allocates nothing: every
// product is one batched call over the r rows, and the element-wise steps
// are loops over the session's scratch.
func (s *Session) layer(r int, tok []int32, committed bool) error {
	d, g := s.d, s.d.Geometry
	h := g.Hidden
	for i := 0; i < r; i++ {
		id := tok[i]
		if id < 0 || int(id) >= g.Vocab {
			return fmt.Errorf("eagle3: draft token %d is outside the target vocabulary [0, %d)", id, g.Vocab)
		}
		d.embed.Row(s.acts.E[i*h:(i+1)*h], int(id))
	}
	s.committed = committed
	d.layer.Forward(&s.acts, &s.scratch, r, (*sessionAttention)(s))
	return nil
}

// sessionAttention is the session as the layer's Attention.
type sessionAttention Session

// Attend implements Attention for the session's rows: committed rows store
// their keys and values in the cache after the committed ones and attend
// causally to the cache, tree nodes store theirs at their pending rows and
// attend to the committed context, their ancestors and themselves.
func (a *sessionAttention) Attend(o, q, k, v []float32, r int) {
	s := (*Session)(a)
	kw := s.d.Geometry.KVDim()
	n := s.kv.Len()
	base := 0 // committed rows go right after the committed ones
	if !s.committed {
		base = s.kv.Pending() - r // the newest r pending nodes
	}
	s.kv.Write(0, base, tensor.HostTensor(k, r, kw), tensor.HostTensor(v, r, kw))
	for i := 0; i < r; i++ {
		ctx := n
		anc := s.ancScratch[:0]
		if s.committed {
			ctx = n + i + 1
		} else {
			for a := s.kv.Parent(base + i); a >= 0; a = s.kv.Parent(a) {
				anc = append(anc, a)
			}
			anc = append(anc, base+i)
		}
		s.ancScratch = anc
		s.attendRow(o, q, i, ctx, anc)
	}
}

// attendRow computes the attention output o of row i over the first ctx
// cache positions and then the tree nodes anc (in that order), one head at a
// time, as the target model's attention does: the scores against the cache
// as a weighted sum of its transposed keys, the ancestors' by dot products,
// the softmax numerators, their weighted sum of the cached values and the
// ancestors' values, divided by the softmax denominator. Tree node nd's key
// and value are the cache's row Len()+nd.
func (s *Session) attendRow(out, q []float32, i, ctx int, anc []int) {
	a := s.d.layer.a
	qw, kw := s.d.Geometry.QDim(), s.d.Geometry.KVDim()
	group := a.nq / a.nkv
	w := ctx + len(anc)
	sc := s.sc[:w]
	kc, kt, vc, c0 := s.kv.K(0), s.kv.KT(0), s.kv.V(0), s.kv.Cap()
	nodes := s.kv.Len() * kw // the first tree node's row
	for hh := 0; hh < a.nq; hh++ {
		off := hh / group * a.hd
		qv := q[i*qw+hh*a.hd : i*qw+(hh+1)*a.hd]
		tensor.Scale(qv, a.scale)
		if ctx > 0 {
			tensor.WeightedSum(sc[:ctx], qv, kt[off*c0:(off+a.hd-1)*c0+ctx], c0, a.hd, ctx, false)
		}
		for c, nd := range anc {
			r := nodes + nd*kw + off
			sc[ctx+c] = dot(qv, kc[r:r+a.hd])
		}
		inv := 1 / tensor.SoftmaxUnscaled(sc)
		o := out[i*qw+hh*a.hd : i*qw+(hh+1)*a.hd]
		if ctx > 0 {
			tensor.WeightedSum(o, sc[:ctx], vc[off:(ctx-1)*kw+off+a.hd], kw, ctx, a.hd, false)
		} else {
			clear(o)
		}
		for c, nd := range anc {
			r := nodes + nd*kw + off
			axpy(o, sc[ctx+c], vc[r:r+a.hd])
		}
		tensor.Scale(o, inv)
	}
}

// AddNodes evaluates new tree nodes in one batch: node j continues parents[j]
// (-1: the root) with target token tokens[j], sits at position Len()-1+depth
// and attends to the committed context, its ancestors and itself. It returns
// the new node ids, whose TopK gives the next step's candidates, in a slice
// the session reuses: it is valid until the next AddNodes.
func (s *Session) AddNodes(parents []int, tokens []int32) ([]int, error) {
	g := s.d.Geometry
	h := g.Hidden
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
	for i, par := range parents {
		src := s.root
		if par >= 0 {
			src = s.nh[par*h : (par+1)*h]
		}
		copy(s.acts.H[i*h:(i+1)*h], src)
		// A child of the root (the position n-1) sits at n, each further
		// ancestor one later.
		s.acts.Pos[i] = int32(n + s.kv.Depth(base+i))
	}
	if err := s.layer(r, tokens, false); err != nil {
		s.kv.DropPending(base)
		return nil, err
	}
	copy(s.nh[base*h:(base+r)*h], s.acts.Out[:r*h])
	s.d.layer.Logits(s.nlg[base*g.DraftVocab:], s.fn, s.acts.Out, r)
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
	lg := s.rootLg
	if nodeID >= 0 {
		lg = s.nlg[nodeID*N : (nodeID+1)*N]
	}
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
	cnt := s.dev.TopK(idx, tensor.HostTensor(lg, 1, N))
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
	lg := s.rootLg
	if nodeID >= 0 {
		lg = s.nlg[nodeID*N : (nodeID+1)*N]
	}
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
	N := s.d.Geometry.DraftVocab
	lg := s.rootLg
	if nodeID >= 0 {
		lg = s.nlg[nodeID*N : (nodeID+1)*N]
	}
	b := 0
	for v, x := range lg {
		if x > lg[b] {
			b = v
		}
	}
	return s.d.Vocab.IDs[b]
}
