package cpu

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The CPU device's attention over its KV caches. Each sequence's new rows
// attend to its committed prefix and to the new rows the causal or tree mask
// allows. The queries are scaled by 1/√d before they get here. A single new
// row (decode) is computed directly, parallel over (sequence, head) pairs;
// several rows (a speculative chain or tree, a short chunk), parallel over
// (sequence, KV group) pairs. Both go one row and head at a time through
// attendRow: the scores from the cache's transposed keys (q·K^T as a
// weighted sum of K^T's rows), softmax numerators, their weighted sum of the
// values, divided by the softmax denominator, all over exactly the keys the
// row sees. A tree node whose ancestors are the first nodes in order (any
// node of a chain-shaped draft) sees the same keys, in the same places, as a
// decode step at its position, so verification scores it bit for bit as
// decoding would; other tree nodes mask their non-ancestors. Long chains
// (prefill) go through the backend per head in row blocks that only multiply
// against the keys the block can see. A sliding window (AttnShape.Window)
// gives each row a first visible key (tensor.WindowStart): attendRow scores
// only the keys from it on, in the same places for a decode step and the
// tree node at its position, and a row block of the backend path skips the
// keys before its first row's window. A softcap (AttnShape.Softcap) caps
// each computed score before the mask and the softmax. Attention sinks
// (AttnShape.Sinks) join each row's softmax where it is computed, once per
// row and head (SoftmaxUnscaledSink): in attendRow, or in a backend block's
// row softmax.

// blasMinRows is the number of new rows from which a sequence's attention
// uses the backend's matrix multiplies.
const blasMinRows = 2

// groupMaxRows is the number of new rows from which a chain (not a tree) is
// computed per head in causal row blocks instead of per KV group over its
// whole width.
const groupMaxRows = blasBlock

// blasBlock is the row block of a chain's causal attention: a block of rows
// only multiplies against the keys its last row can see.
const blasBlock = 64

// groupSplitWork is the multiply-adds from which the grouped attention of a
// pass (several rows of one sequence, or of several) is split over the
// workers (1<<14, which splits a five-row verification over a short context,
// measured no faster on 2 cores).
const groupSplitWork = 1 << 18

// attnScratch is the attention's state during an Attend call and its
// per-worker scratch, kept between calls.
type attnScratch struct {
	c              *Device
	out, q         []float32
	l              int
	hd, qd, kv     int // head width, query and key/value widths
	nHeads, nKV    int
	window         int       // AttnShape.Window: 0, or the positions a row sees
	softcap        float32   // AttnShape.Softcap: 0, or the scores' cap
	sinks          []float32 // AttnShape.Sinks: nil, or one logit per head
	seqs           []tensor.AttnSeq
	items          []int32     // (sequence, head) work items of the small-row path
	gitems         []int32     // (sequence, KV group) work items of the grouped path
	scores         [][]float32 // per worker scratch for small-row attention
	bigs           [][]float32 // per worker [block, ctx] scores for the BLAS path
	gbufs          []groupBuf
	blasIn         *tensor.AttnSeq // sequence whose heads attendHeads computes
	sm             softmaxJob
	attnFn, headFn func(worker, lo, hi int)
	groupFn, smFn  func(worker, lo, hi int)
}

func (a *attnScratch) init(c *Device) {
	a.c = c
	a.attnFn = a.attendItems
	a.headFn = a.attendHeads
	a.groupFn = a.attendGroups
	a.smFn = a.softmaxChunk
}

// groupBuf is one worker's scratch for attendGroups.
type groupBuf struct {
	s []float32 // [ctx] one row's scores
}

// softmaxJob describes one score block of the BLAS attention path.
type softmaxJob struct {
	s       []float32 // [rows, ld] scores of the keys from lo0 on
	ld      int
	visible int // keys from lo0 visible to block row 0 in a chain
	tree    bool
	mask    []bool // [t, t] tree mask rows of this sequence
	t, n    int
	lo0     int     // the block's first key (its first row's window start)
	window  int     // AttnShape.Window
	softcap float32 // AttnShape.Softcap
	sinks   bool    // AttnShape.Sinks is set: sink joins every row's softmax
	sink    float32 // the head's sink logit
}

// Attend computes out for every sequence of the pass at layer l.
func (c *Device) Attend(out, q tensor.Tensor, l int, shape tensor.AttnShape, seqs []tensor.AttnSeq) {
	tensor.CheckAttnShape("Attend", shape)
	a := &c.att
	a.out, a.q, a.l, a.seqs = f32s(out), f32s(q), l, seqs
	a.hd, a.nHeads, a.nKV = shape.HeadDim, shape.Heads, shape.KVHeads
	a.window, a.softcap = shape.Window, shape.Softcap
	a.sinks = nil
	if !shape.Sinks.Empty() {
		a.sinks = f32s(shape.Sinks)[:a.nHeads]
	}
	a.qd, a.kv = a.nHeads*a.hd, a.nKV*a.hd
	a.items = a.items[:0]
	a.gitems = a.gitems[:0]
	maxCtx, work := 0, 0
	gctx, gwork := 0, 0
	for b := range seqs {
		in := &seqs[b]
		if in.T >= groupMaxRows && in.Mask == nil {
			a.attendBLAS(in)
			continue
		}
		if in.T >= blasMinRows || in.P > 0 {
			for g := 0; g < a.nKV; g++ {
				a.gitems = append(a.gitems, int32(b*a.nKV+g))
			}
			gctx = max(gctx, in.N+in.P+in.T)
			gwork += in.T * (in.N + in.P + in.T) * a.hd * a.nHeads
			continue
		}
		for h := 0; h < a.nHeads; h++ {
			a.items = append(a.items, int32(b*a.nHeads+h))
		}
		maxCtx = max(maxCtx, in.N+in.T)
		work += in.T * (in.N + in.T) * a.hd * a.nHeads
	}
	if len(a.gitems) > 0 {
		a.attendGroupItems(gctx, gwork)
	}
	if len(a.items) > 0 {
		// Below a few tens of thousands of multiply-adds a second thread
		// costs more than it saves.
		workers := 1
		if work >= 1<<15 {
			workers = min(tensor.Workers(), len(a.items))
		}
		if len(a.scores) < workers {
			a.scores = append(a.scores, make([][]float32, workers-len(a.scores))...)
		}
		for w := 0; w < workers; w++ {
			if len(a.scores[w]) < maxCtx {
				a.scores[w] = make([]float32, maxCtx+256)
			}
		}
		tensor.ParallelChunks(len(a.items), workers, a.attnFn)
	}
	a.out, a.q, a.seqs, a.sinks = nil, nil, nil, nil
}

// attendItems computes the (sequence, head) items [lo, hi) directly.
func (a *attnScratch) attendItems(worker, lo, hi int) {
	hd, qd := a.hd, a.qd
	rep := a.nHeads / a.nKV
	for _, it := range a.items[lo:hi] {
		in := &a.seqs[int(it)/a.nHeads]
		h := int(it) % a.nHeads
		g := h / rep
		c0 := in.KV.Cap()
		kt := in.KV.KT(a.l)[g*hd*c0:]
		vc := in.KV.V(a.l)[g*hd:]
		for i := 0; i < in.T; i++ {
			row := in.Row0 + i
			ctx := in.N + i + 1
			lo := 0
			if a.window > 0 {
				lo = tensor.WindowStart(nil, in.N, ctx-1, a.window)
			}
			a.attendRow(a.out[row*qd+h*hd:row*qd+h*hd+hd], a.q[row*qd+h*hd:row*qd+h*hd+hd], a.scores[worker][:ctx], lo, kt, vc, c0, nil, in.N, h)
		}
	}
}

// attendRow computes one head's attention output out [hd] for the (already
// scaled) query q over keys [lo, len(sc)) of a KV group, whose keys kt are
// stored transposed with row stride c0 and whose values vc have row stride
// kvDim: scores q·K^T (capped when a.softcap is set), softmax, P·V, in
// sc[lo:]'s space. mask, when not nil, hides the new keys n+c whose mask[c]
// is false (a tree node's non-ancestors). Every row of every path but the
// backend's goes through here, so a row scores the same in a decode step as
// in a chain or a verification tree that gives it the same keys (the same
// lo and len(sc)). h is the query head, whose sink (when a.sinks is set)
// joins the softmax.
func (a *attnScratch) attendRow(out, q, sc []float32, lo int, kt, vc []float32, c0 int, mask []bool, n, h int) {
	hd, kv := a.hd, a.kv
	ctx := len(sc)
	s := sc[lo:]
	w := ctx - lo
	WeightedSum(s, q, kt[lo:(hd-1)*c0+ctx], c0, hd, w, false)
	if a.softcap != 0 {
		capScores(s, a.softcap)
	}
	if mask != nil {
		negInf := float32(math.Inf(-1))
		for c, ok := range mask {
			if !ok && n+c >= lo {
				s[n+c-lo] = negInf
			}
		}
	}
	var sum float32
	if a.sinks != nil {
		sum = SoftmaxUnscaledSink(s, a.sinks[h])
	} else {
		sum = SoftmaxUnscaled(s)
	}
	WeightedSum(out, s, vc[lo*kv:(ctx-1)*kv+hd], kv, w, hd, false)
	Scale(out, 1/sum)
}

// capScores replaces each score s with c·tanh(s/c) (AttnShape.Softcap).
func capScores(s []float32, c float32) {
	for i, v := range s {
		s[i] = SoftcapValue(v, c)
	}
}

// visible returns how many keys a tree node with ancestor mask mk (over the
// pending and new nodes) must score after the n committed ones, and whether the mask
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

// attendBLAS computes one sequence's attention with the backend, the heads
// split across the workers: each worker runs whole heads, Q·K^T, softmax and
// P·V, in its own score buffer, so that the backend's calls run side by side.
func (a *attnScratch) attendBLAS(in *tensor.AttnSeq) {
	ctx := in.N + in.T
	block := in.T // a tree attends in one block, masked
	if in.Mask == nil {
		block = blasBlock
	}
	workers := 1
	if a.c.mm.ParallelCalls() {
		workers = min(tensor.Workers(), a.nHeads)
	}
	if len(a.bigs) < workers {
		a.bigs = append(a.bigs, make([][]float32, workers-len(a.bigs))...)
	}
	for w := 0; w < workers; w++ {
		if n := min(block, in.T) * ctx; cap(a.bigs[w]) < n {
			a.bigs[w] = make([]float32, n)
		} else {
			a.bigs[w] = a.bigs[w][:n]
		}
	}
	a.blasIn = in
	tensor.ParallelChunks(a.nHeads, workers, a.headFn)
	a.blasIn = nil
}

// attendHeads computes heads [lo, hi) of a.blasIn.
func (a *attnScratch) attendHeads(worker, lo, hi int) {
	in := a.blasIn
	hd, qd, kv := a.hd, a.qd, a.kv
	rep := a.nHeads / a.nKV
	ctx := in.N + in.T
	tree := in.Mask != nil
	block := in.T
	if !tree {
		block = blasBlock
	}
	kc, vc := in.KV.K(a.l), in.KV.V(a.l)
	be := a.c.be
	for h := lo; h < hi; h++ {
		g := h / rep
		for i0 := 0; i0 < in.T; i0 += block {
			bt := min(block, in.T-i0)
			// Keys this block can see: a chain's rows see up to their own
			// position, and with a window from its first row's window
			// start; a tree's rows see all new nodes, masked.
			width, lo0 := ctx, 0
			if !tree {
				width = in.N + i0 + bt
				if a.window > 0 {
					lo0 = tensor.WindowStart(nil, in.N, in.N+i0, a.window)
				}
			}
			w := width - lo0
			sc := a.bigs[worker][:bt*w]
			row := in.Row0 + i0
			be.Sgemm(false, true, bt, w, hd, 1, a.q[row*qd+h*hd:], qd, kc[lo0*kv+g*hd:], kv, 0, sc, w)
			j := softmaxJob{s: sc, ld: w, visible: in.N + i0 + 1 - lo0, tree: tree, mask: in.Mask, t: in.T, n: in.N,
				lo0: lo0, window: a.window, softcap: a.softcap}
			if a.sinks != nil {
				j.sinks, j.sink = true, a.sinks[h]
			}
			if !a.c.mm.ParallelCalls() && bt*width >= 1<<14 {
				// The heads run one after another (the backend threads each
				// call itself): spread the softmax over the workers instead.
				a.sm = j
				tensor.ParallelChunks(bt, tensor.Workers(), a.smFn)
			} else {
				j.rows(0, bt)
			}
			be.Sgemm(false, false, bt, hd, w, 1, sc, w, vc[lo0*kv+g*hd:], kv, 0, a.out[row*qd+h*hd:], qd)
		}
	}
}

// rows caps, masks and normalises rows [lo, hi) of the score block, each
// row's softmax with the head's sink when j.sinks.
func (j *softmaxJob) rows(lo, hi int) {
	negInf := float32(math.Inf(-1))
	for i := lo; i < hi; i++ {
		r := j.s[i*j.ld : (i+1)*j.ld]
		if !j.tree {
			vis := j.visible + i
			start := 0 // the row's first key, from lo0
			if j.window > 0 {
				start = max(0, j.lo0+vis-j.window) - j.lo0
			}
			if j.softcap != 0 {
				capScores(r[start:vis], j.softcap)
			}
			j.softmax(r[start:vis])
			clear(r[:start])
			clear(r[vis:])
			continue
		}
		if j.softcap != 0 {
			capScores(r, j.softcap)
		}
		mk := j.mask[i*j.t : (i+1)*j.t]
		for c, ok := range mk {
			if !ok {
				r[j.n+c] = negInf
			}
		}
		if j.window > 0 {
			for c := range tensor.WindowStart(mk, j.n, 0, j.window) {
				r[c] = negInf
			}
		}
		j.softmax(r)
	}
}

// softmax turns one row's scores into probabilities, with the head's sink
// in the denominator when j.sinks.
func (j *softmaxJob) softmax(r []float32) {
	if !j.sinks {
		Softmax(r)
		return
	}
	Scale(r, 1/SoftmaxUnscaledSink(r, j.sink))
}

// softmaxChunk runs a.sm.rows over rows [lo, hi), for ParallelChunks.
func (a *attnScratch) softmaxChunk(_, lo, hi int) { a.sm.rows(lo, hi) }

// attendGroupItems computes the (sequence, KV group) items of a.gitems with
// the small-product kernels: ctx is the widest score row, work the
// multiply-adds.
func (a *attnScratch) attendGroupItems(ctx, work int) {
	workers := 1
	if work >= groupSplitWork {
		workers = min(tensor.Workers(), len(a.gitems))
	}
	if len(a.gbufs) < workers {
		a.gbufs = append(a.gbufs, make([]groupBuf, workers-len(a.gbufs))...)
	}
	for w := 0; w < workers; w++ {
		gb := &a.gbufs[w]
		if cap(gb.s) < ctx {
			gb.s = make([]float32, ctx)
		} else {
			gb.s = gb.s[:ctx]
		}
	}
	tensor.ParallelChunks(len(a.gitems), workers, a.groupFn)
}

// attendGroups computes the (sequence, KV group) items [lo, hi) of a.gitems,
// one row and head at a time through attendRow.
func (a *attnScratch) attendGroups(worker, lo, hi int) {
	hd, qd := a.hd, a.qd
	rep := a.nHeads / a.nKV
	gb := &a.gbufs[worker]
	for _, it := range a.gitems[lo:hi] {
		in := &a.seqs[int(it)/a.nKV]
		g := int(it) % a.nKV
		c0 := in.KV.Cap()
		kt := in.KV.KT(a.l)[g*hd*c0:]
		vc := in.KV.V(a.l)[g*hd:]
		w := in.P + in.T
		for i := 0; i < in.T; i++ {
			vis := in.N + in.P + i + 1
			lo := 0
			var mk []bool
			if in.Mask != nil {
				mk = in.Mask[i*w : (i+1)*w]
				if a.window > 0 {
					lo = tensor.WindowStart(mk, in.N, 0, a.window)
				}
				var masked bool
				if vis, masked = visible(mk, in.N); !masked {
					mk = nil
				}
			} else if a.window > 0 {
				lo = tensor.WindowStart(nil, in.N, vis-1, a.window)
			}
			row := in.Row0 + i
			for h := g * rep; h < (g+1)*rep; h++ {
				o := row*qd + h*hd
				a.attendRow(a.out[o:o+hd], a.q[o:o+hd], gb.s[:vis], lo, kt, vc, c0, mk, in.N, h)
			}
		}
	}
}
