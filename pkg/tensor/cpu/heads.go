package cpu

import "github.com/drafter-ai/drafter/pkg/tensor"

// Per-head products (DeepSeek-V3's absorbed multi-head latent attention):
// each head's block of x's columns times its own block of a weight's rows,
// into its block of out's columns.

// headJob is the HeadMatMul being split over the heads, read by
// Device.headChunk.
type headJob struct {
	out, x, w []float32
	rows      int
	heads     int
	k, n      int // each head's inner size and output columns
	a, b      int // each head's weight block: a rows of b
	transW    bool
}

// HeadMatMul computes every head's product out_h = x_h·op(W_h), split over
// the workers by heads when large. Up to FewRows rows it runs the few-row
// kernels one row at a time (DotRows against W_h's rows when transW, else
// WeightedSum of W_h's rows by the row's values), which compute a row the
// same way whatever the other rows; above, one backend Sgemm per head with
// x's and out's row strides as leading dimensions, so nothing is copied.
func (c *Device) HeadMatMul(out, x, w tensor.Tensor, heads int, transW bool) {
	rows, k, n := tensor.CheckHeadMatMul("HeadMatMul", out, x, w, heads, transW)
	if rows == 0 || n == 0 {
		return
	}
	if k == 0 { // empty sums
		clear(f32s(out)[:rows*heads*n])
		return
	}
	c.head = headJob{out: f32s(out), x: f32s(x), w: f32s(w), rows: rows, heads: heads, k: k, n: n,
		a: w.Rows() / heads, b: w.Cols(), transW: transW}
	chunks := 1
	work := rows * heads * k * n
	if rows <= tensor.FewRows {
		// The few-row kernels run in Go on the calling goroutine: always
		// safe to split, as Products' few-row products.
		if work >= fewMinWork {
			chunks = tensor.Workers()
		}
	} else if c.mm.ParallelCalls() && work >= mmMinWork {
		// One backend call per head, side by side where the backend's
		// calls may run so (else it threads each call itself).
		chunks = tensor.Workers()
	}
	tensor.ParallelChunks(heads, chunks, c.headFn)
	c.head = headJob{}
}

// headChunk computes heads [lo, hi) of c.head.
func (c *Device) headChunk(_, lo, hi int) {
	j := &c.head
	ldx, ldo := j.heads*j.k, j.heads*j.n
	for h := lo; h < hi; h++ {
		wh := j.w[h*j.a*j.b : (h+1)*j.a*j.b]
		xh, oh := j.x[h*j.k:], j.out[h*j.n:]
		switch {
		case j.rows > tensor.FewRows:
			c.be.Sgemm(false, j.transW, j.rows, j.n, j.k, 1, xh, ldx, wh, j.b, 0, oh, ldo)
		case j.transW:
			// out_h = x_h·W_hᵀ: a row's dot products with W_h's a rows of b.
			DotRows(oh, ldo, xh, ldx, wh, j.b, j.rows, j.n, j.k, false)
		default:
			// out_h = x_h·W_h: W_h's a rows weighted by the row's a values.
			for r := 0; r < j.rows; r++ {
				WeightedSum(oh[r*ldo:r*ldo+j.n], xh[r*ldx:r*ldx+j.k], wh, j.b, j.k, j.n, false)
			}
		}
	}
}
