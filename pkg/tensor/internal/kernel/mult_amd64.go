//go:build !purego

package kernel

import "golang.org/x/sys/cpu"

// mulT1x128AVX512 multiplies one row by 128 transposed-weight columns (see
// mult_amd64.s).
//
//go:noescape
func mulT1x128AVX512(x, wt *float32, ldw int, out *float32, k, acc int)

// mulT1x64AVX512 multiplies one row by 64 transposed-weight columns (see
// mult_amd64.s).
//
//go:noescape
func mulT1x64AVX512(x, wt *float32, ldw int, out *float32, k, acc int)

// mulT4x64AVX512 multiplies four rows by 64 transposed-weight columns (see
// mult_amd64.s).
//
//go:noescape
func mulT4x64AVX512(x *float32, ldx int, wt *float32, ldw int, out *float32, ldo, k, acc int)

// mulT8x32AVX512 multiplies eight rows (xs, outs: one pointer per row) by 32
// transposed-weight columns (see mult_amd64.s).
//
//go:noescape
func mulT8x32AVX512(xs *[8]*float32, wt *float32, ldw int, outs *[8]*float32, k, acc int)

// MulTAvailable reports whether MulT has a vector body here: AVX-512F.
func MulTAvailable() bool { return cpu.X86.HasAVX512F }

// mulTVec computes MulT with AVX-512 when the processor has it, and reports
// whether it did: rows eight at a time in 32-column blocks, then four at a
// time in 64-column blocks, then one at a time in 128- and 64-column blocks (five
// rows measured faster as four and one than through the eight-row kernel
// with three rows wasted). A last partial column block goes through a stack
// buffer.
func mulTVec(out []float32, ldo int, x []float32, ldx int, wt []float32, ldw int, m, n, k int, acc bool) bool {
	if !cpu.X86.HasAVX512F {
		return false
	}
	a := 0
	if acc {
		a = 1
	}
	i := 0
	for ; m-i >= 8; i += 8 {
		mulT8(out[i*ldo:], ldo, x[i*ldx:], ldx, wt, ldw, n, k, acc)
	}
	for ; m-i >= 4; i += 4 {
		c := 0
		for ; c+64 <= n; c += 64 {
			mulT4x64AVX512(&x[i*ldx], ldx, &wt[c], ldw, &out[i*ldo+c], ldo, k, a)
		}
		if c < n {
			var tmp [4 * 64]float32
			w := n - c
			if acc {
				for r := 0; r < 4; r++ {
					copy(tmp[r*64:r*64+w], out[(i+r)*ldo+c:(i+r)*ldo+n])
				}
			}
			mulT4x64AVX512(&x[i*ldx], ldx, &wt[c], ldw, &tmp[0], 64, k, a)
			for r := 0; r < 4; r++ {
				copy(out[(i+r)*ldo+c:(i+r)*ldo+n], tmp[r*64:r*64+w])
			}
		}
	}
	for ; i < m; i++ {
		c := 0
		for ; c+128 <= n; c += 128 {
			mulT1x128AVX512(&x[i*ldx], &wt[c], ldw, &out[i*ldo+c], k, a)
		}
		if c+64 <= n {
			mulT1x64AVX512(&x[i*ldx], &wt[c], ldw, &out[i*ldo+c], k, a)
			c += 64
		}
		if c < n {
			var tmp [64]float32
			o := out[i*ldo+c : i*ldo+n]
			if acc {
				copy(tmp[:], o)
			}
			mulT1x64AVX512(&x[i*ldx], &wt[c], ldw, &tmp[0], k, a)
			copy(o, tmp[:])
		}
	}
	return true
}

// mulT8 runs mulT8x32AVX512 over the n columns for eight rows.
func mulT8(out []float32, ldo int, x []float32, ldx int, wt []float32, ldw int, n, k int, acc bool) {
	a := 0
	if acc {
		a = 1
	}
	var xs, outs [8]*float32
	for j := range xs {
		xs[j] = &x[j*ldx]
	}
	c := 0
	for ; c+32 <= n; c += 32 {
		for j := range outs {
			outs[j] = &out[j*ldo+c]
		}
		mulT8x32AVX512(&xs, &wt[c], ldw, &outs, k, a)
	}
	if c < n {
		var tmp [8 * 32]float32
		w := n - c
		for j := range outs {
			if acc {
				copy(tmp[j*32:j*32+w], out[j*ldo+c:j*ldo+n])
			}
			outs[j] = &tmp[j*32]
		}
		mulT8x32AVX512(&xs, &wt[c], ldw, &outs, k, a)
		for j := range outs {
			copy(out[j*ldo+c:j*ldo+n], tmp[j*32:j*32+w])
		}
	}
}
