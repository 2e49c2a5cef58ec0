package cpu

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// maxCEChunks bounds the number of row chunks a cross-entropy call splits its
// rows into, so the per-chunk loss sums fit in the device's fixed array.
const maxCEChunks = 64

// castBlock is the number of values a cast between the two 16-bit dtypes
// widens to float32 at a time.
const castBlock = 1 << 12

// lossJob is the softmax or loss being split over the workers.
type lossJob struct {
	x, d, p, w []float32 // logits (Softmax's rows), dlogits, soft targets, weights
	t          []int32   // targets (ArgMax's indices)
	scale      float32   // Softmax's
	rowLoss    []float64
	rank       []int32
	rows, v    int
	chunk      int // CrossEntropy's and SoftCrossEntropy's rows per chunk
	lk         tensor.LK
	// partial holds each chunk's loss, added in chunk order afterwards;
	// partialAlpha the LK losses' weighted α, likewise.
	partial, partialAlpha [maxCEChunks]float64
}

// lossOps is the CPU device's state for the losses and casts: the job in
// flight and its chunk functions stored once, so that a split allocates
// nothing, and the casts' float32 block.
type lossOps struct {
	job                                             lossJob
	softmaxFn, argmaxFn, ceFn, softFn, evalFn, lkFn func(lo, hi int)
	cast                                            []float32 // allocated by the first 16-bit to 16-bit cast
}

func (l *lossOps) init() {
	l.softmaxFn = l.softmaxChunk
	l.argmaxFn = l.argmaxChunk
	l.ceFn = l.ceChunk
	l.softFn = l.softChunk
	l.evalFn = l.evalChunk
	l.lkFn = l.lkChunk
}

// Softmax computes each row's (x - max)·scale, their exponentials with
// ExpShift (Expf's arithmetic), their sum in float64 one value after another,
// and scales the row by the sum's float32 inverse; rows split over the
// workers.
func (c *Device) Softmax(x tensor.Tensor, scale float32) {
	checkLossDType("Softmax", x, tensor.F32)
	l := &c.loss
	l.job.x, l.job.v, l.job.scale = f32s(x), x.Cols(), scale
	tensor.Parallel(x.Rows(), RowChunk(x.Cols()), l.softmaxFn)
	l.job = lossJob{}
}

func (l *lossOps) softmaxChunk(lo, hi int) {
	x, n, s := l.job.x, l.job.v, l.job.scale
	for r := lo; r < hi; r++ {
		row := x[r*n : r*n+n]
		mx := rowMax(row)
		for i, v := range row {
			row[i] = (v - mx) * s
		}
		ExpShift(row, 0)
		var sum float64
		for _, e := range row {
			sum += float64(e)
		}
		Scale(row, float32(1/sum))
	}
}

// ArgMax scans each row for its first largest value, rows split over the
// workers.
func (c *Device) ArgMax(idx []int32, x tensor.Tensor) {
	checkLossDType("ArgMax", x, tensor.F32)
	if len(idx) < x.Rows() {
		panic(fmt.Sprintf("tensor: ArgMax of %d rows into %d indices", x.Rows(), len(idx)))
	}
	l := &c.loss
	l.job.x, l.job.v, l.job.t = f32s(x), x.Cols(), idx
	tensor.Parallel(x.Rows(), RowChunk(x.Cols()), l.argmaxFn)
	l.job = lossJob{}
}

func (l *lossOps) argmaxChunk(lo, hi int) {
	x, n, idx := l.job.x, l.job.v, l.job.t
	for r := lo; r < hi; r++ {
		row := x[r*n : r*n+n]
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		idx[r] = int32(best)
	}
}

// GatherCols copies the columns row by row.
func (c *Device) GatherCols(out, src, cols tensor.Tensor) {
	if cols.DType() != tensor.I32 || cols.Len() != out.Cols() || out.Rows() != src.Rows() {
		panic(fmt.Sprintf("tensor: GatherCols of %d %s columns from %dx%d into %dx%d", cols.Len(), cols.DType(), src.Rows(), src.Cols(), out.Rows(), out.Cols()))
	}
	n, w := src.Cols(), out.Cols()
	for r := 0; r < src.Rows(); r++ {
		row, o := f32s(src)[r*n:r*n+n], f32s(out)[r*w:r*w+w]
		for i, c := range i32s(cols) {
			o[i] = row[c]
		}
	}
}

// rowMax returns the largest element of a non-empty row.
func rowMax(row []float32) float32 {
	mx := row[0]
	for _, x := range row[1:] {
		if x > mx {
			mx = x
		}
	}
	return mx
}

// expSum returns sum_j e^(row[j]-mx), accumulated in float64 over two lanes,
// of the inference kernels' float32 exponentials (ExpShift, whose values are
// Expf's, bit for bit). When e is not nil the exponentials are stored there
// (e may alias row), computed eight or sixteen at a time; without it they are
// Expf's one at a time, the same values.
func expSum(row, e []float32, mx float32) float64 {
	var s0, s1 float64
	j := 0
	if e == nil {
		for ; j+2 <= len(row); j += 2 {
			s0 += float64(Expf(row[j] - mx))
			s1 += float64(Expf(row[j+1] - mx))
		}
		if j < len(row) {
			s0 += float64(Expf(row[j] - mx))
		}
		return s0 + s1
	}
	e = e[:len(row)]
	if &e[0] != &row[0] {
		copy(e, row)
	}
	ExpShift(e, mx)
	for ; j+2 <= len(e); j += 2 {
		s0 += float64(e[j])
		s1 += float64(e[j+1])
	}
	if j < len(e) {
		s0 += float64(e[j])
	}
	return s0 + s1
}

// ceChunks splits rows into at most maxCEChunks chunks of at least
// RowChunk(v) rows, a function of rows and v only, so per-chunk sums added in
// chunk order give the same total however the chunks are scheduled.
func ceChunks(rows, v int) (chunk, n int) {
	chunk = max(RowChunk(v), (rows+maxCEChunks-1)/maxCEChunks)
	return chunk, (rows + chunk - 1) / chunk
}

// setLoss checks the operands every loss shares and stores them as the job
// in flight, and returns the number of chunks.
func (l *lossOps) setLoss(op string, dlogits, logits, weights tensor.Tensor) int {
	checkLossDType(op, logits, tensor.F32)
	rows, v := logits.Rows(), logits.Cols()
	if !dlogits.Empty() && (dlogits.DType() != tensor.F32 || dlogits.Rows() != rows || dlogits.Cols() != v) {
		panic(fmt.Sprintf("tensor: %s: dlogits %s %dx%d for logits %dx%d", op, dlogits.DType(), dlogits.Rows(), dlogits.Cols(), rows, v))
	}
	if !weights.Empty() && (weights.DType() != tensor.F32 || weights.Len() != rows) {
		panic(fmt.Sprintf("tensor: %s: %d %s weights for %d rows", op, weights.Len(), weights.DType(), rows))
	}
	l.job = lossJob{x: f32s(logits), d: f32s(dlogits), w: f32s(weights), rows: rows, v: v}
	var n int
	l.job.chunk, n = ceChunks(rows, v)
	return n
}

// total returns the sum of the first n chunks' losses, in chunk order, and
// clears the job.
func (l *lossOps) total(n int) float64 {
	var total float64
	for _, s := range l.job.partial[:n] {
		total += s
	}
	l.job = lossJob{}
	return total
}

// CrossEntropy is the fused kernel of the trainers' output layers: one
// float32 exponential per logit (the inference kernels' ExpShift), stored in
// dlogits and rescaled there into the gradient; sums are in float64, per
// chunk of rows (ceChunks), the chunks split over the workers.
func (c *Device) CrossEntropy(dlogits, logits, targets, weights tensor.Tensor) float64 {
	if targets.DType() != tensor.I32 || targets.Len() != logits.Rows() {
		panic(fmt.Sprintf("tensor: CrossEntropy: %d %s targets for %d rows", targets.Len(), targets.DType(), logits.Rows()))
	}
	n := c.loss.setLoss("CrossEntropy", dlogits, logits, weights)
	c.loss.job.t = i32s(targets)
	tensor.Parallel(n, 1, c.loss.ceFn)
	return c.loss.total(n)
}

// weight returns row r's loss weight: 1 without weights.
func (j *lossJob) weight(r int) float32 {
	if j.w == nil {
		return 1
	}
	return j.w[r]
}

// skip clears row r's gradient, if wanted: a row the loss leaves out.
func (j *lossJob) skip(r int) {
	if j.d != nil {
		clear(j.d[r*j.v : r*j.v+j.v])
	}
}

// exps returns row r's maximum and Σ e^(x - max) over the row (expSum),
// the exponentials stored in the row's gradient d when one is wanted (nil
// otherwise), where the caller rescales them into the gradient.
func (j *lossJob) exps(r int) (mx float32, sum float64, d []float32) {
	row := j.x[r*j.v : r*j.v+j.v]
	mx = rowMax(row)
	if j.d != nil {
		d = j.d[r*j.v : r*j.v+j.v]
	}
	return mx, expSum(row, d, mx), d
}

// ceChunk computes chunks [clo, chi) of CrossEntropy.
func (l *lossOps) ceChunk(clo, chi int) {
	j := &l.job
	for c := clo; c < chi; c++ {
		var loss float64
		for r := c * j.chunk; r < min((c+1)*j.chunk, j.rows); r++ {
			w, t := j.weight(r), j.t[r]
			if w == 0 || t < 0 {
				j.skip(r)
				continue
			}
			xt := j.x[r*j.v+int(t)]
			mx, sum, d := j.exps(r)
			// -log p_t = log(sum_j e^(x_j - max)) - (x_t - max)
			loss += float64(w) * (math.Log(sum) - float64(xt-mx))
			if d != nil {
				scale := float32(float64(w) / sum)
				for i := range d {
					d[i] *= scale
				}
				d[t] -= w
			}
		}
		j.partial[c] = loss
	}
}

// SoftCrossEntropy is CrossEntropy's fused kernel for target distributions.
func (c *Device) SoftCrossEntropy(dlogits, logits, p, weights tensor.Tensor) float64 {
	if p.DType() != tensor.F32 || p.Rows() != logits.Rows() || p.Cols() != logits.Cols() {
		panic(fmt.Sprintf("tensor: SoftCrossEntropy: target distributions %s %dx%d for logits %dx%d", p.DType(), p.Rows(), p.Cols(), logits.Rows(), logits.Cols()))
	}
	n := c.loss.setLoss("SoftCrossEntropy", dlogits, logits, weights)
	c.loss.job.p = f32s(p)
	tensor.Parallel(n, 1, c.loss.softFn)
	return c.loss.total(n)
}

// softChunk computes chunks [clo, chi) of SoftCrossEntropy.
func (l *lossOps) softChunk(clo, chi int) {
	j := &l.job
	v := j.v
	for c := clo; c < chi; c++ {
		var loss float64
		for r := c * j.chunk; r < min((c+1)*j.chunk, j.rows); r++ {
			w := j.weight(r)
			if w == 0 {
				j.skip(r)
				continue
			}
			row, pr := j.x[r*v:r*v+v], j.p[r*v:r*v+v]
			// sum_j p_j (logZ - x_j) = psum logZ - sum_j p_j x_j, read
			// before the exponentials may overwrite the logits.
			var psum, px float64
			for i, x := range row {
				pj := float64(pr[i])
				psum += pj
				px += pj * float64(x)
			}
			mx, sum, d := j.exps(r)
			logZ := math.Log(sum) + float64(mx)
			loss += float64(w) * (psum*logZ - px)
			if d != nil {
				scale := float32(float64(w) * psum / sum)
				for i := range d {
					d[i] = d[i]*scale - w*pr[i]
				}
			}
		}
		j.partial[c] = loss
	}
}

// CrossEntropyEval computes the rows' losses and ranks, the rows split over
// the workers; the exponentials are Expf's, as CrossEntropy's.
func (c *Device) CrossEntropyEval(rowLoss []float64, rank []int32, logits, targets tensor.Tensor) {
	checkLossDType("CrossEntropyEval", logits, tensor.F32)
	rows := logits.Rows()
	if targets.DType() != tensor.I32 || targets.Len() != rows || len(rowLoss) < rows || len(rank) < rows {
		panic(fmt.Sprintf("tensor: CrossEntropyEval: %d %s targets, %d losses and %d ranks for %d rows", targets.Len(), targets.DType(), len(rowLoss), len(rank), rows))
	}
	l := &c.loss
	l.job = lossJob{x: f32s(logits), t: i32s(targets), rowLoss: rowLoss, rank: rank, rows: rows, v: logits.Cols()}
	tensor.Parallel(rows, RowChunk(logits.Cols()), l.evalFn)
	l.job = lossJob{}
}

// evalChunk computes rows [lo, hi) of CrossEntropyEval.
func (l *lossOps) evalChunk(lo, hi int) {
	j := &l.job
	logits, targets, rowLoss, rank, v := j.x, j.t, j.rowLoss, j.rank, j.v
	for r := lo; r < hi; r++ {
		t := targets[r]
		if t < 0 {
			rowLoss[r], rank[r] = 0, -1
			continue
		}
		row := logits[r*v : r*v+v]
		xt := row[t]
		mx := row[0]
		above := int32(0)
		for _, x := range row {
			if x > mx {
				mx = x
			}
			if x > xt {
				above++
			}
		}
		rowLoss[r] = math.Log(expSum(row, nil, mx)) - float64(xt-mx)
		rank[r] = above
	}
}

// TopK keeps idx sorted best first while it scans x once: a value enters
// only when it beats the worst kept one strictly, so of equal values the
// earlier (lower index) stays ahead.
func (c *Device) TopK(idx []int, x tensor.Tensor) int {
	if x.DType() != tensor.F32 || x.Rows() != 1 && !x.Empty() {
		panic(fmt.Sprintf("tensor: TopK of a %s %dx%d tensor: one float32 row", x.DType(), x.Rows(), x.Cols()))
	}
	v := f32s(x)
	k := min(len(idx), len(v))
	if k <= 0 {
		return 0
	}
	n := 0
	for i, xi := range v {
		if n == k && xi <= v[idx[k-1]] {
			continue
		}
		pos := n
		if n < k {
			n++
		} else {
			pos = k - 1
		}
		for pos > 0 && v[idx[pos-1]] < xi {
			idx[pos] = idx[pos-1]
			pos--
		}
		idx[pos] = i
	}
	return n
}

// Cast converts with F32ToBF16, F32ToF16, BF16ToF32 and F16ToF32 (large
// tensors split over the workers); between BF16 and F16 it widens blocks of
// castBlock values to float32 and rounds those, one rounding in all since the
// widening is exact.
func (c *Device) Cast(dst, src tensor.Tensor) {
	if dst.Len() != src.Len() {
		panic(fmt.Sprintf("tensor: Cast of %d values into %d", src.Len(), dst.Len()))
	}
	switch {
	case src.DType() == tensor.F32 && dst.DType() == tensor.F32:
		copy(f32s(dst), f32s(src))
	case src.DType() == tensor.F32 && dst.DType() == tensor.BF16:
		tensor.F32ToBF16(u16s(dst), f32s(src))
	case src.DType() == tensor.F32 && dst.DType() == tensor.F16:
		tensor.F32ToF16(u16s(dst), f32s(src))
	case src.DType() == tensor.BF16 && dst.DType() == tensor.F32:
		tensor.BF16ToF32(f32s(dst), u16s(src))
	case src.DType() == tensor.F16 && dst.DType() == tensor.F32:
		tensor.F16ToF32(f32s(dst), u16s(src))
	case src.DType() == dst.DType() && (src.DType() == tensor.BF16 || src.DType() == tensor.F16):
		copy(u16s(dst), u16s(src))
	case src.DType() == tensor.BF16 && dst.DType() == tensor.F16:
		c.castHalf(u16s(dst), u16s(src), tensor.BF16ToF32, tensor.F32ToF16)
	case src.DType() == tensor.F16 && dst.DType() == tensor.BF16:
		c.castHalf(u16s(dst), u16s(src), tensor.F16ToF32, tensor.F32ToBF16)
	default:
		panic(fmt.Sprintf("tensor: Cast from %s to %s: only between F32, BF16 and F16", src.DType(), dst.DType()))
	}
}

// castHalf converts src to dst through the device's float32 block: widen,
// then round.
func (c *Device) castHalf(dst, src []uint16, widen func([]float32, []uint16), round func([]uint16, []float32)) {
	if c.loss.cast == nil {
		c.loss.cast = make([]float32, castBlock)
	}
	b := c.loss.cast
	for lo := 0; lo < len(src); lo += castBlock {
		hi := min(lo+castBlock, len(src))
		widen(b[:hi-lo], src[lo:hi])
		round(dst[lo:hi], b[:hi-lo])
	}
}

// checkLossDType panics unless x has dtype dt.
func checkLossDType(op string, x tensor.Tensor, dt tensor.DType) {
	if x.DType() != dt {
		panic(fmt.Sprintf("tensor: %s of a %s tensor, want %s", op, x.DType(), dt))
	}
}
