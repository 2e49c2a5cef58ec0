package model

import (
	"fmt"
	"slices"

	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Input is one sequence's share of a forward pass.
type Input struct {
	// Seq is the sequence whose cache the tokens extend. A sequence may appear
	// at most once per pass.
	Seq *Sequence
	// Tokens are the new token ids, at least one.
	Tokens []int
	// Parents is nil for a chain: the tokens follow the committed prefix in
	// order, attend causally, and are committed when the pass ends. Otherwise
	// the tokens are the nodes of a tree: Parents[i] is the index of node i's
	// parent, which must come before it, or -1 for a child of the committed
	// prefix. Node i attends to the prefix, its ancestors and itself, at RoPE
	// position Len()+depth(i). Tree nodes stay pending until Sequence.Commit.
	Parents []int
	// Logits selects the rows that get logits.
	Logits LogitRows
}

// LogitRows selects which rows of an Input get logits.
type LogitRows int

const (
	// LogitsDefault gives the last row of a chain, and every node of a tree.
	LogitsDefault LogitRows = iota
	// LogitsLast gives the last row only.
	LogitsLast
	// LogitsAll gives every row (teacher-forced scoring, tree verification).
	LogitsAll
	// LogitsNone gives no logits (hidden-state capture only).
	LogitsNone
)

// Options selects what a forward pass records besides logits.
type Options struct {
	// Taps lists Hugging Face hidden_states indices to record for every row:
	// 0 is the embedding output, k in 1..L-1 the residual stream after decoder
	// layer k-1 (before the final norm), and L the last layer's output after
	// the final norm, exactly as Transformers returns them. PreNormLast records
	// the last layer's output before the final norm.
	Taps []int
	// DeviceLogits leaves the logits on the device: Result.Logits is nil and
	// Result.DeviceLogits holds them, so that a decode step that samples on
	// the device (tensor.Device.SampleRows) copies only the ids back.
	DeviceLogits bool
	// DeviceTaps leaves the tapped states on the device: Result.Hidden is
	// empty and Result.DeviceHidden holds them, so that a caller copies them
	// to the host behind the next pass (tensor.StateCopier).
	DeviceTaps bool
}

// PreNormLast is the tap index of the residual stream after the last layer,
// before the final norm (Transformers' hidden_states has no such entry).
const PreNormLast = -1

// Result holds the outputs of one forward pass. Its slices belong to the model
// and are overwritten by the next pass; copy what must outlive it.
type Result struct {
	// Start[b] is the first row of batch[b]; rows of batch[b] are
	// Start[b]..Start[b+1]-1 in token order. Start has len(batch)+1 entries.
	Start []int
	// LogitStart[b]..LogitStart[b+1]-1 are batch[b]'s rows of Logits: its last
	// row, or all its rows in order, as its Input.Logits asked.
	LogitStart []int
	// Logits is [LogitStart[len(batch)], V] row-major.
	Logits []float32
	// Hidden[t] is [Start[len(batch)], H] row-major for Options.Taps[t].
	Hidden [][]float32
	// DeviceLogits is the logits [LogitStart[len(batch)], V] on the
	// model's device when Options.DeviceLogits asked for them there (then
	// Logits is nil); it is the model's scratch, overwritten by the next
	// pass.
	DeviceLogits tensor.Tensor
	// DeviceHidden[t] is Hidden[t] on the model's device ([Start[len(batch)],
	// H]) when Options.DeviceTaps asked for it there (then Hidden is empty);
	// the model's scratch, overwritten by the next pass.
	DeviceHidden []tensor.Tensor

	v, h int
}

// LogitsOf returns batch[b]'s logits rows, [n, V].
func (r *Result) LogitsOf(b int) []float32 {
	return r.Logits[r.LogitStart[b]*r.v : r.LogitStart[b+1]*r.v]
}

// HiddenOf returns batch[b]'s rows of tap t, [n, H].
func (r *Result) HiddenOf(t, b int) []float32 {
	return r.Hidden[t][r.Start[b]*r.h : r.Start[b+1]*r.h]
}

// scratch is the activation memory of one pass on the device, grown to the
// largest pass seen and then reused; a pass works on views of its first
// rows.
type scratch struct {
	rows, lrows int
	gen         int           // bumped when the tensors below are reallocated
	x, xn       tensor.Tensor // [rows, H] residual stream and its norm
	y           tensor.Tensor // [rows, H] a block's output before its norm (sandwich norms) or its experts' sum (MoE)
	moe         moeScratch
	mla         mlaScratch
	q, att      tensor.Tensor // [rows, qDim]
	k, v        tensor.Tensor // [rows, kvDim]
	gate, up    tensor.Tensor // [rows, I]
	fused       tensor.Tensor // [rows·max(2I, qDim+2kvDim), 1]: output of a fused matrix
	pos         tensor.Tensor // [rows, 1] I32: RoPE position of each row
	lx          tensor.Tensor // [lrows, H] final-normed rows for the LM head
	logits      tensor.Tensor // [lrows, V]
	taps        []tensor.Tensor
	hostPos     []int32 // pos on the host
	lidx        []int32 // rows that get logits
	hostLogits  []float32
	hostTaps    [][]float32
	tapOf       []int            // tapOf[k+1] = index in Options.Taps of HF index k, or -1; tapOf[0] for PreNormLast
	seqs        []*Sequence      // the pass's sequences, in batch order
	aseqs       []tensor.AttnSeq // their rows as the device's attention reads them
	start, lst  []int
	mask        []bool  // tree ancestor masks, [t, t] per tree input
	depth       []int32 // depth of each tree node, per input (reused)
	epoch       uint64
}

// pass holds the views of one pass's rows.
type pass struct {
	gen                    int // scratch.gen the views were taken of
	rows                   int
	x, xn, y, q, att, k, v tensor.Tensor
	pos                    tensor.Tensor
	mlp                    nn.MLPActs  // gate, up and their fused product
	attn                   nn.AttnActs // q, k, v, the attention output and their fused product
}

// Forward runs one pass over batch and returns its outputs. Nothing is changed
// when it returns an error. After it returns, chain inputs are committed to
// their sequences and tree inputs are pending.
func (m *Model) Forward(batch []Input, opt Options) (*Result, error) {
	rows, lrows, maskLen, err := m.validate(batch, opt)
	if err != nil {
		return nil, err
	}
	if err := m.ensure(rows, lrows, len(opt.Taps), maskLen, len(batch)); err != nil {
		return nil, fmt.Errorf("model: forward: %w", err)
	}
	m.layout(batch, rows)
	grapher, graphs := m.dev.(tensor.Grapher)
	if rows > tensor.FewRows && hasTree(batch) {
		// A verification pass: its rows must score as decode steps do,
		// which products guarantee up to FewRows rows only (beyond, a
		// GEMM sums in another order, or rounds bf16 inputs).
		m.rowExact.Device = m.dev
		m.dev = &m.rowExact
		defer func() { m.dev = m.rowExact.Device }()
	}
	p := m.views(rows)
	if graphs && m.graphable(batch) {
		m.graph.batch, m.graph.p = batch, p
		grapher.RunGraph(m.graphKey(batch, rows, len(opt.Taps)), m.graph.fn(m))
		m.graph.batch, m.graph.p = nil, nil
	} else {
		m.passOps(batch, p)
	}
	logits := m.s.logits.RowRange(0, len(m.s.lidx))
	commitInputs(batch)
	return m.result(logits, opt, rows), nil
}

// passOps issues the device ops of a pass laid out by layout, from the
// embeddings to the logits (m.s.logits' first rows): the part of Forward a
// device may run as a graph.
func (m *Model) passOps(batch []Input, p *pass) {
	m.embedRows(batch)
	m.dev.WriteI32(p.pos, m.s.hostPos[:p.rows])
	m.decoderLayers(p)
	lx := m.finalNorm(p)
	m.lmHead(lx)
}

// hasTree reports whether any input of the batch is a tree.
func hasTree(batch []Input) bool {
	for b := range batch {
		if batch[b].Parents != nil {
			return true
		}
	}
	return false
}

// rowExact is a device whose weight products run in blocks of at most
// tensor.FewRows rows, where each row's result is what a one-row product
// (a decode step) gives whatever the other rows: the model's device for
// passes holding a draft tree, so that verifying a draft of any size scores
// each node bit for bit as decoding it would (the losslessness eval
// checks). Its other ops are the device's.
type rowExact struct{ tensor.Device }

// MulT is the device's MulT over blocks of FewRows rows.
func (d *rowExact) MulT(out, x tensor.Tensor, w *tensor.Weight, acc bool) {
	for lo := 0; lo < x.Rows(); lo += tensor.FewRows {
		hi := min(lo+tensor.FewRows, x.Rows())
		d.Device.MulT(out.RowRange(lo, hi), x.RowRange(lo, hi), w, acc)
	}
}

// HeadMatMul is the device's HeadMatMul over blocks of FewRows rows.
func (d *rowExact) HeadMatMul(out, x, w tensor.Tensor, heads int, transW bool) {
	for lo := 0; lo < x.Rows(); lo += tensor.FewRows {
		hi := min(lo+tensor.FewRows, x.Rows())
		d.Device.HeadMatMul(out.RowRange(lo, hi), x.RowRange(lo, hi), w, heads, transW)
	}
}

// validate checks the whole pass before any activation, cache or sequence
// length is written, so that an error leaves them as they were, and returns
// the sizes the scratch must hold: the rows, the rows that get logits and
// the tree mask entries. It records the requested taps in the scratch and
// marks each sequence as seen by this pass, to refuse it twice.
func (m *Model) validate(batch []Input, opt Options) (rows, lrows, maskLen int, err error) {
	if len(batch) == 0 {
		return 0, 0, 0, fmt.Errorf("model: forward: empty batch")
	}
	m.s.epoch++
	if err := m.mapTaps(opt.Taps); err != nil {
		return 0, 0, 0, err
	}
	for b := range batch {
		in := &batch[b]
		if err := m.checkInput(b, in); err != nil {
			return 0, 0, 0, err
		}
		t := len(in.Tokens)
		if in.Parents != nil {
			maskLen += t * t
		}
		lrows += in.logitRowCount()
		rows += t
	}
	return rows, lrows, maskLen, nil
}

// mapTaps fills the scratch's tapOf from Options.Taps, refusing indices
// outside hidden_states and duplicates, so that the layer loop finds a tap
// by index instead of searching the list.
func (m *Model) mapTaps(taps []int) error {
	s := &m.s
	L := len(m.Layers)
	if cap(s.tapOf) < L+2 {
		s.tapOf = make([]int, L+2)
	}
	s.tapOf = s.tapOf[:L+2]
	for i := range s.tapOf {
		s.tapOf[i] = -1
	}
	for t, k := range taps {
		if k < PreNormLast || k > L {
			return fmt.Errorf("model: forward: tap %d is not a hidden_states index in 0..%d (or PreNormLast)", k, L)
		}
		if s.tapOf[k+1] >= 0 {
			return fmt.Errorf("model: forward: tap %d requested twice", k)
		}
		s.tapOf[k+1] = t
	}
	return nil
}

// checkInput checks batch[b] on its own, in this order: a sequence of this
// model not yet seen in the pass (which it marks as seen), at least one
// token, no pending tree, the tokens (checkTokens), the parents of a tree
// and a known logits mode.
func (m *Model) checkInput(b int, in *Input) error {
	sq := in.Seq
	if sq == nil || sq.m != m {
		return fmt.Errorf("model: forward: batch[%d] has no sequence of this model", b)
	}
	if sq.epoch == m.s.epoch {
		return fmt.Errorf("model: forward: batch[%d]: the same sequence appears twice in one batch", b)
	}
	sq.epoch = m.s.epoch
	t := len(in.Tokens)
	if t == 0 {
		return fmt.Errorf("model: forward: batch[%d] has no tokens (empty prompt)", b)
	}
	if sq.kv.Pending() > 0 {
		return fmt.Errorf("model: forward: batch[%d]: the sequence has %d uncommitted tree nodes; call Commit first", b, sq.kv.Pending())
	}
	if err := m.checkTokens(b, in); err != nil {
		return err
	}
	if in.Parents != nil {
		if err := checkParents(b, in.Parents, t); err != nil {
			return err
		}
	}
	switch in.Logits {
	case LogitsDefault, LogitsLast, LogitsAll, LogitsNone:
		return nil
	}
	return fmt.Errorf("model: forward: batch[%d] has unknown Logits mode %d", b, in.Logits)
}

// checkTokens checks that batch[b]'s token ids are in the vocabulary and
// that its sequence's cache and the model's context have room for them.
func (m *Model) checkTokens(b int, in *Input) error {
	for i, id := range in.Tokens {
		if id < 0 || id >= m.vocab {
			return fmt.Errorf("model: forward: batch[%d] token %d has id %d, outside the vocabulary [0, %d)", b, i, id, m.vocab)
		}
	}
	sq, t := in.Seq, len(in.Tokens)
	if err := sq.kv.Fits(t); err != nil {
		if sq.kv.Len()+t > m.maxPos {
			return fmt.Errorf("model: forward: batch[%d]: %d tokens after %d in the sequence exceed the model's context length %d", b, t, sq.kv.Len(), m.maxPos)
		}
		return fmt.Errorf("model: forward: batch[%d]: %d tokens after %d in the sequence exceed its cache capacity %d", b, t, sq.kv.Len(), sq.kv.Cap())
	}
	return nil
}

// checkParents checks that batch[b]'s parents describe a tree of its t
// tokens: one parent per node, each -1 or an earlier node.
func checkParents(b int, parents []int, t int) error {
	if len(parents) != t {
		return fmt.Errorf("model: forward: batch[%d] has %d parents for %d tree nodes", b, len(parents), t)
	}
	for i, p := range parents {
		if p < -1 || p >= i {
			return fmt.Errorf("model: forward: batch[%d] tree node %d has parent %d; want -1 or an earlier node", b, i, p)
		}
	}
	return nil
}

// logitMode resolves LogitsDefault to what it means for this input: every
// node of a tree, the last row of a chain.
func (in *Input) logitMode() LogitRows {
	if in.Logits != LogitsDefault {
		return in.Logits
	}
	if in.Parents != nil {
		return LogitsAll
	}
	return LogitsLast
}

// logitRowCount returns how many logits rows the input gets; its Logits
// mode must be valid.
func (in *Input) logitRowCount() int {
	switch in.logitMode() {
	case LogitsLast:
		return 1
	case LogitsAll:
		return len(in.Tokens)
	}
	return 0
}

// layout assigns the pass's rows to its inputs, in batch order, and writes
// on the host what the device ops read about them: each row's RoPE
// position, each tree's ancestor mask, the rows that get logits, each
// input's first row and first logits row, and each sequence's rows as the
// attention reads them. The inputs must have passed validate.
func (m *Model) layout(batch []Input, rows int) {
	s := &m.s
	s.seqs = s.seqs[:0]
	s.aseqs = s.aseqs[:0]
	s.lidx = s.lidx[:0]
	s.start = s.start[:0]
	s.lst = s.lst[:0]
	row, moff := 0, 0
	for b := range batch {
		in := &batch[b]
		t, n := len(in.Tokens), in.Seq.kv.Len()
		as := tensor.AttnSeq{KV: in.Seq.kv.KV(), Row0: row, T: t, N: n}
		s.lst = append(s.lst, len(s.lidx))
		if in.Parents != nil {
			as.Mask = s.mask[moff : moff+t*t]
			s.layoutTree(as.Mask, s.hostPos[row:row+t], in.Parents, n)
			moff += t * t
		} else {
			layoutChain(s.hostPos[row:row+t], n)
		}
		if m.longFrom > 0 {
			longRange(s.hostPos[row:row+t], m.longFrom)
		}
		s.addLogitRows(in.logitMode(), row, t)
		s.aseqs = append(s.aseqs, as)
		s.seqs = append(s.seqs, in.Seq)
		s.start = append(s.start, row)
		row += t
	}
	s.start = append(s.start, rows)
	s.lst = append(s.lst, len(s.lidx))
}

// layoutChain gives a chain's rows the positions after the n committed
// ones, in order.
func layoutChain(pos []int32, n int) {
	for i := range pos {
		pos[i] = int32(n + i)
	}
}

// longRange moves a pass's positions to the long rotary table (nn.RoPE's
// LongFrom L) when any of them reaches L, as Transformers turns a whole pass
// by longrope's long factors from there on.
func longRange(pos []int32, l int) {
	if int(slices.Max(pos)) < l {
		return
	}
	for i := range pos {
		pos[i] += int32(l)
	}
}

// layoutTree writes a tree's [t, t] ancestor mask (row i marks node i and
// its ancestors, copied from its parent's row) and its nodes' positions,
// n plus their depth.
func (s *scratch) layoutTree(mask []bool, pos []int32, parents []int, n int) {
	t := len(parents)
	s.depth = s.depth[:0]
	for i, p := range parents {
		mi := mask[i*t : i*t+t]
		clear(mi)
		var d int32
		if p >= 0 {
			copy(mi, mask[p*t:p*t+t])
			d = s.depth[p] + 1
		}
		mi[i] = true
		s.depth = append(s.depth, d)
		pos[i] = int32(n) + d
	}
}

// addLogitRows lists the rows, of an input laid out at row..row+t-1, that
// the resolved mode gives logits.
func (s *scratch) addLogitRows(mode LogitRows, row, t int) {
	switch mode {
	case LogitsLast:
		s.lidx = append(s.lidx, int32(row+t-1))
	case LogitsAll:
		for i := 0; i < t; i++ {
			s.lidx = append(s.lidx, int32(row+i))
		}
	}
}

// embedRows writes each input's token embeddings into its rows of the
// residual stream, scaled where the family scales them; layout must have
// placed the inputs.
func (m *Model) embedRows(batch []Input) {
	s := &m.s
	for b := range batch {
		row := s.start[b]
		m.dev.Gather(s.x.RowRange(row, row+len(batch[b].Tokens)), &m.embed, batch[b].Tokens)
	}
	if m.embedScale != 1 {
		m.dev.Scale(s.x.RowRange(0, s.start[len(batch)]), m.embedScale)
	}
}

// decoderLayers runs every decoder layer over the pass's rows, recording
// the residual stream where a tap asks for it: hidden_states[0] before the
// first layer, hidden_states[k] after layer k-1 for k < L, and PreNormLast
// after the last.
func (m *Model) decoderLayers(p *pass) {
	L := len(m.Layers)
	m.tap(0, p)
	for li := range m.Layers {
		m.Layers[li].forward(m, p)
		if li < L-1 {
			m.tap(li+1, p)
		}
	}
	m.tap(PreNormLast, p)
}

// finalNorm applies the final RMSNorm and returns the normed rows that get
// logits, [len(lidx), H]: over every row, into the tap, when
// hidden_states[L] is tapped, else only over the rows that need logits.
func (m *Model) finalNorm(p *pass) tensor.Tensor {
	s := &m.s
	lx := s.lx.RowRange(0, len(s.lidx))
	if t := s.tapOf[len(m.Layers)+1]; t >= 0 {
		tl := s.taps[t].RowRange(0, p.rows)
		m.dev.RMSNorm(tl, p.x, m.norm, m.eps)
		m.dev.GatherRows(lx, tl, s.lidx)
	} else {
		m.dev.GatherRows(lx, p.x, s.lidx)
		m.dev.RMSNorm(lx, lx, m.norm, m.eps)
	}
	return lx
}

// lmHead computes the logits of the normed rows lx into the scratch and
// returns them, [rows of lx, V]; no product runs when no row needs logits.
func (m *Model) lmHead(lx tensor.Tensor) tensor.Tensor {
	logits := m.s.logits.RowRange(0, len(m.s.lidx))
	if len(m.s.lidx) > 0 {
		m.dev.MulT(logits, lx, &m.lm, false)
		if m.finalSoftcap > 0 {
			m.dev.Softcap(logits, m.finalSoftcap)
		}
	}
	return logits
}

// commitInputs extends each chain's sequence by its tokens and leaves each
// tree's nodes pending. validate checked both (capacity, parents), so
// neither fails.
func commitInputs(batch []Input) {
	for b := range batch {
		in := &batch[b]
		if in.Parents == nil {
			_ = in.Seq.kv.Append(len(in.Tokens))
		} else {
			_ = in.Seq.kv.AddPending(in.Parents)
		}
	}
}

// result fills the model's Result with the pass's row layout, its logits
// (as host memory, or on the device with Options.DeviceLogits) and its taps
// as host memory.
func (m *Model) result(logits tensor.Tensor, opt Options, rows int) *Result {
	s := &m.s
	r := &m.res
	r.Start, r.LogitStart = s.start, s.lst
	r.Logits, r.DeviceLogits = nil, tensor.Tensor{}
	if opt.DeviceLogits {
		r.DeviceLogits = logits
	} else {
		r.Logits = m.host(logits, &s.hostLogits)
	}
	r.Hidden, r.DeviceHidden = r.Hidden[:0], r.DeviceHidden[:0]
	for i := 0; i < len(opt.Taps); i++ {
		if opt.DeviceTaps {
			r.DeviceHidden = append(r.DeviceHidden, s.taps[i].RowRange(0, rows))
		} else {
			r.Hidden = append(r.Hidden, m.host(s.taps[i].RowRange(0, rows), &s.hostTaps[i]))
		}
	}
	r.v, r.h = m.vocab, m.h
	return r
}

// host returns t's values on the host: t's own memory where the device's is
// the host's, else a copy read into *buf (grown as needed).
func (m *Model) host(t tensor.Tensor, buf *[]float32) []float32 {
	if v, ok := m.dev.HostF32(t); ok {
		return v
	}
	if cap(*buf) < t.Len() {
		*buf = make([]float32, t.Len())
	}
	*buf = (*buf)[:t.Len()]
	m.dev.Read(*buf, t)
	return *buf
}

// views returns the pass's views of the first rows of the scratch.
func (m *Model) views(rows int) *pass {
	s := &m.s
	p := &m.p
	if p.rows == rows && p.gen == s.gen && p.gen != 0 {
		return p // a decode step after another: the same views
	}
	p.rows, p.gen = rows, s.gen
	p.x, p.xn = s.x.RowRange(0, rows), s.xn.RowRange(0, rows)
	if !s.y.Empty() {
		p.y = s.y.RowRange(0, rows)
	}
	p.q, p.att = s.q.RowRange(0, rows), s.att.RowRange(0, rows)
	p.k, p.v = s.k.RowRange(0, rows), s.v.RowRange(0, rows)
	p.pos = s.pos.RowRange(0, rows)
	qkv := m.qDim + 2*m.kvDim
	fusedQKV := s.fused.RowRange(0, rows*qkv).Reshape(rows, qkv)
	p.mlp = nn.MLPActs{Gate: s.gate.RowRange(0, rows), Up: s.up.RowRange(0, rows),
		Fused: s.fused.RowRange(0, rows*2*m.inter).Reshape(rows, 2*m.inter)}
	parts := p.attn.Parts
	if parts == nil {
		parts = make([]tensor.Tensor, 0, 3)
	}
	p.attn = nn.AttnActs{Q: p.q, K: p.k, V: p.v, O: p.att, Fused: fusedQKV, Parts: parts}
	return p
}

// tap records the residual stream as hidden_states[k] (PreNormLast
// included) when requested.
func (m *Model) tap(k int, p *pass) {
	if t := m.s.tapOf[k+1]; t >= 0 {
		m.dev.Copy(m.s.taps[t].RowRange(0, p.rows), p.x)
	}
}

// ensure grows the scratch space for a pass of the given size. When a
// device allocation fails it forgets the row sizes, so that the next pass
// allocates again.
func (m *Model) ensure(rows, lrows, taps, maskLen, inputs int) error {
	s := &m.s
	al := tensor.Allocator{Dev: m.dev}
	m.growRows(&al, rows)
	m.growTaps(&al, taps)
	m.growLogitRows(&al, lrows)
	if al.Err != nil {
		s.rows, s.lrows = 0, 0 // allocate again next time
		return al.Err
	}
	s.growLayout(maskLen, inputs)
	return nil
}

// growRows reallocates every per-row activation (the tap buffers included)
// and its host side when a pass has more rows than any before, bumping the
// generation so that views taken of the old tensors are retaken.
func (m *Model) growRows(al *tensor.Allocator, rows int) {
	s := &m.s
	if rows <= s.rows {
		return
	}
	s.rows = rows
	s.gen++
	s.x = al.Alloc(tensor.F32, rows, m.h)
	s.xn = al.Alloc(tensor.F32, rows, m.h)
	if m.fam.SandwichNorms || m.Config.Experts > 0 {
		s.y = al.Alloc(tensor.F32, rows, m.h)
	}
	if m.Config.Experts > 0 {
		m.growMoE(al, rows)
	}
	if m.fam.MLA {
		m.growMLA(al, rows)
	}
	s.q = al.Alloc(tensor.F32, rows, m.qDim)
	s.att = al.Alloc(tensor.F32, rows, m.qDim)
	s.k = al.Alloc(tensor.F32, rows, m.kvDim)
	s.v = al.Alloc(tensor.F32, rows, m.kvDim)
	s.gate = al.Alloc(tensor.F32, rows, m.inter)
	s.up = al.Alloc(tensor.F32, rows, m.inter)
	s.fused = al.Alloc(tensor.F32, rows*max(2*m.inter, m.qDim+2*m.kvDim), 1)
	s.pos = al.Alloc(tensor.I32, rows, 1)
	s.hostPos = make([]int32, rows)
	s.lidx = make([]int32, 0, rows)
	s.depth = make([]int32, 0, rows)
	for i := range s.taps {
		s.taps[i] = al.Alloc(tensor.F32, rows, m.h)
	}
}

// growTaps adds tap buffers, of the scratch's row count, until there are
// taps of them.
func (m *Model) growTaps(al *tensor.Allocator, taps int) {
	s := &m.s
	for len(s.taps) < taps {
		s.taps = append(s.taps, al.Alloc(tensor.F32, s.rows, m.h))
		s.hostTaps = append(s.hostTaps, nil)
	}
}

// growLogitRows reallocates the LM head's input and output when a pass
// has more logits rows than any before.
func (m *Model) growLogitRows(al *tensor.Allocator, lrows int) {
	s := &m.s
	if lrows <= s.lrows {
		return
	}
	s.lrows = lrows
	s.lx = al.Alloc(tensor.F32, lrows, m.h)
	s.logits = al.Alloc(tensor.F32, lrows, m.vocab)
}

// growLayout grows the host memory of the row layout: the tree masks and
// the per-input lists.
func (s *scratch) growLayout(maskLen, inputs int) {
	if len(s.mask) < maskLen {
		s.mask = make([]bool, maskLen)
	}
	if cap(s.seqs) < inputs {
		s.seqs = make([]*Sequence, 0, inputs)
		s.aseqs = make([]tensor.AttnSeq, 0, inputs)
		s.start = make([]int, 0, inputs+1)
		s.lst = make([]int, 0, inputs+1)
	}
}

// The model's weight products run on its device (m.dev) through its frozen
// nn.Linear layers, and the device decides how: on the CPU device,
// cpu.Products chooses the few-row kernels for decode steps and draft
// verification (each row computed as a one-token step computes it), the
// backend's GEMM or the 16-bit kernels, the split over the workers, and the
// weights' layouts. The model chooses only what the products are: q/k/v and
// gate/up as one fused product where the weights lie back to back (fuse),
// and the bias added after.

// forward runs the decoder layer over the pass's rows: two residual blocks,
// each block's output normed before it is added where the family has
// sandwich norms, the second a mixture of experts in a sparse layer.
func (l *Layer) forward(m *Model, p *pass) {
	d := m.dev
	d.RMSNorm(p.xn, p.x, l.attnNorm, m.eps)
	if l.MLA != nil {
		l.MLA.forward(m, p, l.Attn.at.l)
	} else if l.attnOutNorm.Empty() {
		l.Attn.nn.Forward(d, p.x, p.xn, p.pos, &p.attn, &l.Attn.at, true)
	} else {
		l.Attn.nn.Forward(d, p.y, p.xn, p.pos, &p.attn, &l.Attn.at, false)
		d.RMSNorm(p.y, p.y, l.attnOutNorm, m.eps)
		d.Add(p.x, p.y)
	}
	d.RMSNorm(p.xn, p.x, l.mlpNorm, m.eps)
	switch {
	case l.MoE != nil:
		l.MoE.forward(m, p)
	case l.mlpOutNorm.Empty():
		l.MLP.nn.Forward(d, p.x, p.xn, &p.mlp, true)
		return
	default:
		l.MLP.nn.Forward(d, p.y, p.xn, &p.mlp, false)
	}
	if !l.mlpOutNorm.Empty() {
		d.RMSNorm(p.y, p.y, l.mlpOutNorm, m.eps)
	}
	d.Add(p.x, p.y)
}

// cacheAttention is the target's attention at one layer over the caches of
// the pass's sequences: an nn.Attender.
type cacheAttention struct {
	m *Model
	l int
}

// Attend scales the queries by 1/√d (one pass over the queries instead of
// one over each row of scores), stores each sequence's new keys and values
// in its cache, and attends every sequence at once.
func (c *cacheAttention) Attend(d tensor.Device, o, q, k, v tensor.Tensor) {
	m := c.m
	d.Scale(q, m.scale)
	for i, sq := range m.s.seqs {
		as := &m.s.aseqs[i]
		sq.kv.Write(c.l, 0, k.RowRange(as.Row0, as.Row0+as.T), v.RowRange(as.Row0, as.Row0+as.T))
	}
	d.Attend(o, q, c.l, m.Layers[c.l].Attn.nn.Shape, m.s.aseqs)
}

// LogitsFromHidden computes into dst [rows, V] the logits of rows final
// post-norm hidden states (tap index NumLayers(), [rows, H]) with the same
// output-layer product Forward uses for that many logits rows: a pass that
// taps hidden_states[L] and asks for no logits (LogitsNone) can compute the
// logits of only the rows it turns out to need, for example the rows greedy
// verification reads. One row at a time gives what a one-token decode step
// gives for the same hidden state, bit for bit.
func (m *Model) LogitsFromHidden(dst, hidden []float32, rows int) error {
	if rows < 0 || len(hidden) < rows*m.h || len(dst) < rows*m.vocab {
		return fmt.Errorf("model: logits from hidden states: %d rows need %d hidden values and %d outputs; got %d and %d",
			rows, rows*m.h, rows*m.vocab, len(hidden), len(dst))
	}
	if rows == 0 {
		return nil
	}
	x, err := m.dev.Upload(tensor.F32Matrix(hidden[:rows*m.h], rows, m.h))
	if err != nil {
		return fmt.Errorf("model: logits from hidden states: %w", err)
	}
	out, err := m.dev.Upload(tensor.F32Matrix(dst[:rows*m.vocab], rows, m.vocab))
	if err != nil {
		return fmt.Errorf("model: logits from hidden states: %w", err)
	}
	m.dev.MulT(out, x, &m.lm, false)
	if m.finalSoftcap > 0 {
		m.dev.Softcap(out, m.finalSoftcap)
	}
	if _, ok := m.dev.HostF32(out); !ok {
		m.dev.Read(dst[:rows*m.vocab], out)
	}
	return nil
}
