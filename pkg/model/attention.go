package model

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Attention over the cache. Each input's new rows attend to its committed
// prefix and to the new rows the causal or tree mask allows. The queries are
// scaled by 1/√d before they get here. A single new row (decode) is computed
// directly, parallel over (input, head) pairs; several rows (a speculative
// chain or tree, a short chunk), parallel over (input, KV group) pairs. Both
// go one row and head at a time through attendRow: the scores from the
// cache's transposed keys (q·K^T as a weighted sum of K^T's rows), softmax
// numerators, their weighted sum of the values, divided by the softmax
// denominator, all over exactly the keys the row sees. A tree node whose
// ancestors are the first nodes in order (any node of a chain-shaped draft)
// sees the same keys, in the same places, as a decode step at its position,
// so verification scores it bit for bit as decoding would; other tree nodes
// mask their non-ancestors. Long chains (prefill) go through the backend per
// head in row blocks that only multiply against the keys the block can see.

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
	gctx, gwork := 0, 0
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
		m.attendGroupItems(gctx, gwork)
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
	hd, qd := m.hd, m.qDim
	rep := m.nHeads / m.nKV
	for _, it := range s.items[lo:hi] {
		in := &s.ins[int(it)/m.nHeads]
		h := int(it) % m.nHeads
		g := h / rep
		kt := in.seq.kv.KT(li)[g*hd*in.seq.kv.Cap():]
		vc := in.seq.kv.V(li)[g*hd:]
		for i := 0; i < in.t; i++ {
			row := in.row0 + i
			ctx := in.n + i + 1
			m.attendRow(s.att[row*qd+h*hd:row*qd+h*hd+hd], s.q[row*qd+h*hd:row*qd+h*hd+hd], s.scores[worker][:ctx], kt, vc, in.seq.kv.Cap(), nil, in.n)
		}
	}
}

// attendRow computes one head's attention output out [hd] for the (already
// scaled) query q over the first len(sc) keys of a KV group, whose keys kt
// are stored transposed with row stride c0 and whose values vc have row
// stride kvDim: scores q·K^T, softmax, P·V, in sc's space. mask, when not
// nil, hides the new keys n+c whose mask[c] is false (a tree node's
// non-ancestors). Every row of every path goes through here, so a row
// scores the same in a decode step as in a chain or a verification tree
// that gives it the same keys.
func (m *Model) attendRow(out, q, sc, kt, vc []float32, c0 int, mask []bool, n int) {
	hd, kv := m.hd, m.kvDim
	ctx := len(sc)
	tensor.WeightedSum(sc, q, kt[:(hd-1)*c0+ctx], c0, hd, ctx, false)
	if mask != nil {
		negInf := float32(math.Inf(-1))
		for c, ok := range mask {
			if !ok {
				sc[n+c] = negInf
			}
		}
	}
	sum := tensor.SoftmaxUnscaled(sc)
	tensor.WeightedSum(out, sc, vc[:(ctx-1)*kv+hd], kv, ctx, hd, false)
	tensor.Scale(out, 1/sum)
}

// visible returns how many keys a tree node with ancestor mask mk (over the
// t new nodes) must score after the n committed ones, and whether the mask
// must hide some: a node whose ancestors are exactly the first nodes in
// order (every node of a chain-shaped draft) sees a plain prefix of n+d+1
// keys, as a decode step at its position would.
func visible(mk []bool, n int) (int, bool) {
	cnt := 0
	for c, ok := range mk {
		if ok {
			if c != cnt {
				return n + len(mk), true
			}
			cnt++
		}
	}
	return n + cnt, false
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
	if m.mm.ParallelCalls() {
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
	kc, vc := in.seq.kv.K(li), in.seq.kv.V(li)
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
			m.be.Sgemm(false, true, bt, width, hd, 1, s.q[row*qd+h*hd:], qd, kc[g*hd:], kv, 0, sc, width)
			j := softmaxJob{s: sc, ld: width, visible: in.n + i0 + 1, tree: in.tree, t: in.t, n: in.n}
			if in.tree {
				j.mask = s.mask[in.mask : in.mask+in.t*in.t]
			}
			if !m.mm.ParallelCalls() && bt*width >= 1<<14 {
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
// tensor's small-product kernels: ctx is the widest score row, work the
// multiply-adds.
func (m *Model) attendGroupItems(ctx, work int) {
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
		gb.s = grow(gb.s, ctx)
	}
	tensor.ParallelChunks(len(s.gitems), workers, s.groupFn)
}

// groupSplitWork is the multiply-adds from which the grouped attention of a
// pass (several rows of one input, or of several) is split over the
// workers (1<<14, which splits a five-row verification over a short context,
// measured no faster on 2 cores).
const groupSplitWork = 1 << 18

// groupBuf is one worker's scratch for attendGroups.
type groupBuf struct {
	s []float32 // [ctx] one row's scores
}

// attendGroups computes the (input, KV group) items [lo, hi) of s.gitems at
// layer s.layer, one row and head at a time through attendRow.
func (m *Model) attendGroups(worker, lo, hi int) {
	s := &m.s
	li := s.layer
	hd, qd := m.hd, m.qDim
	rep := m.nHeads / m.nKV
	gb := &s.gbufs[worker]
	for _, it := range s.gitems[lo:hi] {
		in := &s.ins[int(it)/m.nKV]
		g := int(it) % m.nKV
		c0 := in.seq.kv.Cap()
		kt := in.seq.kv.KT(li)[g*hd*c0:]
		vc := in.seq.kv.V(li)[g*hd:]
		for i := 0; i < in.t; i++ {
			vis := in.n + i + 1
			var mk []bool
			if in.tree {
				mk = s.mask[in.mask+i*in.t : in.mask+(i+1)*in.t]
				var masked bool
				if vis, masked = visible(mk, in.n); !masked {
					mk = nil
				}
			}
			row := in.row0 + i
			for h := g * rep; h < (g+1)*rep; h++ {
				o := row*qd + h*hd
				m.attendRow(s.att[o:o+hd], s.q[o:o+hd], gb.s[:vis], kt, vc, c0, mk, in.n)
			}
		}
	}
}
