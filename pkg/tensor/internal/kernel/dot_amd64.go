//go:build !purego

package kernel

import "golang.org/x/sys/cpu"

// dotRows3AVX2 is the AVX2/FMA body of dotRows (see small_amd64.s).
//
//go:noescape
func dotRows3AVX2(x0, x1, x2, w, out *float32, ldo, n4, k, rows, acc, ldw int)

// dotRows6AVX512 is dotRows3AVX2 for six rows x[i*ldx], i < 6, using the 32
// vector registers of AVX-512VL, with bit-identical results (see
// dot_amd64.s).
//
//go:noescape
func dotRows6AVX512(x *float32, ldx int, w, out *float32, ldo, n4, k, acc, ldw int)

// dotRowsVec computes the columns [0, n&^3) of dotRows with AVX2 and FMA,
// when the processor has them, and returns how many columns it computed.
// Where the processor has AVX-512VL, rows go six at a time through
// dotRows6AVX512, the rest three at a time.
func dotRowsVec(out []float32, ldo int, x []float32, ldx int, w []float32, ldw int, m, n, k int, acc bool) int {
	n4 := n &^ 3
	if n4 == 0 || k == 0 || !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		return 0
	}
	a := 0
	if acc {
		a = 1
	}
	// Column blocks of at most ~16 KiB of weights stay in the L1 cache while
	// every group of three rows reads them.
	nb := max(4, (4096/ldw)&^3)
	// With AVX-512VL: groups of six rows, then the rest three at a time.
	six := 0
	if m >= 6 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL {
		six = m - m%6
	}
	for c0 := 0; c0 < n4; c0 += nb {
		c1 := min(c0+nb, n4)
		for i := 0; i < six; i += 6 {
			dotRows6AVX512(&x[i*ldx], ldx, &w[c0*ldw], &out[i*ldo+c0], ldo, c1-c0, k, a, ldw)
		}
		for i := six; i < m; i += 3 {
			r := min(3, m-i)
			x0 := &x[i*ldx]
			x1, x2 := x0, x0
			if r > 1 {
				x1 = &x[(i+1)*ldx]
			}
			if r > 2 {
				x2 = &x[(i+2)*ldx]
			}
			dotRows3AVX2(x0, x1, x2, &w[c0*ldw], &out[i*ldo+c0], ldo, c1-c0, k, r, a, ldw)
		}
	}
	return n4
}

// wsumAVX2 is the AVX2/FMA body of WeightedSum (see dot_amd64.s).
//
//go:noescape
func wsumAVX2(out, p, v *float32, ldv, n, k8, acc int)

// wsumAVX512 is WeightedSum with AVX-512, every column included (see
// dot_amd64.s).
//
//go:noescape
func wsumAVX512(out, p, v *float32, ldv, n, k, acc int)

// wsum8AVX512 is wsumAVX512 for at most eight columns, in eight-lane
// registers (see dot_amd64.s).
//
//go:noescape
func wsum8AVX512(out, p, v *float32, ldv, n, k, acc int)

// wsumVec computes the columns of WeightedSum it can with vector
// instructions and returns how many: all of them with AVX-512 (the last
// sixteen through a mask), else [0, k&^7) with AVX2 and FMA, when the
// processor has them.
func wsumVec(out, p, v []float32, ldv, n, k int, acc bool) int {
	if n == 0 || k == 0 {
		return 0
	}
	a := 0
	if acc {
		a = 1
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL {
		if k <= 8 {
			wsum8AVX512(&out[0], &p[0], &v[0], ldv, n, k, a)
		} else {
			wsumAVX512(&out[0], &p[0], &v[0], ldv, n, k, a)
		}
		return k
	}
	k8 := k &^ 7
	if k8 == 0 || !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		return 0
	}
	wsumAVX2(&out[0], &p[0], &v[0], ldv, n, k8, a)
	return k8
}
