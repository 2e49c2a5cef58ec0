package cpu

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// RMSNorm computes out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for each of rows
// rows of length n, as Hugging Face's LlamaRMSNorm does in float32. out may
// alias x.
func RMSNorm(out, x, w []float32, rows, n int, eps float32) {
	if c := RowChunk(n); rows < 2*c {
		// One chunk, which Parallel would run inline: without the closure
		// a hand-off needs, a few rows (a drafting step) do not allocate.
		rmsNormRows(out, x, w, 0, rows, n, eps)
		return
	}
	tensor.Parallel(rows, RowChunk(n), func(lo, hi int) { rmsNormRows(out, x, w, lo, hi, n, eps) })
}

// rmsNormRows is RMSNorm on rows [lo, hi).
func rmsNormRows(out, x, w []float32, lo, hi, n int, eps float32) {
	for r := lo; r < hi; r++ {
		xr := x[r*n : r*n+n]
		or := out[r*n : r*n+n]
		rs := rmsScale(xr, eps)
		for i, v := range xr {
			or[i] = v * rs * w[i]
		}
	}
}

// rmsScale returns 1/sqrt(mean(x^2)+eps), accumulating in float64.
func rmsScale(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
}

// RMSNormBackward accumulates the gradients of RMSNorm into dx and dw (either may
// be nil) given dout and the forward's input x and weight w. With r =
// 1/sqrt(mean(x^2)+eps): dw_i += dout_i x_i r and
// dx_i += r w_i dout_i - r^3/n x_i sum_j w_j dout_j x_j.
func RMSNormBackward(dx, dw, dout, x, w []float32, rows, n int, eps float32) {
	if dx != nil {
		tensor.Parallel(rows, RowChunk(n), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				xr, dr, dxr := x[r*n:r*n+n], dout[r*n:r*n+n], dx[r*n:r*n+n]
				rs := float64(rmsScale(xr, eps))
				var dot float64
				for i, v := range xr {
					dot += float64(w[i]) * float64(dr[i]) * float64(v)
				}
				c := rs * rs * rs * dot / float64(n)
				for i, v := range xr {
					dxr[i] += float32(rs*float64(w[i])*float64(dr[i]) - c*float64(v))
				}
			}
		})
	}
	if dw != nil {
		// Rows are summed into one dw: split the columns over the cores instead.
		tensor.Parallel(n, 64, func(lo, hi int) {
			for r := 0; r < rows; r++ {
				xr, dr := x[r*n:r*n+n], dout[r*n:r*n+n]
				rs := rmsScale(xr, eps)
				for i := lo; i < hi; i++ {
					dw[i] += dr[i] * xr[i] * rs
				}
			}
		})
	}
}

// RowChunk picks how many rows of length n one worker takes in a row-wise op
// split with Parallel: enough that a chunk is worth scheduling.
func RowChunk(n int) int {
	c := 4096 / (n + 1)
	if c < 1 {
		c = 1
	}
	return c
}
