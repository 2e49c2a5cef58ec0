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

// seqIn is the validated, per-pass view of one Input.
type seqIn struct {
	seq   *Sequence
	row0  int // first row in the pass
	t     int // new tokens
	n     int // committed prefix length
	tree  bool
	mask  int // offset of the [t, t] ancestor mask in scratch.mask (trees)
	lrow0 int // first logits row
	nl    int // logits rows
}

// scratch is the activation memory of one pass, grown to the largest pass
// seen and then reused.
type scratch struct {
	rows, lrows int
	x, xn       []float32 // [rows, H] residual stream and its norm
	q, att      []float32 // [rows, qDim]
	k, v        []float32 // [rows, kvDim]
	gate, up    []float32 // [rows, I]
	fused       []float32 // [rows, max(2I, qDim+2kvDim)] output of a fused matrix
	pos         []int32   // RoPE position of each row
	lidx        []int32   // rows that get logits
	lx          []float32 // [lrows, H] final-normed rows for the LM head
	logits      []float32 // [lrows, V]
	taps        [][]float32
	tapOf       []int // tapOf[k+1] = index in Options.Taps of HF index k, or -1; tapOf[0] for PreNormLast
	ins         []seqIn
	start, lst  []int
	mask        []bool      // tree ancestor masks, [t, t] per tree input
	depth       []int32     // depth of each tree node, per input (reused)
	scores      [][]float32 // per worker scratch for small-row attention
	bigs        [][]float32 // per worker [block, ctx] scores for the BLAS attention path
	blasIn      *seqIn      // input whose heads attendHeads computes
	headFn      func(worker, lo, hi int)
	sm          softmaxJob // the block softmaxChunk normalises
	smFn        func(worker, lo, hi int)
	items       []int32 // (input, head) work items of the small-row attention path
	gitems      []int32 // (input, KV group) work items of the grouped attention path
	gbufs       []groupBuf
	groupFn     func(worker, lo, hi int)
	layer       int // layer being computed, read by attnFn
	attnFn      func(worker, lo, hi int)
	epoch       uint64
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
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
	m.ensure(rows, lrows, len(opt.Taps), maskLen, len(batch))

	// Lay out the rows: positions, tree masks, logits rows, embeddings.
	s.ins = s.ins[:0]
	s.lidx = s.lidx[:0]
	s.start = s.start[:0]
	s.lst = s.lst[:0]
	row, moff := 0, 0
	for b := range batch {
		in := &batch[b]
		t, n := len(in.Tokens), in.Seq.kv.Len()
		si := seqIn{seq: in.Seq, row0: row, t: t, n: n, tree: in.Parents != nil, mask: moff, lrow0: len(s.lidx)}
		if si.tree {
			mask := s.mask[moff : moff+t*t]
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
				s.pos[row+i] = int32(n) + d
			}
			moff += t * t
		} else {
			for i := 0; i < t; i++ {
				s.pos[row+i] = int32(n + i)
			}
		}
		mode := in.Logits
		if mode == LogitsDefault {
			mode = LogitsLast
			if si.tree {
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
		si.nl = len(s.lidx) - si.lrow0
		for i, id := range in.Tokens {
			m.Embed.Row(s.x[(row+i)*m.h:(row+i+1)*m.h], id)
		}
		s.ins = append(s.ins, si)
		s.start = append(s.start, row)
		s.lst = append(s.lst, si.lrow0)
		row += t
	}
	s.start = append(s.start, rows)
	s.lst = append(s.lst, len(s.lidx))

	m.tap(0, rows)
	for li := range m.Layers {
		s.layer = li
		m.Layers[li].forward(m, li, rows)
		if li < L-1 {
			m.tap(li+1, rows)
		}
	}
	if t := s.tapOf[0]; t >= 0 {
		copy(s.taps[t], s.x[:rows*m.h])
	}

	// Final norm: over every row when hidden_states[L] is tapped, else only
	// over the rows that need logits.
	nl := len(s.lidx)
	if t := s.tapOf[L+1]; t >= 0 {
		nn.RMSNorm(s.taps[t], s.x, m.Norm, rows, m.h, m.eps)
		for j, r := range s.lidx {
			copy(s.lx[j*m.h:(j+1)*m.h], s.taps[t][int(r)*m.h:int(r+1)*m.h])
		}
	} else {
		for j, r := range s.lidx {
			copy(s.lx[j*m.h:(j+1)*m.h], s.x[int(r)*m.h:int(r+1)*m.h])
		}
		nn.RMSNorm(s.lx, s.lx, m.Norm, nl, m.h, m.eps)
	}
	if nl > 0 {
		m.mm.MulT(s.logits, s.lx, &m.lm, nl, false)
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
	r.Logits = s.logits[:nl*m.vocab]
	r.Hidden = s.taps[:len(opt.Taps)]
	for i := range r.Hidden {
		r.Hidden[i] = r.Hidden[i][:rows*m.h]
	}
	r.v, r.h = m.vocab, m.h
	return r, nil
}

// tap records the residual stream as hidden_states[k] when requested.
func (m *Model) tap(k, rows int) {
	if t := m.s.tapOf[k+1]; t >= 0 {
		copy(m.s.taps[t], m.s.x[:rows*m.h])
	}
}

// ensure grows the scratch space for a pass of the given size.
func (m *Model) ensure(rows, lrows, taps, maskLen, inputs int) {
	s := &m.s
	if rows > s.rows {
		s.rows = rows
		s.x = make([]float32, rows*m.h)
		s.xn = make([]float32, rows*m.h)
		s.q = make([]float32, rows*m.qDim)
		s.att = make([]float32, rows*m.qDim)
		s.k = make([]float32, rows*m.kvDim)
		s.v = make([]float32, rows*m.kvDim)
		s.gate = make([]float32, rows*m.inter)
		s.up = make([]float32, rows*m.inter)
		s.fused = make([]float32, rows*max(2*m.inter, m.qDim+2*m.kvDim))
		s.pos = make([]int32, rows)
		s.lidx = make([]int32, 0, rows)
		s.depth = make([]int32, 0, rows)
		for i := range s.taps {
			s.taps[i] = make([]float32, rows*m.h)
		}
	}
	for len(s.taps) < taps {
		s.taps = append(s.taps, make([]float32, s.rows*m.h))
	}
	for i := 0; i < taps; i++ {
		s.taps[i] = s.taps[i][:cap(s.taps[i])]
	}
	if lrows > s.lrows {
		s.lrows = lrows
		s.lx = make([]float32, lrows*m.h)
		s.logits = make([]float32, lrows*m.vocab)
	}
	if len(s.mask) < maskLen {
		s.mask = make([]bool, maskLen)
	}
	if cap(s.ins) < inputs {
		s.ins = make([]seqIn, 0, inputs)
		s.start = make([]int, 0, inputs+1)
		s.lst = make([]int, 0, inputs+1)
	}
	if need := inputs * m.nHeads; cap(s.items) < need {
		s.items = make([]int32, 0, need)
		s.gitems = make([]int32, 0, need)
	}
}

// forward runs decoder layer li over the pass's rows: two residual blocks.
func (l *Layer) forward(m *Model, li, rows int) {
	s := &m.s
	nn.RMSNorm(s.xn, s.x, l.AttnNorm, rows, m.h, m.eps)
	l.Attn.forward(m, li, rows)
	nn.RMSNorm(s.xn, s.x, l.MLPNorm, rows, m.h, m.eps)
	l.MLP.forward(m, rows)
}

// forward computes x += Attention(xn) for layer li, storing the new K/V rows
// in each sequence's cache.
func (a *Attention) forward(m *Model, li, rows int) {
	s := &m.s
	if !a.qkv.Empty() {
		qd, kd := m.qDim, m.kvDim
		w := qd + 2*kd
		m.mm.MulT(s.fused, s.xn, &a.qkv, rows, false)
		for r := 0; r < rows; r++ {
			f := s.fused[r*w : (r+1)*w]
			copy(s.q[r*qd:(r+1)*qd], f[:qd])
			copy(s.k[r*kd:(r+1)*kd], f[qd:qd+kd])
			copy(s.v[r*kd:(r+1)*kd], f[qd+kd:])
		}
		if a.Q.B != nil {
			addBias(s.q[:rows*qd], a.Q.B)
			addBias(s.k[:rows*kd], a.K.B)
			addBias(s.v[:rows*kd], a.V.B)
		}
	} else {
		m.linear(&a.Q, s.q, s.xn, rows, false)
		m.linear(&a.K, s.k, s.xn, rows, false)
		m.linear(&a.V, s.v, s.xn, rows, false)
	}
	if a.QNorm != nil { // Qwen3: RMSNorm over each head, before RoPE
		nn.RMSNorm(s.q, s.q, a.QNorm, rows*m.nHeads, m.hd, m.eps)
		nn.RMSNorm(s.k, s.k, a.KNorm, rows*m.nKV, m.hd, m.eps)
	}
	m.rope.Forward(s.q[:rows*m.qDim], rows, m.nHeads, s.pos)
	m.rope.Forward(s.k[:rows*m.kvDim], rows, m.nKV, s.pos)
	// Scaling the queries by 1/√d scales every score: one pass over the
	// queries instead of one over each row of scores.
	tensor.Scale(s.q[:rows*m.qDim], m.scale)
	kv := m.kvDim
	for _, in := range s.ins {
		in.seq.kv.Write(li, 0, s.k[in.row0*kv:(in.row0+in.t)*kv], s.v[in.row0*kv:(in.row0+in.t)*kv])
	}
	m.attend(li)
	m.linear(&a.O, s.x, s.att, rows, true)
}

// forward computes x += Down(silu(Gate(xn)) * Up(xn)).
func (f *MLP) forward(m *Model, rows int) {
	s := &m.s
	if !f.gateUp.Empty() {
		I := m.inter
		m.mm.MulT(s.fused, s.xn, &f.gateUp, rows, false)
		g, gu := s.gate, s.fused
		if rows*I < 1<<15 {
			swigluRows(g, gu, 0, rows, I)
		} else {
			tensor.Parallel(rows, (1<<13)/I+1, func(lo, hi int) { swigluRows(g, gu, lo, hi, I) })
		}
		m.linear(&f.Down, s.x, s.gate, rows, true)
		return
	}
	m.linear(&f.Gate, s.gate, s.xn, rows, false)
	m.linear(&f.Up, s.up, s.xn, rows, false)
	n := rows * m.inter
	if n < 1<<15 {
		tensor.SwiGLU(s.gate[:n], s.gate[:n], s.up[:n])
	} else {
		g, u := s.gate, s.up
		tensor.Parallel(n, 1<<13, func(lo, hi int) { tensor.SwiGLU(g[lo:hi], g[lo:hi], u[lo:hi]) })
	}
	m.linear(&f.Down, s.x, s.gate, rows, true)
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
	m.mm.MulT(dst, hidden, &m.lm, rows, false)
	return nil
}
