package cpu

import "github.com/drafter-ai/drafter/pkg/tensor"

// A mixture-of-experts layer's combine: each expert's output rows, scaled by
// their routing weights, added into the layer's output rows.

// addRowsJob is the AddScaledRows being split over the workers: each worker
// takes a range of columns and runs every index i in order over it, so a
// repeated destination row gets its additions in index order whatever the
// split.
type addRowsJob struct {
	dst, src []float32
	rows     []int32
	scale    []float32
	cols     int
}

// addRowsChunk is the least number of values (len(rows)·columns) a worker
// takes, as actChunk is for the activations.
const addRowsChunk = 8192

// AddScaledRows adds scale[i]·src's row i to dst's row rows[i] for i in
// order, each value as dst + float32(scale·src), split over the workers by
// columns when large.
func (c *Device) AddScaledRows(dst, src tensor.Tensor, rows []int32, scale []float32) {
	tensor.CheckAddScaledRows("AddScaledRows", dst, src, rows, scale)
	n, cols := len(rows), dst.Cols()
	if n == 0 || cols == 0 {
		return
	}
	c.addRows = addRowsJob{dst: f32s(dst), src: f32s(src), rows: rows, scale: scale, cols: cols}
	if n*cols < 2*addRowsChunk {
		c.addRowsFn(0, cols)
	} else {
		// At least 16 columns (a 64-byte line) per worker.
		tensor.Parallel(cols, max(16, addRowsChunk/n), c.addRowsFn)
	}
	c.addRows = addRowsJob{}
}

// addRowsCols runs c.addRows over columns [lo, hi) of every row, i in order.
func (c *Device) addRowsCols(lo, hi int) {
	j := &c.addRows
	for i, r := range j.rows {
		s := j.scale[i]
		d := j.dst[int(r)*j.cols+lo : int(r)*j.cols+hi]
		x := j.src[i*j.cols+lo : i*j.cols+hi]
		x = x[:len(d)]
		for k, v := range x {
			// The conversion rounds the product: Go may not fuse it
			// into the add.
			d[k] += float32(s * v)
		}
	}
}
