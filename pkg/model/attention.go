package model

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Attention over the cache. Each input's new rows attend to its committed
// prefix and to the new rows the causal or tree mask allows. A single new row
// (decode) is computed directly, parallel over (input, head) pairs. Several
// rows (a speculative chain or tree, a short chunk) are computed per KV group:
// the queries of every row and of every head sharing the group's keys are
// packed into one matrix. Both paths compute a row's scores from the cache's
// transposed keys (q·K^T as a weighted sum of K^T's rows, eight keys per
// vector operation) and its softmax(S)·V, both with tensor.WeightedSum over
// the keys the row sees, in the same order, so a row scores the same alone
// as in a chain. Long chains (prefill) go through the backend per head
// in row blocks that only multiply against the keys the block can see.

// blasMinRows is the number of new rows from which an input's attention uses
// the backend's matrix multiplies.
const blasMinRows = 2

// groupMaxRows is the number of new rows from which a chain (not a tree) is
// computed per head in causal row blocks instead of per KV group over its
// whole width.
const groupMaxRows = blasBlock

// blasBlock is the row block of a chain's causal attention: a block of rows
// only multiplies against the keys its last row can see.
const blasBlock = 64

// softmaxJob describes one score block of the BLAS attention path.
type softmaxJob struct {
	s       []float32 // [rows, ld] scores
	ld      int
	visible int // keys visible to block row 0 in a chain (prefix + 1 + i0)
	tree    bool
	mask    []bool // [t, t] tree mask rows of this input
	t, n    int
}

// attend computes s.att for every input of the pass at layer li.
func (m *Model) attend(li int) {
	s := &m.s
	s.items = s.items[:0]
	s.gitems = s.gitems[:0]
	maxCtx, work := 0, 0
	gmax, gctx, gwork := 0, 0, 0
	for b := range s.ins {
		in := &s.ins[b]
		if in.t >= groupMaxRows && !in.tree {
			m.attendBLAS(li, in)
			continue
		}
		if in.t >= blasMinRows {
			for g := 0; g < m.nKV; g++ {
				s.gitems = append(s.gitems, int32(b*m.nKV+g))
			}
			gmax = max(gmax, in.t*(m.nHeads/m.nKV))
			gctx = max(gctx, in.n+in.t)
			gwork += in.t * (in.n + in.t) * m.hd * m.nHeads
			continue
		}

		for h := 0; h < m.nHeads; h++ {
			s.items = append(s.items, int32(b*m.nHeads+h))
		}
		maxCtx = max(maxCtx, in.n+in.t)
		work += in.t * (in.n + in.t) * m.hd * m.nHeads
	}
	if len(s.gitems) > 0 {
		m.attendGroupItems(gmax, gctx, gwork)
	}
	if len(s.items) == 0 {
		return
	}
	// Below a few tens of thousands of multiply-adds a second thread costs
	// more than it saves.
	workers := 1
	if work >= 1<<15 {
		workers = min(tensor.Workers(), len(s.items))
	}
	if len(s.scores) < workers {
		s.scores = make([][]float32, workers)
	}
	for w := 0; w < workers; w++ {
		if len(s.scores[w]) < maxCtx {
			s.scores[w] = make([]float32, maxCtx+256)
		}
	}
	tensor.ParallelChunks(len(s.items), workers, s.attnFn)
}

// attendItems computes the (input, head) items [lo, hi) directly.
func (m *Model) attendItems(worker, lo, hi int) {
	s := &m.s
	li := s.layer
	hd, qd, kv := m.hd, m.qDim, m.kvDim
	rep := m.nHeads / m.nKV
	scale := m.scale
	negInf := float32(math.Inf(-1))
	for _, it := range s.items[lo:hi] {
		in := &s.ins[int(it)/m.nHeads]
		h := int(it) % m.nHeads
		g := h / rep
		kt := in.seq.kt[li][g*hd*in.seq.cap:]
		vc := in.seq.v[li][g*hd:]
		c0 := in.seq.cap
		for i := 0; i < in.t; i++ {
			row := in.row0 + i
			q := s.q[row*qd+h*hd : row*qd+h*hd+hd]
			out := s.att[row*qd+h*hd : row*qd+h*hd+hd]
			ctx := in.n + i + 1
			var mask []bool
			if in.tree {
				ctx = in.n + in.t
				mask = s.mask[in.mask+i*in.t : in.mask+i*in.t+in.t]
			}
			sc := s.scores[worker][:ctx]
			tensor.WeightedSum(sc, q, kt[:(hd-1)*c0+ctx], c0, hd, ctx, false)
			tensor.Scale(sc, scale)
			for j, ok := range mask {
				if !ok {
					sc[in.n+j] = negInf
				}
			}
			tensor.Softmax(sc)
			tensor.WeightedSum(out, sc, vc[:(ctx-1)*kv+hd], kv, ctx, hd, false)
		}
	}
}

// attendBLAS computes one input's attention with the backend, the heads split
// across the workers: each worker runs whole heads, Q·K^T, softmax and P·V,
// in its own score buffer, so that the backend's calls run side by side.
func (m *Model) attendBLAS(li int, in *seqIn) {
	s := &m.s
	ctx := in.n + in.t
	block := in.t // a tree attends in one block, masked
	if !in.tree {
		block = blasBlock
	}
	workers := 1
	if m.split {
		workers = min(tensor.Workers(), m.nHeads)
	}
	if len(s.bigs) < workers {
		s.bigs = append(s.bigs, make([][]float32, workers-len(s.bigs))...)
	}
	for w := 0; w < workers; w++ {
		s.bigs[w] = grow(s.bigs[w], min(block, in.t)*ctx)
	}
	s.blasIn, s.layer = in, li
	tensor.ParallelChunks(m.nHeads, workers, s.headFn)
	s.blasIn = nil
}

// attendHeads computes heads [lo, hi) of s.blasIn at layer s.layer.
func (m *Model) attendHeads(worker, lo, hi int) {
	s := &m.s
	in := s.blasIn
	li := s.layer
	hd, qd, kv := m.hd, m.qDim, m.kvDim
	rep := m.nHeads / m.nKV
	ctx := in.n + in.t
	block := in.t
	if !in.tree {
		block = blasBlock
	}
	kc, vc := in.seq.k[li], in.seq.v[li]
	for h := lo; h < hi; h++ {
		g := h / rep
		for i0 := 0; i0 < in.t; i0 += block {
			bt := min(block, in.t-i0)
			// Keys this block can see: a chain's rows see up to their own
			// position; a tree's rows see all new nodes, masked.
			width := ctx
			if !in.tree {
				width = in.n + i0 + bt
			}
			sc := s.bigs[worker][:bt*width]
			row := in.row0 + i0
			m.be.Sgemm(false, true, bt, width, hd, m.scale, s.q[row*qd+h*hd:], qd, kc[g*hd:], kv, 0, sc, width)
			j := softmaxJob{s: sc, ld: width, visible: in.n + i0 + 1, tree: in.tree, t: in.t, n: in.n}
			if in.tree {
				j.mask = s.mask[in.mask : in.mask+in.t*in.t]
			}
			if !m.split && bt*width >= 1<<14 {
				// The heads run one after another (the backend threads each
				// call itself): spread the softmax over the workers instead.
				s.sm = j
				tensor.ParallelChunks(bt, tensor.Workers(), s.smFn)
			} else {
				j.rows(0, bt)
			}
			m.be.Sgemm(false, false, bt, hd, width, 1, sc, width, vc[g*hd:], kv, 0, s.att[row*qd+h*hd:], qd)
		}
	}
}

// rows masks and normalises rows [lo, hi) of the score block.
func (j *softmaxJob) rows(lo, hi int) {
	negInf := float32(math.Inf(-1))
	for i := lo; i < hi; i++ {
		r := j.s[i*j.ld : (i+1)*j.ld]
		if !j.tree {
			vis := j.visible + i
			tensor.Softmax(r[:vis])
			clear(r[vis:])
			continue
		}
		mk := j.mask[i*j.t : (i+1)*j.t]
		for c, ok := range mk {
			if !ok {
				r[j.n+c] = negInf
			}
		}
		tensor.Softmax(r)
	}
}

// softmaxChunk runs s.sm.rows over rows [lo, hi), for ParallelChunks.
func (m *Model) softmaxChunk(_, lo, hi int) { m.s.sm.rows(lo, hi) }

// attendGroupItems computes the (input, KV group) items of s.gitems with
// tensor's small-product kernels: rows is the most packed query rows of an item (new rows times
// heads per group), ctx the widest score row, work the multiply-adds.
func (m *Model) attendGroupItems(rows, ctx, work int) {
	s := &m.s
	workers := 1
	if work >= groupSplitWork {
		workers = min(tensor.Workers(), len(s.gitems))
	}
	if len(s.gbufs) < workers {
		s.gbufs = append(s.gbufs, make([]groupBuf, workers-len(s.gbufs))...)
	}
	for w := 0; w < workers; w++ {
		gb := &s.gbufs[w]
		gb.q = grow(gb.q, rows*m.hd)
		gb.o = grow(gb.o, rows*m.hd)
		gb.s = grow(gb.s, rows*ctx)
	}
	tensor.ParallelChunks(len(s.gitems), workers, s.groupFn)
}

// groupSplitWork is the multiply-adds from which the grouped attention of a
// pass is split over the workers (its kernels run in Go, on any backend).
const groupSplitWork = 1 << 18

// groupBuf is one worker's scratch for attendGroups.
type groupBuf struct {
	q, o []float32 // [rows, hd] packed queries and outputs of one KV group
	s    []float32 // [rows, ctx] scores
}

// attendGroups computes the (input, KV group) items [lo, hi) of s.gitems at
// layer s.layer: packed row i*rep+j is head g*rep+j of new row i.
func (m *Model) attendGroups(worker, lo, hi int) {
	s := &m.s
	li := s.layer
	hd, qd, kv := m.hd, m.qDim, m.kvDim
	rep := m.nHeads / m.nKV
	gb := &s.gbufs[worker]
	negInf := float32(math.Inf(-1))
	for _, it := range s.gitems[lo:hi] {
		in := &s.ins[int(it)/m.nKV]
		g := int(it) % m.nKV
		R := in.t * rep
		width := in.n + in.t
		qp, op, sc := gb.q[:R*hd], gb.o[:R*hd], gb.s[:R*width]
		for i := 0; i < in.t; i++ {
			src := s.q[(in.row0+i)*qd+g*rep*hd:]
			copy(qp[i*rep*hd:(i+1)*rep*hd], src[:rep*hd])
		}
		c0 := in.seq.cap
		kt := in.seq.kt[li][g*hd*c0 : (g*hd+hd-1)*c0+width]
		vc := in.seq.v[li][g*hd : (width-1)*kv+g*hd+hd]
		for r := 0; r < R; r++ {
			i := r / rep
			row := sc[r*width : (r+1)*width]
			vis := width
			if !in.tree {
				vis = in.n + i + 1
			}
			tensor.WeightedSum(row[:vis], qp[r*hd:(r+1)*hd], kt, c0, hd, vis, false)
			if !in.tree {
				tensor.Scale(row[:vis], m.scale)
				tensor.Softmax(row[:vis])
			} else {
				tensor.Scale(row, m.scale)
				mk := s.mask[in.mask+i*in.t : in.mask+(i+1)*in.t]
				tail := row[in.n:]
				for c, ok := range mk {
					if !ok {
						tail[c] = negInf
					}
				}
				tensor.Softmax(row)
			}
			tensor.WeightedSum(op[r*hd:(r+1)*hd], row[:vis], vc, kv, vis, hd, false)
		}
		for i := 0; i < in.t; i++ {
			dst := s.att[(in.row0+i)*qd+g*rep*hd:]
			copy(dst[:rep*hd], op[i*rep*hd:(i+1)*rep*hd])
		}
	}
}
