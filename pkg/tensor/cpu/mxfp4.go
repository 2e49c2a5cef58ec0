package cpu

import (
	"sync/atomic"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Products over MXFP4 weights (tensor.MXFP4Matrix: gpt-oss's experts, kept
// in their checkpoint's 4.25 bits a value). The weight is widened to float32
// a few rows at a time into scratch (exactly: every MXFP4 value is a
// float32) and multiplied there by the float32 kernels, so that a product
// computes what the float32 product over the widened matrix computes,
// without a float32 copy of the whole matrix:
//
//   - up to FewRows rows, each chunk of the split widens mxfp4Tile weight
//     rows at a time and runs DotRows over them: every output element is
//     DotRows' sequence of operations over its weight row, whatever the
//     rows or the tiles around it, so a row's result is the one-row
//     product's, and the unprepared float32 weight's, bit for bit;
//   - above, panels of about mxfp4PanelValues values are widened (split over
//     the workers) and multiplied as a float32 weight of the panel's rows
//     is, through the backend's Sgemm.
//
// The widening adds a pass over the panel in the caches to a product that
// reads about an eighth of a float32 weight's bytes from memory.

// mxfp4Tile is the number of weight rows a few-row chunk widens at once: a
// tile of 8 rows of a few thousand values stays in the first two cache
// levels while DotRows reads it.
const mxfp4Tile = 8

// mxfp4PanelValues is the number of weight values a product of more than
// FewRows rows widens at once (4 MiB of float32): a panel large enough for
// the GEMM's blocking, small enough to sit in a last-level cache.
const mxfp4PanelValues = 1 << 20

// mxfp4DeqChunk is the fewest blocks of a panel's widening one worker takes.
const mxfp4DeqChunk = 1 << 10

// mxfp4Scratch is a Products' scratch for MXFP4 weights, kept between
// products so that a warm product allocates nothing.
type mxfp4Scratch struct {
	// tiles are the few-row chunks' float32 tiles of mxfp4Tile·k values,
	// one per chunk that may run at once: a chunk claims a free one (busy)
	// for its duration. The first min(chunks, Workers) are made up front;
	// the rest only if more chunks ever run at once.
	tiles [][]float32
	busy  []atomic.Bool
	k     int
	// panel is the widened panel of a product of many rows.
	panel []float32
	// deq is the panel's widening in flight, run by deqFn (dequantize,
	// stored once so that a split allocates nothing).
	deq struct {
		dst            []float32
		blocks, scales []uint8
	}
	deqFn func(lo, hi int)
}

// mulMXFP4 computes out[rows, n] = x[rows, k]·Wᵀ (+ beta·out, beta 0 or 1)
// for the MXFP4 weight w [n, k]: see above.
func (p *Products) mulMXFP4(out, x []float32, w tensor.Matrix, rows int, beta float32) {
	n, k := w.Rows, w.Cols
	if rows <= tensor.FewRows {
		units := (n + mmBlock - 1) / mmBlock
		chunks := min(p.chunks(rows, n, k), units)
		p.mx.reserve(chunks, k)
		p.job = productJob{out: out, x: x, w: w, rows: rows, n: n, k: k, ldo: n, beta: beta}
		tensor.ParallelChunks(units, chunks, p.fn)
		p.job = productJob{}
		return
	}
	pr := min(n, max(mmBlock, mxfp4PanelValues/max(k, 1)/mmBlock*mmBlock))
	if len(p.mx.panel) < pr*k {
		p.mx.panel = make([]float32, pr*k)
	}
	for n0 := 0; n0 < n; n0 += pr {
		n1 := min(n0+pr, n)
		sub := w.RowRange(n0, n1)
		panel := p.mx.panel[:(n1-n0)*k]
		p.mx.deq.dst, p.mx.deq.blocks, p.mx.deq.scales = panel, sub.Blocks, sub.Scales
		tensor.Parallel(len(sub.Scales), mxfp4DeqChunk, p.mx.deqFn)
		p.job = productJob{out: out[n0:], x: x, w: tensor.F32Matrix(panel, n1-n0, k), rows: rows, n: n1 - n0, k: k, ldo: n, beta: beta}
		tensor.ParallelChunks((n1-n0+mmBlock-1)/mmBlock, p.chunks(rows, n1-n0, k), p.fn)
	}
	p.job = productJob{}
	p.mx.deq.dst, p.mx.deq.blocks, p.mx.deq.scales = nil, nil, nil
}

// chunkMXFP4 computes the output features of blocks [lo, hi) (of mmBlock
// features) of p.job, a few-row product over an MXFP4 weight: a tile of
// mxfp4Tile weight rows widened at a time, then DotRows over it.
func (p *Products) chunkMXFP4(lo, hi int) {
	j := &p.job
	lo *= mmBlock
	hi = min(hi*mmBlock, j.n)
	slot := p.mx.claim()
	tile := p.mx.tile(slot)
	x := j.x[:j.rows*j.k]
	for r := lo; r < hi; r += mxfp4Tile {
		e := min(r+mxfp4Tile, hi)
		sub := j.w.RowRange(r, e)
		t := tile[:(e-r)*j.k]
		tensor.MXFP4ToF32(t, sub.Blocks, sub.Scales)
		DotRows(j.out[r:], j.ldo, x, j.k, t, j.k, j.rows, e-r, j.k, j.beta != 0)
	}
	p.mx.busy[slot].Store(false)
}

// reserve makes room for chunks few-row chunks over a weight of k columns:
// a claim slot for each, and tiles for as many as run at once.
func (s *mxfp4Scratch) reserve(chunks, k int) {
	if k != s.k {
		s.tiles, s.busy, s.k = nil, nil, k
	}
	if len(s.busy) < chunks {
		s.busy = make([]atomic.Bool, chunks)
		s.tiles = append(s.tiles, make([][]float32, chunks-len(s.tiles))...)
	}
	for i := range min(chunks, tensor.Workers()) {
		s.tile(i)
	}
}

// claim returns a slot no other chunk holds, marked busy. Every chunk holds
// at most one slot and there is one per chunk, so a free one is always
// found.
func (s *mxfp4Scratch) claim() int {
	for {
		for i := range s.busy {
			if !s.busy[i].Load() && s.busy[i].CompareAndSwap(false, true) {
				return i
			}
		}
	}
}

// tile returns slot i's tile, making it on first use.
func (s *mxfp4Scratch) tile(i int) []float32 {
	if s.tiles[i] == nil {
		s.tiles[i] = make([]float32, mxfp4Tile*s.k)
	}
	return s.tiles[i]
}

// dequantize widens blocks [lo, hi) of the panel in flight, in pieces of
// mxfp4DeqChunk blocks, which MXFP4ToF32 runs on the calling goroutine
// (it would split a larger piece again, through a closure it allocates).
func (s *mxfp4Scratch) dequantize(lo, hi int) {
	d := &s.deq
	const bl = tensor.MXFP4Block
	for a := lo; a < hi; a += mxfp4DeqChunk {
		b := min(a+mxfp4DeqChunk, hi)
		tensor.MXFP4ToF32(d.dst[a*bl:b*bl], d.blocks[a*bl/2:b*bl/2], d.scales[a:b])
	}
}
