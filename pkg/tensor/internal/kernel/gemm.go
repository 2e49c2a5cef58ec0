package kernel

import (
	"fmt"
	"unsafe"
)

// Sgemm's blocking. A block of rows of op(A) (all of them, for the models'
// products) is packed once, over all of k, into micro-panels of mr rows, and
// the output columns are split into units of at most gemmUnitPanels
// micro-panels of nr columns, which run concurrently. A unit walks k in steps
// of at most gemmKC: for each step it packs its columns of op(B) and
// multiplies every A panel of the step (at most gemmStepFloats, kept in the
// L2 cache) by one B micro-panel at a time (gemmKC·nr floats, 32 KiB for
// nr = 32, which stays in the L1 cache) into mr x nr tiles of C. So a product
// has two parallel phases (pack A, compute) per row block, and a worker that
// starts late on a busy machine holds up only the units it has taken. The
// loop itself is panelLoop (panels.go), which GemmBF16 runs too.
const (
	gemmKC         = 256
	gemmStepFloats = 1 << 18 // packed A of one k step: 1 MiB
	gemmAFloats    = 1 << 21 // packed A block: 8 MiB
	gemmAlign      = 16      // packed panels start on 64-byte boundaries
	maxTile        = 14 * 32 // the largest micro-tile, mr*nr
	gemmUnitPanels = 16      // most B micro-panels in a compute unit
	gemmBFloats    = 1 << 24 // most of op(B) packed once for all row blocks: 64 MiB
)

// Kernel kinds: which micro-kernel a Gemm runs.
const (
	kindGo     = iota // plain Go, 4 x 8
	kindAVX2          // AVX2/FMA assembly, 6 x 16
	kindAVX512        // AVX-512 assembly, 14 x 32
)

// tileShape returns the micro-tile of a kernel kind.
func tileShape(kind int) (mr, nr int) {
	switch kind {
	case kindAVX512:
		return 14, 32
	case kindAVX2:
		return 6, 16
	}
	return 4, 8
}

// Runner runs fn over chunks [0, n) split into at most chunks pieces,
// concurrently when it can, and returns when all are done; fn's first
// argument is the chunk's index. tensor.ParallelChunks is one.
type Runner func(n, chunks int, fn func(c, lo, hi int))

// Gemm computes single-precision matrix products (SGEMM). It owns the packing
// buffers, which grow to the largest product it has seen and are then reused:
// after warm-up a product allocates nothing. A Gemm serves one call at a time.
type Gemm struct {
	// The packed GEMM's loop (panels.go), over float32 words: the tile,
	// the product's C, depth (k), blocks and packed panels.
	panelLoop[float32]

	kind int

	// stepFloats and aFloats bound the packed A of one k step and of a row
	// block (gemmStepFloats and gemmAFloats; tests make them small).
	stepFloats, aFloats int

	bfBuf, bf []float32 // all of op(B) packed, when several row blocks share it

	// The product in progress.
	transA, transB bool
	a, b           []float32
	lda, ldb       int
	bh             []uint16 // op(B) in format bfmt instead of b (SgemmHalf)
	bfmt           Half

	dot *dotGemm // GemmBF16's state, made on its first call

	packBFn func(c, lo, hi int)
}

// NewGemm returns a Gemm that uses the fastest micro-kernel the processor
// supports: AVX-512 (14 x 32 tiles), else AVX2 with FMA (6 x 16), else Go.
func NewGemm() *Gemm { return newGemm(bestKind()) }

func newGemm(kind int) *Gemm {
	g := &Gemm{kind: kind, stepFloats: gemmStepFloats, aFloats: gemmAFloats}
	mr, nr := tileShape(kind)
	g.panelLoop.setup(mr, nr, true, g.tile, g.packAChunk, g.unitB)
	g.packBFn = g.packBChunk
	return g
}

// tile is the loop's kernel: g's micro-kernel on one tile.
func (g *Gemm) tile(k int, a, b, c *float32, ldc int, alpha, beta float32, load int) {
	microKernel(g.kind, k, a, b, c, ldc, alpha, beta, load)
}

// Vector reports whether g runs an assembly micro-kernel (otherwise a plain
// Go one, slower than gonum's vectorised BLAS).
func (g *Gemm) Vector() bool { return g.kind != kindGo }

// gemmParallelMin is the product size (multiply-adds) from which Sgemm hands
// chunks to the runner; smaller ones run on the calling goroutine.
const gemmParallelMin = 1 << 20

// Sgemm computes C = alpha*op(A)*op(B) + beta*C for row-major matrices, where
// op(X) is X or its transpose: op(A) is m x k, op(B) is k x n and C is m x n,
// with row strides lda, ldb and ldc as stored. When beta is 0, C is not read
// (NaNs in it are overwritten), as in BLAS. Large products are split over
// up to workers concurrent chunks of output columns run by par (nil runs
// everything on the calling goroutine). The buffers must be large enough;
// the caller checks them.
func (g *Gemm) Sgemm(par Runner, workers int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m <= 0 || n <= 0 {
		return
	}
	if ldc < n || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("tensor: Sgemm C too short (%d) for m=%d n=%d ldc=%d", len(c), m, n, ldc))
	}
	if k <= 0 || alpha == 0 {
		scaleRows(c, ldc, m, n, beta)
		return
	}
	g.transA, g.transB, g.a, g.b, g.lda, g.ldb = transA, transB, a, b, lda, ldb
	bl, workers := g.plan(par, workers, m, n, k, k, gemmKC, g.stepFloats, g.aFloats, c, ldc, alpha, beta)
	// Several row blocks (a tall op(A), such as a weight gradient's
	// vocabulary rows) would each pack op(B) again: pack it once for all.
	g.bf = nil
	if bf := bl.units * g.unitPanels * g.nr * k; m > bl.mc && bf <= gemmBFloats {
		g.bf = grow(&g.bfBuf, bf)
		if workers > 1 {
			par(bl.units, bl.chunks, g.packBFn)
		} else {
			g.packBChunk(0, 0, bl.units)
		}
	}
	g.run(par, workers, bl)
	g.a, g.b, g.bf = nil, nil, nil
}

// blocks is how a packed GEMM splits its work: kc steps of its depth per
// block, mc rows of A per block, and its B panels of nr columns grouped into
// units of unitPanels, handed out in chunks.
type blocks struct{ kc, mc, unitPanels, units, chunks int }

// planBlocks splits a GEMM of m rows, n columns and depth kd (k, or its
// pairs) with register tiles mr x nr over workers: blocks of near-equal
// size (300 steps are two of 150, not 256+44) of at most kcMax steps, row
// blocks whose packed A fits in stepWords per step and aWords in all, and
// four chunks of B panels per worker, so that a worker that starts late on
// a busy machine leaves its share to the others.
func planBlocks(m, n, kd, kcMax, stepWords, aWords, mr, nr, workers int) blocks {
	kc := ceilDiv(kd, ceilDiv(kd, kcMax))
	mcMax := max(mr, min(stepWords/kc, aWords/kd)/mr*mr)
	mc := roundUp(ceilDiv(m, ceilDiv(m, mcMax)), mr)
	panels := ceilDiv(n, nr)
	unitPanels := min(gemmUnitPanels, max(1, ceilDiv(panels, 4*workers)))
	units := ceilDiv(panels, unitPanels)
	return blocks{kc: kc, mc: mc, unitPanels: unitPanels, units: units, chunks: min(units, 4*workers)}
}

// packBChunk packs the B micro-panels of compute units [lo, hi) for every k
// step into bf: unit u's step pc at bf[(u*k+pc)*unitPanels*nr].
func (g *Gemm) packBChunk(_, lo, hi int) {
	for u := lo; u < hi; u++ {
		for pc := 0; pc < g.kd; pc += g.kc {
			g.packB(g.bf[(u*g.kd+pc)*g.unitPanels*g.nr:], u, pc, min(g.kc, g.kd-pc))
		}
	}
}

// unitB is the loop's packB: compute unit u's B micro-panels of the k step
// [pc, pc+kcb), packed into own, or where packBChunk packed them for all
// row blocks.
func (g *Gemm) unitB(own []float32, u, pc, kcb int) []float32 {
	if g.bf != nil {
		return g.bf[(u*g.kd+pc)*g.unitPanels*g.nr:]
	}
	g.packB(own, u, pc, kcb)
	return own
}

// packB packs compute unit u's B micro-panels of the k step [pc, pc+kcb)
// into dst, panel after panel, each kcb groups of nr values.
func (g *Gemm) packB(dst []float32, u, pc, kcb int) {
	nr := g.nr
	q0 := u * g.unitPanels
	q1 := min(q0+g.unitPanels, ceilDiv(g.n, nr))
	if g.bh != nil {
		g.packBHalf(dst, q0, q1, pc, kcb)
		return
	}
	if g.transB {
		for q := q0; q < q1; q++ {
			packTranspose(dst[(q-q0)*kcb*nr:], g.b, g.ldb, q*nr, pc, min(nr, g.n-q*nr), kcb, nr)
		}
		return
	}
	// The unit's panels of this step together: the rows of a row-major B
	// are then read whole.
	j0 := q0 * nr
	packRows(dst, g.b, g.ldb, pc, j0, kcb, min(q1*nr, g.n)-j0, nr)
}

// packAChunk is the loop's packA: the A micro-panels [lo, hi) of the
// current row block, for every k step: step pc's panel p is at
// ap[pc*mcp+p*mr*kcb], mcp being the block's rows rounded up to whole
// panels.
func (g *Gemm) packAChunk(_, lo, hi int) {
	mr := g.mr
	mcp := roundUp(g.mcb, mr)
	for pc := 0; pc < g.kd; pc += g.kc {
		kcb := min(g.kc, g.kd-pc)
		if g.transA {
			// Rows of the stored A are op(A)'s columns: read them whole.
			i0 := g.ic + lo*mr
			packRows(g.ap[pc*mcp+lo*mr*kcb:], g.a, g.lda, pc, i0, kcb, min(g.ic+hi*mr, g.m)-i0, mr)
			continue
		}
		for p := lo; p < hi; p++ {
			i0 := g.ic + p*mr
			rows := min(mr, g.m-i0)
			packTranspose(g.ap[pc*mcp+p*mr*kcb:], g.a, g.lda, i0, pc, rows, kcb, mr)
		}
	}
}

// packRows packs rows [r0, r0+kc) of x (stride ld), columns [c0, c0+cols),
// into consecutive panels of w columns, each kc groups of w values:
// dst[(j/w)*kc*w+p*w+j%w] = x[(r0+p)*ld+c0+j], the last panel's missing
// columns as zeros.
func packRows(dst, x []float32, ld, r0, c0, kc, cols, w int) {
	np := ceilDiv(cols, w)
	full := cols / w
	dst = dst[:np*kc*w]
	for p := 0; p < kc; p++ {
		src := x[(r0+p)*ld+c0:][:cols]
		for q := 0; q < full; q++ {
			copy(dst[q*kc*w+p*w:][:w], src[q*w:])
		}
		if full < np {
			d := dst[full*kc*w+p*w:][:w]
			n := copy(d, src[full*w:])
			clear(d[n:])
		}
	}
}

// packTranspose packs rows [r0, r0+rows) of the row-major matrix x (stride
// ld), columns [c0, c0+kc), into dst as kc groups of w values, dst[p*w+r] =
// x[(r0+r)*ld+c0+p], the missing rows r >= rows as zeros.
func packTranspose(dst, x []float32, ld, r0, c0, rows, kc, w int) {
	dst = dst[:kc*w]
	r := packT8(dst, x, ld, r0, c0, rows, kc, w)
	if kc8 := kc &^ 7; r > 0 && kc8 < kc {
		for i := 0; i < r; i++ {
			s := x[(r0+i)*ld+c0:][:kc]
			for p := kc8; p < kc; p++ {
				dst[p*w+i] = s[p]
			}
		}
	}
	for ; r+4 <= rows; r += 4 {
		s0 := x[(r0+r)*ld+c0:][:kc]
		s1 := x[(r0+r+1)*ld+c0:][:kc]
		s2 := x[(r0+r+2)*ld+c0:][:kc]
		s3 := x[(r0+r+3)*ld+c0:][:kc]
		for p := range s0 {
			d := dst[p*w+r:][:4]
			d[0], d[1], d[2], d[3] = s0[p], s1[p], s2[p], s3[p]
		}
	}
	for ; r < rows; r++ {
		s := x[(r0+r)*ld+c0:][:kc]
		for p, v := range s {
			dst[p*w+r] = v
		}
	}
	if rows < w {
		for p := 0; p < kc; p++ {
			clear(dst[p*w+rows : p*w+w])
		}
	}
}

// scaleRows sets C = beta*C, and C = 0 when beta is 0 (ignoring NaNs).
func scaleRows(c []float32, ldc, m, n int, beta float32) {
	for i := 0; i < m; i++ {
		r := c[i*ldc:][:n]
		if beta == 0 {
			clear(r)
			continue
		}
		if beta != 1 {
			for j := range r {
				r[j] *= beta
			}
		}
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func roundUp(a, b int) int { return ceilDiv(a, b) * b }

// microKernelGo computes the 4 x 8 tile C = alpha*A·B + beta*C (C read only
// when load is 1) from a packed A panel (k groups of 4) and a packed B panel
// (k groups of 8).
func microKernelGo(k int, a, b, c *float32, ldc int, alpha, beta float32, load int) {
	as := unsafe.Slice(a, 4*k)
	bs := unsafe.Slice(b, 8*k)
	var acc [4][8]float32
	for p := 0; p < k; p++ {
		av := as[4*p : 4*p+4 : 4*p+4]
		bv := bs[8*p : 8*p+8 : 8*p+8]
		for r := 0; r < 4; r++ {
			x := av[r]
			t := &acc[r]
			t[0] += x * bv[0]
			t[1] += x * bv[1]
			t[2] += x * bv[2]
			t[3] += x * bv[3]
			t[4] += x * bv[4]
			t[5] += x * bv[5]
			t[6] += x * bv[6]
			t[7] += x * bv[7]
		}
	}
	cs := unsafe.Slice(c, 3*ldc+8)
	for r := 0; r < 4; r++ {
		cr := cs[r*ldc : r*ldc+8 : r*ldc+8]
		for j := range cr {
			v := alpha * acc[r][j]
			if load != 0 {
				v += beta * cr[j]
			}
			cr[j] = v
		}
	}
}
