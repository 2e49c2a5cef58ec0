package kernel

import (
	"fmt"
	"unsafe"
)

// The bfloat16 dot-product GEMM (GemmBF16): C (+)= A·Bᵀ with A float32
// activations rounded to bfloat16 as they are packed and B a bfloat16
// weight [n, k], multiplied with AVX512_BF16's VDPBF16PS, which adds two
// bfloat16 products to each float32 lane per instruction: twice the float32
// FMA rate on the same registers. Both operands are packed as bfloat16
// pairs along k, one 32-bit word per pair (the element of even k in the low
// half, as the instruction pairs them); an odd k ends in a pair whose upper
// half is zero in both A and B.
//
// The blocking is Sgemm's, counted in pairs: a block of A's rows is packed
// once over all of k into 14-row micro-panels, the output columns are split
// into compute units of at most gemmUnitPanels micro-panels of 32 columns,
// which run concurrently, and a unit walks k in steps of at most dotKC
// pairs, packing its B micro-panels of the step (dotKC·32 words, 32 KiB,
// which stay in the L1 cache) and multiplying every A panel of the step by
// one B micro-panel at a time.
const (
	dotMR, dotNR = 14, 32
	dotKC        = 256 // k pairs in a step
)

// dotGemm is the state of GemmBF16, kept in its Gemm so that a warm product
// allocates nothing.
type dotGemm struct {
	// The packed GEMM's loop (panels.go), over bfloat16 pairs as uint32
	// words: the tile, C, the depth in pairs, blocks and packed panels.
	panelLoop[uint32]

	// stepWords and aWords bound the packed A of one k step and of a row
	// block (gemmStepFloats and gemmAFloats words; tests make them small).
	stepWords, aWords int

	rowBuf, rows []uint32 // rounded A rows, a panel's per packing chunk

	// The product in progress.
	k, kp    int // kp: pairs, ceil(k/2)
	a        []float32
	b        []uint16
	lda, ldb int
}

// newDotGemm returns GemmBF16's state with Sgemm's block sizes.
func newDotGemm() *dotGemm {
	d := &dotGemm{stepWords: gemmStepFloats, aWords: gemmAFloats}
	d.panelLoop.setup(dotMR, dotNR, false, dotTile, d.packAChunk, d.unitB)
	return d
}

// dotTile is the loop's kernel: dotKernel, which adds to C when load is 1
// and takes no alpha or beta.
func dotTile(kp int, a, b *uint32, c *float32, ldc int, _, _ float32, load int) {
	dotKernel(kp, a, b, c, ldc, load)
}

// GemmBF16 computes C = A·Bᵀ, or C += A·Bᵀ when acc is true, for A [m, k]
// float32 (row stride lda), B [n, k] bfloat16 (row stride ldb: a Hugging
// Face Linear weight [out, in]) and C [m, n] float32 (row stride ldc): the
// prefill product x·Wᵀ. A's values are rounded to the nearest bfloat16
// (ties to even, as VCVTNEPS2BF16 rounds) as they are packed, and every
// product of two bfloat16 values is exact in float32 and accumulated in
// float32 by VDPBF16PS (which treats bfloat16 subnormals as zero and
// flushes subnormal sums to zero). When acc is false, C is not read. Large
// products are split over up to workers concurrent chunks run by par (nil
// runs everything on the calling goroutine).
//
// It runs only where HasGemmBF16 reports true; the caller checks, and the
// buffers' lengths.
func (g *Gemm) GemmBF16(par Runner, workers int, m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int, acc bool) {
	if m <= 0 || n <= 0 {
		return
	}
	if ldc < n || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("tensor: GemmBF16 C too short (%d) for m=%d n=%d ldc=%d", len(c), m, n, ldc))
	}
	if !HasGemmBF16() {
		panic("tensor: GemmBF16 on a processor without AVX512_BF16")
	}
	if k <= 0 {
		if !acc {
			scaleRows(c, ldc, m, n, 0)
		}
		return
	}
	if g.dot == nil {
		g.dot = newDotGemm()
	}
	d := g.dot
	d.k, d.kp = k, ceilDiv(k, 2)
	d.a, d.lda, d.b, d.ldb = a, lda, b, ldb
	var beta float32 // 1: C += A·Bᵀ from the first k step on
	if acc {
		beta = 1
	}
	bl, workers := d.plan(par, workers, m, n, k, d.kp, dotKC, d.stepWords, d.aWords, c, ldc, 1, beta)
	// Each packing chunk rounds the rows of one A panel at a time into its
	// own part of rows.
	d.rows = grow(&d.rowBuf, 4*workers*dotMR*d.kp)
	d.run(par, workers, bl)
	d.a, d.b = nil, nil
}

// packAChunk is the loop's packA: the A micro-panels [lo, hi) of the
// current row block, for every k step, using chunk c's part of rows: a
// panel's rows are rounded to bfloat16 pairs (kp words a row, the odd k's
// pair padded with a zero), then transposed into step pc's panel p at
// ap[pc*mcp+p*mr*kcb], mcp being the block's rows rounded up to whole
// panels.
func (d *dotGemm) packAChunk(c, lo, hi int) {
	kp := d.kp
	mcp := roundUp(d.mcb, dotMR)
	rows := d.rows[c*dotMR*kp:][:dotMR*kp]
	for p := lo; p < hi; p++ {
		i0 := d.ic + p*dotMR
		nr := min(dotMR, d.m-i0)
		for r := 0; r < nr; r++ {
			w := u16s(rows[r*kp:][:kp])
			F32ToBF16(w, d.a[(i0+r)*d.lda:][:d.k])
			if d.k%2 == 1 {
				w[d.k] = 0
			}
		}
		for pc := 0; pc < kp; pc += d.kc {
			kcb := min(d.kc, kp-pc)
			packTranspose(f32s(d.ap[pc*mcp+p*dotMR*kcb:][:kcb*dotMR]), f32s(rows), kp, 0, pc, nr, kcb, dotMR)
		}
	}
}

// packB packs the B micro-panels [q0, q1) of the k step of pairs [pc,
// pc+kcb) into dst, panel after panel, each kcb groups of 32 pairs (one a
// column), the missing columns as zeros.
func (d *dotGemm) packB(dst []uint32, q0, q1, pc, kcb int) {
	// Pairs wholly inside k; an odd k's last pair is (b[k-1], 0).
	full := min(kcb, d.k/2-pc)
	for q := q0; q < q1; q++ {
		j0 := q * dotNR
		cols := min(dotNR, d.n-j0)
		out := dst[(q-q0)*kcb*dotNR:][:kcb*dotNR]
		if full > 0 && d.ldb%2 == 0 {
			// Rows start on whole pairs: B viewed as 32-bit words is
			// transposed as Sgemm transposes float32 (packT8's AVX2
			// shuffles move the bits unchanged).
			packTranspose(f32s(out[:full*dotNR]), f32s(u32s(d.b)), d.ldb/2, j0, pc, cols, full, dotNR)
		} else {
			for p := 0; p < full; p++ {
				o := out[p*dotNR:][:dotNR]
				for r := 0; r < cols; r++ {
					s := d.b[(j0+r)*d.ldb+2*(pc+p):][:2]
					o[r] = uint32(s[0]) | uint32(s[1])<<16
				}
				clear(o[cols:])
			}
		}
		if full < kcb {
			o := out[full*dotNR:][:dotNR]
			for r := 0; r < cols; r++ {
				o[r] = uint32(d.b[(j0+r)*d.ldb+d.k-1])
			}
			clear(o[cols:])
		}
	}
}

// unitB is the loop's packB: compute unit u's B micro-panels of the k step
// of pairs [pc, pc+kcb), packed into own.
func (d *dotGemm) unitB(own []uint32, u, pc, kcb int) []uint32 {
	q0 := u * d.unitPanels
	d.packB(own, q0, min(q0+d.unitPanels, ceilDiv(d.n, dotNR)), pc, kcb)
	return own
}

// The packings move bfloat16 pairs as 32-bit words, through the float32
// transposes (which copy bits) and the conversions' uint16 views; these
// views share the memory of x. A float32 or uint32 view of uint16s may
// start at an odd multiple of 2 bytes, which amd64 loads without fault.

func f32s(x []uint32) []float32 {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&x[0])), len(x))
}

func u16s(x []uint32) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(&x[0])), 2*len(x))
}

// u32s views x as len(x)/2 words: word i holds x[2i] in its low half.
func u32s(x []uint16) []uint32 {
	if len(x) < 2 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&x[0])), len(x)/2)
}
