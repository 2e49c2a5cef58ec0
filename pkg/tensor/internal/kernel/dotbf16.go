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
	// stepWords and aWords bound the packed A of one k step and of a row
	// block (gemmStepFloats and gemmAFloats words; tests make them small).
	stepWords, aWords int

	apBuf, bpBuf, rowBuf []uint32
	ap, bp, rows         []uint32 // packed A block, packed B steps, rounded A rows

	// The product in progress.
	m, n, k, kp int // kp: pairs, ceil(k/2)
	a           []float32
	b           []uint16
	c           []float32
	lda, ldb    int
	ldc         int
	acc         bool

	// The row block in progress.
	ic, mcb, kc, unitPanels int

	packAFn, computeFn func(c, lo, hi int)
}

// newDotGemm returns GemmBF16's state with Sgemm's block sizes.
func newDotGemm() *dotGemm {
	d := &dotGemm{stepWords: gemmStepFloats, aWords: gemmAFloats}
	d.packAFn = d.packAChunk
	d.computeFn = d.computeChunk
	return d
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
	d.m, d.n, d.k, d.kp = m, n, k, ceilDiv(k, 2)
	d.a, d.lda, d.b, d.ldb, d.c, d.ldc, d.acc = a, lda, b, ldb, c, ldc, acc
	kp := d.kp
	if par == nil || m*n*k < gemmParallelMin {
		workers = 1
	}
	bl := planBlocks(m, n, kp, dotKC, d.stepWords, d.aWords, dotMR, dotNR, workers)
	kc, mc, units, chunks := bl.kc, bl.mc, bl.units, bl.chunks
	d.kc, d.unitPanels = kc, bl.unitPanels
	d.ap = growU32(&d.apBuf, mc*kp)
	d.bp = growU32(&d.bpBuf, chunks*kc*d.unitPanels*dotNR)
	// Each packing chunk rounds the rows of one A panel at a time into its
	// own part of rows.
	d.rows = growU32(&d.rowBuf, 4*workers*dotMR*kp)
	for ic := 0; ic < m; ic += mc {
		d.ic, d.mcb = ic, min(mc, m-ic)
		aPanels := ceilDiv(d.mcb, dotMR)
		if workers > 1 {
			par(aPanels, 4*workers, d.packAFn)
			par(units, chunks, d.computeFn)
		} else {
			d.packAChunk(0, 0, aPanels)
			d.computeChunk(0, 0, units)
		}
	}
	d.a, d.b, d.c = nil, nil, nil
}

// packAChunk packs the A micro-panels [lo, hi) of the current row block,
// for every k step, using chunk c's part of rows: a panel's rows are
// rounded to bfloat16 pairs (kp words a row, the odd k's pair padded with a
// zero), then transposed into step pc's panel p at ap[pc*mcp+p*mr*kcb],
// mcp being the block's rows rounded up to whole panels.
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

// computeChunk computes the compute units [lo, hi) of the current row
// block, one after another, over all of k, packing their B micro-panels
// into chunk c's part of bp.
func (d *dotGemm) computeChunk(c, lo, hi int) {
	mcp := roundUp(d.mcb, dotMR)
	aPanels := mcp / dotMR
	panels := ceilDiv(d.n, dotNR)
	bp := d.bp[c*d.kc*d.unitPanels*dotNR:][:d.kc*d.unitPanels*dotNR]
	var tile [dotMR * dotNR]float32
	for u := lo; u < hi; u++ {
		q0 := u * d.unitPanels
		q1 := min(q0+d.unitPanels, panels)
		for pc := 0; pc < d.kp; pc += d.kc {
			kcb := min(d.kc, d.kp-pc)
			load := 0
			if pc > 0 || d.acc {
				load = 1
			}
			d.packB(bp, q0, q1, pc, kcb)
			ap := d.ap[pc*mcp:][:mcp*kcb]
			for q := q0; q < q1; q++ {
				b := bp[(q-q0)*kcb*dotNR:][:kcb*dotNR]
				j0 := q * dotNR
				cols := min(dotNR, d.n-j0)
				for p := 0; p < aPanels; p++ {
					i0 := d.ic + p*dotMR
					rows := min(dotMR, d.m-i0)
					a := &ap[p*dotMR*kcb]
					if rows == dotMR && cols == dotNR {
						dotKernel(kcb, a, &b[0], &d.c[i0*d.ldc+j0], d.ldc, load)
						continue
					}
					dotKernel(kcb, a, &b[0], &tile[0], dotNR, 0)
					for r := 0; r < rows; r++ {
						cr := d.c[(i0+r)*d.ldc+j0:][:cols]
						tr := tile[r*dotNR:][:cols]
						if load == 0 {
							copy(cr, tr)
						} else {
							for j, v := range tr {
								cr[j] += v
							}
						}
					}
				}
			}
		}
	}
}

// growU32 is grow for words: a 64-byte-aligned slice of n words from *buf,
// reallocating it when it is too small.
func growU32(buf *[]uint32, n int) []uint32 {
	if len(*buf) < n+gemmAlign {
		*buf = make([]uint32, n+gemmAlign)
	}
	off := int(uintptr(unsafe.Pointer(&(*buf)[0]))&63) / 4
	if off != 0 {
		off = gemmAlign - off
	}
	return (*buf)[off : off+n]
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
