package kernel

import "fmt"

// MulTPad is the column padding MulT's transposed weights need: every row of
// wt must be readable up to the output width rounded up to a multiple of
// MulTPad (the kernels read whole column blocks and discard what lies past
// the output).
const MulTPad = 128

// MulT computes out[i*ldo+j] = Σ_{p<k} x[i*ldx+p]·wt[p*ldw+j] for i < m and
// j < n, or adds it to out[i*ldo+j] when acc is true: m rows times a weight
// matrix stored transposed, [k, ldw], as NewTransposed lays out a Hugging
// Face Linear weight. It runs on the calling goroutine and allocates nothing.
//
// Each element is one chain of fused multiply-adds over p in order, starting
// from zero, with the old output added once at the end when acc: the same
// operations whatever m, the element's row or column, and however a caller
// splits the columns (at multiples of MulTPad), so a row's product does not
// depend on the batch it is computed in. Unlike DotRows it needs no
// horizontal reductions: eight or four rows share every weight load, sixteen
// vector accumulators at a time. It needs AVX-512 (MulTAvailable); elsewhere it
// computes in Go, one multiply and one add per step.
func MulT(out []float32, ldo int, x []float32, ldx int, wt []float32, ldw int, m, n, k int, acc bool) {
	if m <= 0 || n <= 0 {
		return
	}
	padded := (n + MulTPad - 1) / MulTPad * MulTPad
	if k < 0 || ldo < n || ldx < k || ldw < padded || len(x) < (m-1)*ldx+k || (k > 0 && len(wt) < (k-1)*ldw+padded) || len(out) < (m-1)*ldo+n {
		panic(fmt.Sprintf("tensor: MulT buffers too short or strides too small (out %d, x %d, wt %d) for m=%d n=%d k=%d ldo=%d ldx=%d ldw=%d (ldw and the last row need %d columns)",
			len(out), len(x), len(wt), m, n, k, ldo, ldx, ldw, padded))
	}
	if k == 0 {
		if !acc {
			for i := 0; i < m; i++ {
				clear(out[i*ldo : i*ldo+n])
			}
		}
		return
	}
	if !mulTVec(out, ldo, x, ldx, wt, ldw, m, n, k, acc) {
		mulTGo(out, ldo, x, ldx, wt, ldw, m, n, k, acc)
	}
}

// mulTGo is MulT in Go.
func mulTGo(out []float32, ldo int, x []float32, ldx int, wt []float32, ldw int, m, n, k int, acc bool) {
	for i := 0; i < m; i++ {
		xr := x[i*ldx : i*ldx+k]
		o := out[i*ldo : i*ldo+n]
		for j := range o {
			var s float32
			for p, xv := range xr {
				s += xv * wt[p*ldw+j]
			}
			if acc {
				s += o[j]
			}
			o[j] = s
		}
	}
}

// TransposeForMulT returns the weight w [n, k] (a Hugging Face Linear's
// layout) transposed for MulT: [k, ldw] with ldw = n rounded up to MulTPad,
// the padding zero.
func TransposeForMulT(w []float32, n, k int) (wt []float32, ldw int) {
	if n < 0 || k < 0 || len(w) < n*k {
		panic(fmt.Sprintf("tensor: TransposeForMulT: %d values for a [%d, %d] weight", len(w), n, k))
	}
	ldw = (n + MulTPad - 1) / MulTPad * MulTPad
	wt = make([]float32, k*ldw)
	for j := 0; j < n; j++ {
		for p, v := range w[j*k : (j+1)*k] {
			wt[p*ldw+j] = v
		}
	}
	return wt, ldw
}
