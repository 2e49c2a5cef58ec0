package kernel

import "unsafe"

// panelLoop is the packed GEMM's loop, written once for the two packed
// products: Sgemm (and SgemmHalf, which is Sgemm with its own B packing)
// over float32 words, and GemmBF16 over bfloat16 pairs packed as uint32
// words. A product sets its functions once (its micro-kernel and how it
// packs A and B) and, per call, its blocks (plan); run then walks the row
// blocks, packing each block's A panels and computing its output units,
// both split over the workers. Everything the two products do alike (the
// blocking, the order of the k steps, the tiles, C's edges) is here, so
// that they cannot drift apart; what differs (the words, the kernels, the
// packings, Sgemm's alpha and beta) is in the functions.
type panelLoop[W float32 | uint32] struct {
	mr, nr int // the micro-tile

	// kernel computes one mr x nr tile from a packed A panel and a packed B
	// panel of kc words each along the depth: c = alpha·a·b + beta·c (c read
	// only when load is 1) where scaled is true, else c = a·b, or c += a·b
	// when load is 1 (alpha and beta are then 1 and ignored).
	kernel func(kc int, a, b *W, c *float32, ldc int, alpha, beta float32, load int)
	scaled bool
	// packA packs the A micro-panels [lo, hi) of the row block (ic, mcb),
	// for every k step, into ap: step pc's panel p at ap[pc*mcp+p*mr*kcb],
	// mcp being the block's rows rounded up to whole panels. c is the
	// packing chunk's index, for scratch of its own.
	packA func(c, lo, hi int)
	// packB returns compute unit u's B micro-panels of the k step [pc,
	// pc+kcb), panel after panel, each kcb groups of nr words: packed into
	// own (the computing chunk's part of bp), or packed beforehand.
	packB func(own []W, u, pc, kcb int) []W

	computeFn func(c, lo, hi int) // compute, as a value made once

	// The product in progress: C (m x n, row stride ldc) over a depth of
	// kd words, in steps of kc; alpha and beta (1 and 1 or 0 when not
	// scaled: beta 1 accumulates into C).
	m, n, kd     int
	c            []float32
	ldc          int
	alpha, beta  float32
	kc           int
	unitPanels   int // B micro-panels per compute unit
	apBuf, bpBuf []W // backing arrays of ap and bp
	ap, bp       []W // packed A block, the chunks' packed B steps (aligned)
	// tiles holds each computing chunk's tile buffer for C's edges: on
	// compute's stack it would escape to the heap on every call, through
	// the kernel called as a function value.
	tiles []float32

	// The row block in progress.
	ic, mcb int
}

// setup sets the loop's tile and functions; p must stay where it is (the
// computing function is a method value bound to it).
func (p *panelLoop[W]) setup(mr, nr int, scaled bool, kernel func(int, *W, *W, *float32, int, float32, float32, int), packA func(c, lo, hi int), packB func([]W, int, int, int) []W) {
	p.mr, p.nr, p.scaled = mr, nr, scaled
	p.kernel, p.packA, p.packB = kernel, packA, packB
	p.computeFn = p.compute
}

// plan sets up a product of C (m x n, row stride ldc) over a depth of kd
// words (k values: the parallel threshold counts multiply-adds): its
// blocks (planBlocks: steps of at most kcMax words, row blocks whose packed
// A fits stepWords per step and aWords in all) and its packing buffers. It
// returns the blocks and the workers the product runs on: 1 for a product
// too small to split or without a runner.
func (p *panelLoop[W]) plan(par Runner, workers, m, n, k, kd, kcMax, stepWords, aWords int, c []float32, ldc int, alpha, beta float32) (blocks, int) {
	if par == nil || m*n*k < gemmParallelMin {
		workers = 1
	}
	bl := planBlocks(m, n, kd, kcMax, stepWords, aWords, p.mr, p.nr, workers)
	p.m, p.n, p.kd, p.c, p.ldc, p.alpha, p.beta = m, n, kd, c, ldc, alpha, beta
	p.kc, p.unitPanels = bl.kc, bl.unitPanels
	p.ap = grow(&p.apBuf, bl.mc*kd)
	p.bp = grow(&p.bpBuf, bl.chunks*bl.kc*bl.unitPanels*p.nr)
	if n := bl.chunks * maxTile; len(p.tiles) < n {
		p.tiles = make([]float32, n)
	}
	return bl, workers
}

// run computes the planned product: for each row block of A, its A panels
// are packed (more chunks than workers: a worker that starts late on a
// busy machine leaves its share to the others), then its compute units
// run, concurrently when workers > 1.
func (p *panelLoop[W]) run(par Runner, workers int, bl blocks) {
	for ic := 0; ic < p.m; ic += bl.mc {
		p.ic, p.mcb = ic, min(bl.mc, p.m-ic)
		aPanels := ceilDiv(p.mcb, p.mr)
		if workers > 1 {
			par(aPanels, 4*workers, p.packA)
			par(bl.units, bl.chunks, p.computeFn)
		} else {
			p.packA(0, 0, aPanels)
			p.compute(0, 0, bl.units)
		}
	}
	p.c = nil
}

// compute computes the compute units [lo, hi) of the current row block,
// one after another, over all of the depth, with chunk c's part of bp for
// their B micro-panels: every A panel of a step by one B micro-panel at a
// time, into C directly where the tile is whole and through a tile buffer
// at C's edges. The first step applies the product's beta; the later ones
// add to C.
func (p *panelLoop[W]) compute(c, lo, hi int) {
	mr, nr := p.mr, p.nr
	mcp := roundUp(p.mcb, mr)
	aPanels := mcp / mr
	panels := ceilDiv(p.n, nr)
	own := p.bp[c*p.kc*p.unitPanels*nr:][:p.kc*p.unitPanels*nr]
	tile := p.tiles[c*maxTile:][:maxTile]
	for u := lo; u < hi; u++ {
		q0 := u * p.unitPanels
		q1 := min(q0+p.unitPanels, panels)
		for pc := 0; pc < p.kd; pc += p.kc {
			kcb := min(p.kc, p.kd-pc)
			beta := p.beta
			if pc > 0 {
				beta = 1
			}
			load := 0
			if beta != 0 {
				load = 1
			}
			bp := p.packB(own, u, pc, kcb)
			ap := p.ap[pc*mcp:][:mcp*kcb]
			for q := q0; q < q1; q++ {
				b := bp[(q-q0)*kcb*nr:][:kcb*nr]
				j0 := q * nr
				cols := min(nr, p.n-j0)
				for i := 0; i < aPanels; i++ {
					i0 := p.ic + i*mr
					rows := min(mr, p.m-i0)
					a := &ap[i*mr*kcb]
					if rows == mr && cols == nr {
						p.kernel(kcb, a, &b[0], &p.c[i0*p.ldc+j0], p.ldc, p.alpha, beta, load)
						continue
					}
					p.kernel(kcb, a, &b[0], &tile[0], nr, 1, 0, 0)
					p.edge(tile, i0, j0, rows, cols, beta, load)
				}
			}
		}
	}
}

// edge writes the rows x cols corner of a tile (row stride nr) computed
// into the tile buffer to C at (i0, j0), as the kernel would have: alpha·T,
// or alpha·T + beta·C when load is 1, where scaled; else T, or C + T.
func (p *panelLoop[W]) edge(tile []float32, i0, j0, rows, cols int, beta float32, load int) {
	for r := 0; r < rows; r++ {
		cr := p.c[(i0+r)*p.ldc+j0:][:cols]
		tr := tile[r*p.nr:][:cols]
		switch {
		case !p.scaled && load == 0:
			copy(cr, tr)
		case !p.scaled:
			for j, v := range tr {
				cr[j] += v
			}
		case load == 0:
			for j, v := range tr {
				cr[j] = p.alpha * v
			}
		default:
			for j, v := range tr {
				cr[j] = p.alpha*v + beta*cr[j]
			}
		}
	}
}

// grow returns a 64-byte-aligned slice of n words from *buf, reallocating
// it when it is too small.
func grow[W float32 | uint32](buf *[]W, n int) []W {
	if len(*buf) < n+gemmAlign {
		*buf = make([]W, n+gemmAlign)
	}
	off := int(uintptr(unsafe.Pointer(&(*buf)[0]))&63) / 4
	if off != 0 {
		off = gemmAlign - off
	}
	return (*buf)[off : off+n]
}
