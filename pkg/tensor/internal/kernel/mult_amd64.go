//go:build !purego

package kernel

import "golang.org/x/sys/cpu"

// mulT1x128AVX512 multiplies one row by 128 transposed-weight columns (see
// mult_amd64.s).
//
//go:noescape
func mulT1x128AVX512(x, wt *float32, ldw int, out *float32, k, acc int)

// mulT4x64AVX512 multiplies four rows by 64 transposed-weight columns (see
// mult_amd64.s).
//
//go:noescape
func mulT4x64AVX512(x *float32, ldx int, wt *float32, ldw int, out *float32, ldo, k, acc int)

// MulTAvailable reports whether MulT has a vector body here: AVX-512F.
func MulTAvailable() bool { return cpu.X86.HasAVX512F }

// mulTVec computes MulT with AVX-512 when the processor has it: rows four at
// a time in 64-column blocks, the other rows one at a time in 128-column
// blocks; a last partial block goes through a stack buffer. It reports
// whether it did.
func mulTVec(out []float32, ldo int, x []float32, ldx int, wt []float32, ldw int, m, n, k int, acc bool) bool {
	if !cpu.X86.HasAVX512F {
		return false
	}
	a := 0
	if acc {
		a = 1
	}
	i := 0
	for ; i+4 <= m; i += 4 {
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
		if c < n {
			var tmp [128]float32
			o := out[i*ldo+c : i*ldo+n]
			if acc {
				copy(tmp[:], o)
			}
			mulT1x128AVX512(&x[i*ldx], &wt[c], ldw, &tmp[0], k, a)
			copy(o, tmp[:])
		}
	}
	return true
}
