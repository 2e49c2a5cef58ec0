// Package kernel holds drafter's hand-written compute kernels, in a package
// without cgo so that they can be Go assembly, with Go bodies where the
// processor (or a purego build) has no vector ones: the few-row products
// (DotRows, MulT and their 16-bit forms), the packed GEMM (Gemm: Sgemm,
// SgemmHalf and GemmBF16 over one panel loop), the exponentials and the
// 16-bit conversions. The CPU device (pkg/tensor/cpu) runs them, and
// pkg/tensor's conversions (tensor.BF16ToF32, ...) are these; being
// internal to pkg/tensor, nothing else can import it.
package kernel

import "fmt"

// DotRows computes out[i*ldo+j] = x[i*ldx:i*ldx+k]·w[j*ldw:j*ldw+k] for
// i < m and j < n, or adds the product to out[i*ldo+j] when acc is true: the
// product x·wᵀ of a Hugging Face Linear weight w [n, k] with m rows x [m, k]
// (ldx = ldw = k), written into the first n columns of an m-row matrix with
// row stride ldo; or, with larger strides, one attention head's scores
// against a cache of several heads' keys. It runs on the calling goroutine
// and allocates nothing.
//
// Each element is the same sequence of operations whatever m, the element's
// row or column, and however a caller splits the columns: eight interleaved
// partial sums over k (k ≡ l mod 8 in lane l, fused multiply-adds where the
// processor has them), added pairwise. So a row's product does not depend on
// the batch it is computed in. On amd64 with AVX2 and FMA it runs in assembly,
// four weight rows by three rows at a time.
func DotRows(out []float32, ldo int, x []float32, ldx int, w []float32, ldw int, m, n, k int, acc bool) {
	if m <= 0 || n <= 0 {
		return
	}
	if k < 0 || ldo < n || ldx < k || ldw < k || len(x) < (m-1)*ldx+k || len(w) < (n-1)*ldw+k || len(out) < (m-1)*ldo+n {
		panic(fmt.Sprintf("tensor: DotRows buffers too short or strides too small (out %d, x %d, w %d) for m=%d n=%d k=%d ldo=%d ldx=%d ldw=%d",
			len(out), len(x), len(w), m, n, k, ldo, ldx, ldw))
	}
	j0 := 0
	if k > 0 {
		j0 = dotRowsVec(out, ldo, x, ldx, w, ldw, m, n, k, acc)
	}
	dotRowsGo(out, ldo, x, ldx, w, ldw, m, j0, n, k, acc)
}

// dotRowsGo computes columns [j0, n) of DotRows in Go, in the lane order the
// assembly uses (separate multiplies and adds where it fuses them).
func dotRowsGo(out []float32, ldo int, x []float32, ldx int, w []float32, ldw int, m, j0, n, k int, acc bool) {
	k8 := k &^ 7
	for i := 0; i < m; i++ {
		xr := x[i*ldx : i*ldx+k]
		for j := j0; j < n; j++ {
			wr := w[j*ldw : j*ldw+k]
			var l [8]float32
			p := 0
			for ; p < k8; p += 8 {
				xs, ws := xr[p:p+8], wr[p:p+8]
				l[0] += xs[0] * ws[0]
				l[1] += xs[1] * ws[1]
				l[2] += xs[2] * ws[2]
				l[3] += xs[3] * ws[3]
				l[4] += xs[4] * ws[4]
				l[5] += xs[5] * ws[5]
				l[6] += xs[6] * ws[6]
				l[7] += xs[7] * ws[7]
			}
			for q := p; q < k; q++ {
				l[q-p] += xr[q] * wr[q]
			}
			s := ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
			if acc {
				s += out[i*ldo+j]
			}
			out[i*ldo+j] = s
		}
	}
}

// WeightedSum computes out[d] = Σ_{j<n} p[j]·v[j*ldv+d] for d < k, or adds it
// to out[d] when acc is true: the row vector p times the [n, k] matrix v with
// row stride ldv, the P·V of attention over a cache of several heads' values.
// It runs on the calling goroutine and allocates nothing. Key j goes into
// partial sum j%4 and the four are added as (s0+s1)+(s2+s3), whatever n, so
// keys past the end with p[j] = 0 leave the result unchanged.
func WeightedSum(out, p, v []float32, ldv, n, k int, acc bool) {
	if k <= 0 {
		return
	}
	if n < 0 || ldv < k || len(out) < k || len(p) < n || (n > 0 && len(v) < (n-1)*ldv+k) {
		panic(fmt.Sprintf("tensor: WeightedSum buffers too short or stride too small (out %d, p %d, v %d) for n=%d k=%d ldv=%d", len(out), len(p), len(v), n, k, ldv))
	}
	if n == 0 {
		if !acc {
			clear(out[:k])
		}
		return
	}
	d0 := wsumVec(out, p, v, ldv, n, k, acc)
	for d := d0; d < k; d++ {
		var s [4]float32
		for j := 0; j < n; j++ {
			s[j&3] += p[j] * v[j*ldv+d]
		}
		t := (s[0] + s[1]) + (s[2] + s[3])
		if acc {
			t += out[d]
		}
		out[d] = t
	}
}
