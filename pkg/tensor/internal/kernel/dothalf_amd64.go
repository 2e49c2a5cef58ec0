//go:build !purego

package kernel

import "golang.org/x/sys/cpu"

// dotBF16x4AVX512 multiplies up to six rows x, x+ldx, ... (rows of them) by
// n4 (a positive multiple of 4) bfloat16 weight rows w[j*ldw : j*ldw+k],
// four at a time, into out[i*ldo+j] (see dothalf_amd64.s).
//
//go:noescape
func dotBF16x4AVX512(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, n4, k, rows, acc int)

// dotF16x4AVX512 is dotBF16x4AVX512 for binary16 weights.
//
//go:noescape
func dotF16x4AVX512(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, n4, k, rows, acc int)

// dotBF16x2AVX2 is dotBF16x4AVX512 with AVX2 and FMA for up to three rows,
// two weight rows at a time (n2 a positive multiple of 2), with the same
// results bit for bit.
//
//go:noescape
func dotBF16x2AVX2(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, n2, k, rows, acc int)

// dotF16x2AVX2 is dotBF16x2AVX2 for binary16 weights (F16C).
//
//go:noescape
func dotF16x2AVX2(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, n2, k, rows, acc int)

// halfDotKernel is the signature of the assembly bodies above.
type halfDotKernel func(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)

// halfDotTile returns the assembly body for weights of format h on this
// processor and its tile (the most rows and the weight rows it takes at a
// time), or nil.
func halfDotTile(h Half) (kern halfDotKernel, rows, cols int) {
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL:
		if h == BF16 {
			return dotBF16x4AVX512, 6, 4
		}
		return dotF16x4AVX512, 6, 4
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA && h == BF16:
		return dotBF16x2AVX2, 3, 2
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C:
		return dotF16x2AVX2, 3, 2
	}
	return nil, 0, 0
}

// dotRowsHalfAsm reports whether DotRowsBF16 (f16: DotRowsF16) runs in
// assembly here.
func dotRowsHalfAsm(h Half) bool {
	kern, _, _ := halfDotTile(h)
	return kern != nil
}

// dotRowsHalfVec computes dotRowsHalf in assembly when the processor allows
// and reports whether it did. Weight rows go in blocks of about 16 KiB,
// which stay in the L1 cache while every group of rows reads them. The last
// n%cols weight rows go through the kernel again with the last full tile
// (or, when n < cols, one weight row repeated cols times) into a stack
// tile: each element's operations are the same wherever it is computed.
func dotRowsHalfVec(h Half, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) bool {
	kern, rt, ct := halfDotTile(h)
	if kern == nil || k == 0 {
		return false
	}
	dotRowsHalfTiles(kern, rt, ct, out, ldo, x, ldx, w, ldw, m, n, k, acc)
	return true
}

// dotRowsHalfTiles runs dotRowsHalf through the assembly body kern, whose
// tiles are rt rows by ct weight rows.
func dotRowsHalfTiles(kern halfDotKernel, rt, ct int, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
	a := 0
	if acc {
		a = 1
	}
	nc := n - n%ct
	nb := max(ct, 8192/ldw/ct*ct)
	for c0 := 0; c0 < nc; c0 += nb {
		c1 := min(c0+nb, nc)
		for i := 0; i < m; i += rt {
			kern(&x[i*ldx], ldx, &w[c0*ldw], ldw, &out[i*ldo+c0], ldo, c1-c0, k, min(rt, m-i), a)
		}
	}
	if nc == n {
		return
	}
	// tile holds rows [i, i+r) of cols weight rows starting at weight row
	// b (all weight row j when stride 0); copy columns [c, c+t) of it to
	// out's columns [j, j+t).
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
			kern(&x[i*ldx], ldx, &w[(n-ct)*ldw], ldw, &tile[0], ct, ct, k, r, 0)
			put(i, r, nc-(n-ct), nc, n-nc)
			continue
		}
		for j := 0; j < n; j++ {
			kern(&x[i*ldx], ldx, &w[j*ldw], 0, &tile[0], ct, ct, k, r, 0)
			put(i, r, 0, j, 1)
		}
	}
}
