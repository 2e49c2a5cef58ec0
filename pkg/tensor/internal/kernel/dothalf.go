package kernel

import (
	"fmt"
	"strings"
)

// DotRowsBF16 computes out[i*ldo+j] = x[i*ldx:i*ldx+k]·w[j*ldw:j*ldw+k] for
// i < m and j < n, or adds the product to out[i*ldo+j] when acc is true,
// where w holds bfloat16 weights: the product x·wᵀ of a Hugging Face Linear
// weight [n, k] kept in its checkpoint's format with m float32 rows x [m, k].
// The weights are widened to float32 in registers, exactly, and every
// product and sum is a float32 operation: the result is the float32 product
// with the bfloat16 weights' values, the activations are not rounded. It
// runs on the calling goroutine and allocates nothing.
//
// Each element is the same sequence of operations whatever m, the
// element's row or column, and however a caller splits the rows or the
// columns: sixteen interleaved partial sums over k (k ≡ l mod 16 in lane l,
// as if k were padded with zeros to a multiple of 16), each a chain of fused
// multiply-adds where the processor has them, then s_l = lane l + lane l+8
// for l < 8, added as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)), then the old
// output when acc. So a row's product does not depend on the batch it is
// computed in, and the AVX-512 and AVX2 bodies give the same bits. On amd64
// with AVX-512 it runs six rows by four weight rows at a time, with AVX2
// and FMA three rows by two; elsewhere in Go (where Go fuses a multiply and
// an add the result may differ from the assembly in the last bits, not in
// its independence of m).
func DotRowsBF16(out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
	dotRowsHalf(BF16, out, ldo, x, ldx, w, ldw, m, n, k, acc)
}

// DotRowsF16 is DotRowsBF16 for IEEE binary16 weights, widened exactly (F16C
// on amd64).
func DotRowsF16(out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
	dotRowsHalf(F16, out, ldo, x, ldx, w, ldw, m, n, k, acc)
}

// dotRowsHalf is DotRowsBF16 and DotRowsF16.
func dotRowsHalf(h Half, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
	if m <= 0 || n <= 0 {
		return
	}
	if k < 0 || ldo < n || ldx < k || ldw < k || len(x) < (m-1)*ldx+k || len(w) < (n-1)*ldw+k || len(out) < (m-1)*ldo+n {
		panic(fmt.Sprintf("tensor: DotRows%s buffers too short or strides too small (out %d, x %d, w %d) for m=%d n=%d k=%d ldo=%d ldx=%d ldw=%d",
			strings.ToUpper(h.String()), len(out), len(x), len(w), m, n, k, ldo, ldx, ldw))
	}
	if dotRowsHalfVec(h, out, ldo, x, ldx, w, ldw, m, n, k, acc) {
		return
	}
	dotRowsHalfGo(h, out, ldo, x, ldx, w, ldw, m, n, k, acc)
}

// dotRowsHalfGo is dotRowsHalf in Go: rows four at a time share each
// widened block of sixteen weights.
func dotRowsHalfGo(h Half, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
	k16 := k &^ 15
	var wb [16]float32
	var xt [4][16]float32
	for j := 0; j < n; j++ {
		wr := w[j*ldw : j*ldw+k]
		for i0 := 0; i0 < m; i0 += 4 {
			r := min(4, m-i0)
			var xs [4][]float32
			for i := 0; i < r; i++ {
				xs[i] = x[(i0+i)*ldx : (i0+i)*ldx+k]
			}
			var l [4][16]float32
			for p := 0; p < k16; p += 16 {
				widen16(h, &wb, wr[p:p+16])
				for i := 0; i < r; i++ {
					lanes16(&l[i], &wb, (*[16]float32)(xs[i][p:p+16]))
				}
			}
			if k16 < k {
				// The tail as a zero-padded block of sixteen.
				wb = [16]float32{}
				widen(h, wb[:k-k16], wr[k16:])
				for i := 0; i < r; i++ {
					xt[i] = [16]float32{}
					copy(xt[i][:], xs[i][k16:])
					lanes16(&l[i], &wb, &xt[i])
				}
			}
			for i := 0; i < r; i++ {
				o := &out[(i0+i)*ldo+j]
				s := reduce16(&l[i])
				if acc {
					s += *o
				}
				*o = s
			}
		}
	}
}

// lanes16 adds x[q]·w[q] to l[q] for q < 16.
func lanes16(l, w, x *[16]float32) {
	for q := range l {
		l[q] += x[q] * w[q]
	}
}

// reduce16 adds the sixteen lanes of a DotRowsBF16 element in its order.
func reduce16(l *[16]float32) float32 {
	var s [8]float32
	for q := range s {
		s[q] = l[q] + l[q+8]
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

// widen16 widens sixteen 16-bit values of format h.
func widen16(h Half, dst *[16]float32, src []uint16) {
	widen(h, dst[:], src[:16])
}

// widen widens the 16-bit values src of format h into dst, one at a time.
func widen(h Half, dst []float32, src []uint16) {
	dst = dst[:len(src)]
	if h == BF16 {
		for i, v := range src {
			dst[i] = bf16ToF32(v)
		}
		return
	}
	for i, v := range src {
		dst[i] = f16ToF32(v)
	}
}
