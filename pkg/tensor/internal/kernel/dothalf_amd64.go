//go:build !purego

package kernel

import "golang.org/x/sys/cpu"

// dotBF16x4AVX512 multiplies up to six rows x, x+ldx, ... (rows of them) by
// nc (a positive multiple of 4) bfloat16 weight rows w[j*ldw : j*ldw+k],
// four at a time, into out[i*ldo+j] (see dothalf_amd64.s).
//
//go:noescape
func dotBF16x4AVX512(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)

// dotF16x4AVX512 is dotBF16x4AVX512 for binary16 weights.
//
//go:noescape
func dotF16x4AVX512(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)

// dotBF16x8r3AVX512 is dotBF16x4AVX512 for exactly eight rows (rows is
// ignored), three weight rows at a time (nc a positive multiple of 3), with
// the same results bit for bit.
//
//go:noescape
func dotBF16x8r3AVX512(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)

// dotF16x8r3AVX512 is dotBF16x8r3AVX512 for binary16 weights.
//
//go:noescape
func dotF16x8r3AVX512(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)

// dotBF16x2AVX2 is dotBF16x4AVX512 with AVX2 and FMA for up to three rows,
// two weight rows at a time (nc a positive multiple of 2), with the same
// results bit for bit.
//
//go:noescape
func dotBF16x2AVX2(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)

// dotF16x2AVX2 is dotBF16x2AVX2 for binary16 weights (F16C).
//
//go:noescape
func dotF16x2AVX2(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)

// halfBody names one of the assembly bodies above (a value, not a
// function value: an indirect call would make the operands escape).
type halfBody uint8

const (
	noHalfBody halfBody = iota
	bf16x4AVX512
	f16x4AVX512
	bf16x8r3AVX512
	f16x8r3AVX512
	bf16x2AVX2
	f16x2AVX2
)

// tile returns the most rows and the weight rows b takes at a time (the
// eight-row bodies take exactly eight rows).
func (b halfBody) tile() (rows, cols int) {
	switch b {
	case bf16x4AVX512, f16x4AVX512:
		return 6, 4
	case bf16x8r3AVX512, f16x8r3AVX512:
		return 8, 3
	}
	return 3, 2
}

// eightRows returns the eight-row body that goes with the AVX-512 body b,
// or noHalfBody.
func (b halfBody) eightRows() halfBody {
	switch b {
	case bf16x4AVX512:
		return bf16x8r3AVX512
	case f16x4AVX512:
		return f16x8r3AVX512
	}
	return noHalfBody
}

// run calls the body b.
func (b halfBody) run(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int) {
	switch b {
	case bf16x4AVX512:
		dotBF16x4AVX512(x, ldx, w, ldw, out, ldo, nc, k, rows, acc)
	case f16x4AVX512:
		dotF16x4AVX512(x, ldx, w, ldw, out, ldo, nc, k, rows, acc)
	case bf16x8r3AVX512:
		dotBF16x8r3AVX512(x, ldx, w, ldw, out, ldo, nc, k, rows, acc)
	case f16x8r3AVX512:
		dotF16x8r3AVX512(x, ldx, w, ldw, out, ldo, nc, k, rows, acc)
	case bf16x2AVX2:
		dotBF16x2AVX2(x, ldx, w, ldw, out, ldo, nc, k, rows, acc)
	case f16x2AVX2:
		dotF16x2AVX2(x, ldx, w, ldw, out, ldo, nc, k, rows, acc)
	}
}

// halfDotBody returns the assembly body for weights of format h on this
// processor, or noHalfBody.
func halfDotBody(h Half) halfBody {
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL:
		if h == BF16 {
			return bf16x4AVX512
		}
		return f16x4AVX512
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA && h == BF16:
		return bf16x2AVX2
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C:
		return f16x2AVX2
	}
	return noHalfBody
}

// dotRowsHalfAsm reports whether DotRowsBF16 (f16: DotRowsF16) runs in
// assembly here.
func dotRowsHalfAsm(h Half) bool { return halfDotBody(h) != noHalfBody }

// dotRowsHalfVec computes dotRowsHalf in assembly when the processor allows
// and reports whether it did: with AVX-512, rows eight at a time through
// the eight-row body, the rest six at a time. Every body computes each
// element with the same operations.
func dotRowsHalfVec(h Half, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) bool {
	b := halfDotBody(h)
	if b == noHalfBody || k == 0 {
		return false
	}
	m8 := 0
	if b8 := b.eightRows(); b8 != noHalfBody && m >= 8 {
		m8 = m &^ 7
		dotRowsHalfTiles(b8, out, ldo, x, ldx, w, ldw, m8, n, k, acc)
	}
	if m8 < m {
		dotRowsHalfTiles(b, out[m8*ldo:], ldo, x[m8*ldx:], ldx, w, ldw, m-m8, n, k, acc)
	}
	return true
}

// dotRowsHalfTiles runs dotRowsHalf through the assembly body b (m a
// multiple of 8 for the eight-row bodies). Weight rows go in blocks of about
// 16 KiB, which stay in the L1 cache while every group of rows reads them.
// The last n%cols weight rows go through the body again with the last full
// tile (or, when n < cols, one weight row repeated cols times) into a stack
// tile: each element's operations are the same wherever it is computed.
func dotRowsHalfTiles(b halfBody, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
	rt, ct := b.tile()
	a := 0
	if acc {
		a = 1
	}
	nc := n - n%ct
	nb := max(ct, 8192/ldw/ct*ct)
	for c0 := 0; c0 < nc; c0 += nb {
		c1 := min(c0+nb, nc)
		for i := 0; i < m; i += rt {
			b.run(&x[i*ldx], ldx, &w[c0*ldw], ldw, &out[i*ldo+c0], ldo, c1-c0, k, min(rt, m-i), a)
		}
	}
	if nc == n {
		return
	}
	// tile holds rows [i, i+r) times the ct weight rows of the last call;
	// put copies its columns [c, c+t) to out's columns [j, j+t), adding
	// the old outputs as the body would.
	var tile [6 * 4]float32
	put := func(i, r, c, j, t int) {
		for ii := 0; ii < r; ii++ {
			for q := 0; q < t; q++ {
				o := &out[(i+ii)*ldo+j+q]
				v := tile[ii*ct+c+q]
				if acc {
					v += *o
				}
				*o = v
			}
		}
	}
	for i := 0; i < m; i += rt {
		r := min(rt, m-i)
		if n >= ct {
			b.run(&x[i*ldx], ldx, &w[(n-ct)*ldw], ldw, &tile[0], ct, ct, k, r, 0)
			put(i, r, nc-(n-ct), nc, n-nc)
			continue
		}
		for j := 0; j < n; j++ {
			b.run(&x[i*ldx], ldx, &w[j*ldw], 0, &tile[0], ct, ct, k, r, 0)
			put(i, r, 0, j, 1)
		}
	}
}
