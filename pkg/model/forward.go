package model

import (
	"fmt"

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
	gen                 int // scratch.gen the views were taken of
	rows                int
	x, xn, q, att, k, v tensor.Tensor
	pos                 tensor.Tensor
	mlp                 nn.MLPActs  // gate, up and their fused product
	attn                nn.AttnActs // q, k, v, the attention output and their fused product
}

// Forward runs one pass over batch and returns its outputs. Nothing is changed
// when it returns an error. After it returns, chain inputs are committed to
// their sequences and tree inputs are pending.
func (m *Model) Forward(batch []Input, opt Options) (*Result, error) {
	if len(batch) == 0 {
		return nil, fmt.Errorf("model: forward: empty batch")
	}
	s := &m.s
	s.epoch++
	L := len(m.Layers)
	// Validate everything first so that errors leave the state untouched.
	if cap(s.tapOf) < L+2 {
		s.tapOf = make([]int, L+2)
	}
	s.tapOf = s.tapOf[:L+2]
	for i := range s.tapOf {
		s.tapOf[i] = -1
	}
	for t, k := range opt.Taps {
		if k < PreNormLast || k > L {
			return nil, fmt.Errorf("model: forward: tap %d is not a hidden_states index in 0..%d (or PreNormLast)", k, L)
		}
		if s.tapOf[k+1] >= 0 {
			return nil, fmt.Errorf("model: forward: tap %d requested twice", k)
		}
		s.tapOf[k+1] = t
	}
	rows, lrows, maskLen := 0, 0, 0
	for b := range batch {
		in := &batch[b]
		sq := in.Seq
		if sq == nil || sq.m != m {
			return nil, fmt.Errorf("model: forward: batch[%d] has no sequence of this model", b)
		}
		if sq.epoch == s.epoch {
			return nil, fmt.Errorf("model: forward: batch[%d]: the same sequence appears twice in one batch", b)
		}
		sq.epoch = s.epoch
		t := len(in.Tokens)
		if t == 0 {
			return nil, fmt.Errorf("model: forward: batch[%d] has no tokens (empty prompt)", b)
		}
		if sq.kv.Pending() > 0 {
			return nil, fmt.Errorf("model: forward: batch[%d]: the sequence has %d uncommitted tree nodes; call Commit first", b, sq.kv.Pending())
		}
		for i, id := range in.Tokens {
			if id < 0 || id >= m.vocab {
				return nil, fmt.Errorf("model: forward: batch[%d] token %d has id %d, outside the vocabulary [0, %d)", b, i, id, m.vocab)
			}
		}
		if err := sq.kv.Fits(t); err != nil {
			if sq.kv.Len()+t > m.maxPos {
				return nil, fmt.Errorf("model: forward: batch[%d]: %d tokens after %d in the sequence exceed the model's context length %d", b, t, sq.kv.Len(), m.maxPos)
			}
			return nil, fmt.Errorf("model: forward: batch[%d]: %d tokens after %d in the sequence exceed its cache capacity %d", b, t, sq.kv.Len(), sq.kv.Cap())
		}
		if in.Parents != nil {
			if len(in.Parents) != t {
				return nil, fmt.Errorf("model: forward: batch[%d] has %d parents for %d tree nodes", b, len(in.Parents), t)
			}
			for i, p := range in.Parents {
				if p < -1 || p >= i {
					return nil, fmt.Errorf("model: forward: batch[%d] tree node %d has parent %d; want -1 or an earlier node", b, i, p)
				}
			}
			maskLen += t * t
		}
		switch in.Logits {
		case LogitsDefault:
			if in.Parents != nil {
				lrows += t
			} else {
				lrows++
			}
		case LogitsLast:
			lrows++
		case LogitsAll:
			lrows += t
		case LogitsNone:
		default:
			return nil, fmt.Errorf("model: forward: batch[%d] has unknown Logits mode %d", b, in.Logits)
		}
		rows += t
	}
	if err := m.ensure(rows, lrows, len(opt.Taps), maskLen, len(batch)); err != nil {
		return nil, fmt.Errorf("model: forward: %w", err)
	}

	// Lay out the rows: positions, tree masks, logits rows, embeddings.
	s.seqs = s.seqs[:0]
	s.aseqs = s.aseqs[:0]
	s.lidx = s.lidx[:0]
	s.start = s.start[:0]
	s.lst = s.lst[:0]
	row, moff := 0, 0
	for b := range batch {
		in := &batch[b]
		t, n := len(in.Tokens), in.Seq.kv.Len()
		tree := in.Parents != nil
		as := tensor.AttnSeq{KV: in.Seq.kv.KV(), Row0: row, T: t, N: n}
		s.lst = append(s.lst, len(s.lidx))
		if tree {
			mask := s.mask[moff : moff+t*t]
			as.Mask = mask
			s.depth = s.depth[:0]
			for i, p := range in.Parents {
				mi := mask[i*t : i*t+t]
				clear(mi)
				var d int32
				if p >= 0 {
					copy(mi, mask[p*t:p*t+t])
					d = s.depth[p] + 1
				}
				mi[i] = true
				s.depth = append(s.depth, d)
				s.hostPos[row+i] = int32(n) + d
			}
			moff += t * t
		} else {
			for i := 0; i < t; i++ {
				s.hostPos[row+i] = int32(n + i)
			}
		}
		mode := in.Logits
		if mode == LogitsDefault {
			mode = LogitsLast
			if tree {
				mode = LogitsAll
			}
		}
		switch mode {
		case LogitsLast:
			s.lidx = append(s.lidx, int32(row+t-1))
		case LogitsAll:
			for i := 0; i < t; i++ {
				s.lidx = append(s.lidx, int32(row+i))
			}
		}
		m.dev.Gather(s.x.RowRange(row, row+t), &m.embed, in.Tokens)
		s.aseqs = append(s.aseqs, as)
		s.seqs = append(s.seqs, in.Seq)
		s.start = append(s.start, row)
		row += t
	}
	s.start = append(s.start, rows)
	s.lst = append(s.lst, len(s.lidx))

	p := m.views(rows)
	m.dev.WriteI32(p.pos, s.hostPos[:rows])
	m.tap(0, p)
	for li := range m.Layers {
		m.Layers[li].forward(m, p)
		if li < L-1 {
			m.tap(li+1, p)
		}
	}
	if t := s.tapOf[0]; t >= 0 {
		m.dev.Copy(s.taps[t].RowRange(0, rows), p.x)
	}

	// Final norm: over every row when hidden_states[L] is tapped, else only
	// over the rows that need logits.
	nl := len(s.lidx)
	lx := s.lx.RowRange(0, nl)
	if t := s.tapOf[L+1]; t >= 0 {
		tl := s.taps[t].RowRange(0, rows)
		m.dev.RMSNorm(tl, p.x, m.norm, m.eps)
		m.dev.GatherRows(lx, tl, s.lidx)
	} else {
		m.dev.GatherRows(lx, p.x, s.lidx)
		m.dev.RMSNorm(lx, lx, m.norm, m.eps)
	}
	logits := s.logits.RowRange(0, nl)
	if nl > 0 {
		m.dev.MulT(logits, lx, &m.lm, false)
	}

	// Commit chains; leave trees pending. Both were checked before the pass
	// (capacity, parents), so neither fails.
	for b := range batch {
		in := &batch[b]
		if in.Parents == nil {
			_ = in.Seq.kv.Append(len(in.Tokens))
		} else {
			_ = in.Seq.kv.AddPending(in.Parents)
		}
	}
	r := &m.res
	r.Start, r.LogitStart = s.start, s.lst
	r.Logits = m.host(logits, &s.hostLogits)
	r.Hidden = r.Hidden[:0]
	for i := range opt.Taps {
		r.Hidden = append(r.Hidden, m.host(s.taps[i].RowRange(0, rows), &s.hostTaps[i]))
	}
	r.v, r.h = m.vocab, m.h
	return r, nil
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

// tap records the residual stream as hidden_states[k] when requested.
func (m *Model) tap(k int, p *pass) {
	if t := m.s.tapOf[k+1]; t >= 0 {
		m.dev.Copy(m.s.taps[t].RowRange(0, p.rows), p.x)
	}
}

// ensure grows the scratch space for a pass of the given size.
func (m *Model) ensure(rows, lrows, taps, maskLen, inputs int) error {
	s := &m.s
	al := tensor.Allocator{Dev: m.dev}
	alloc := al.Alloc
	if rows > s.rows {
		s.rows = rows
		s.gen++
		s.x = alloc(tensor.F32, rows, m.h)
		s.xn = alloc(tensor.F32, rows, m.h)
		s.q = alloc(tensor.F32, rows, m.qDim)
		s.att = alloc(tensor.F32, rows, m.qDim)
		s.k = alloc(tensor.F32, rows, m.kvDim)
		s.v = alloc(tensor.F32, rows, m.kvDim)
		s.gate = alloc(tensor.F32, rows, m.inter)
		s.up = alloc(tensor.F32, rows, m.inter)
		s.fused = alloc(tensor.F32, rows*max(2*m.inter, m.qDim+2*m.kvDim), 1)
		s.pos = alloc(tensor.I32, rows, 1)
		s.hostPos = make([]int32, rows)
		s.lidx = make([]int32, 0, rows)
		s.depth = make([]int32, 0, rows)
		for i := range s.taps {
			s.taps[i] = alloc(tensor.F32, rows, m.h)
		}
	}
	for len(s.taps) < taps {
		s.taps = append(s.taps, alloc(tensor.F32, s.rows, m.h))
		s.hostTaps = append(s.hostTaps, nil)
	}
	if lrows > s.lrows {
		s.lrows = lrows
		s.lx = alloc(tensor.F32, lrows, m.h)
		s.logits = alloc(tensor.F32, lrows, m.vocab)
	}
	if al.Err != nil {
		s.rows, s.lrows = 0, 0 // allocate again next time
		return al.Err
	}
	if len(s.mask) < maskLen {
		s.mask = make([]bool, maskLen)
	}
	if cap(s.seqs) < inputs {
		s.seqs = make([]*Sequence, 0, inputs)
		s.aseqs = make([]tensor.AttnSeq, 0, inputs)
		s.start = make([]int, 0, inputs+1)
		s.lst = make([]int, 0, inputs+1)
	}
	return nil
}

// The model's weight products run on its device (m.dev) through its frozen
// nn.Linear layers, and the device decides how: on the CPU device,
// cpu.Products chooses the few-row kernels for decode steps and draft
// verification (each row computed as a one-token step computes it), the
// backend's GEMM or the 16-bit kernels, the split over the workers, and the
// weights' layouts. The model chooses only what the products are: q/k/v and
// gate/up as one fused product where the weights lie back to back (fuse),
// and the bias added after.

// forward runs the decoder layer over the pass's rows: two residual blocks.
func (l *Layer) forward(m *Model, p *pass) {
	m.dev.RMSNorm(p.xn, p.x, l.attnNorm, m.eps)
	l.Attn.forward(m, p)
	m.dev.RMSNorm(p.xn, p.x, l.mlpNorm, m.eps)
	l.MLP.forward(m, p)
}

// forward computes x += Attention(xn) for the layer, storing the new K/V
// rows in each sequence's cache.
func (a *Attention) forward(m *Model, p *pass) {
	a.nn.Forward(m.dev, p.x, p.xn, p.pos, &p.attn, &a.at, true)
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
	d.Attend(o, q, c.l, tensor.AttnShape{Heads: m.nHeads, KVHeads: m.nKV, HeadDim: m.hd}, m.s.aseqs)
}

// forward computes x += Down(silu(Gate(xn)) * Up(xn)).
func (f *MLP) forward(m *Model, p *pass) { f.nn.Forward(m.dev, p.x, p.xn, &p.mlp, true) }

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
	if _, ok := m.dev.HostF32(out); !ok {
		m.dev.Read(dst[:rows*m.vocab], out)
	}
	return nil
}
