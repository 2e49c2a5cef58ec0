package nn

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Softmax replaces each of rows rows of length n with its softmax, with the
// inference kernel tensor.Softmax (float32 exponentials of the row minus its
// maximum, tensor.Expf's arithmetic, and their float32 sum).
func Softmax(x []float32, rows, n int) {
	tensor.Parallel(rows, tensor.RowChunk(n), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			tensor.Softmax(x[r*n : r*n+n])
		}
	})
}

// maxCEChunks bounds the number of row chunks a cross-entropy call splits its
// rows into, so the per-chunk loss sums fit in a stack array.
const maxCEChunks = 64

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
// of the inference kernels' float32 exponentials (tensor.ExpShift, whose
// values are tensor.Expf's, bit for bit). When e is not nil the exponentials
// are stored there (e may alias row), computed eight or sixteen at a time;
// without it they are tensor.Expf's one at a time, the same values.
func expSum(row, e []float32, mx float32) float64 {
	var s0, s1 float64
	j := 0
	if e == nil {
		for ; j+2 <= len(row); j += 2 {
			s0 += float64(tensor.Expf(row[j] - mx))
			s1 += float64(tensor.Expf(row[j+1] - mx))
		}
		if j < len(row) {
			s0 += float64(tensor.Expf(row[j] - mx))
		}
		return s0 + s1
	}
	e = e[:len(row)]
	if &e[0] != &row[0] {
		copy(e, row)
	}
	tensor.ExpShift(e, mx)
	for ; j+2 <= len(e); j += 2 {
		s0 += float64(e[j])
		s1 += float64(e[j+1])
	}
	if j < len(e) {
		s0 += float64(e[j])
	}
	return s0 + s1
}

// ceChunks splits rows into at most maxCEChunks chunks of at least tensor.RowChunk(v)
// rows, a function of rows and v only, so per-chunk sums added in chunk order
// give the same total however the chunks are scheduled.
func ceChunks(rows, v int) (chunk, n int) {
	chunk = max(tensor.RowChunk(v), (rows+maxCEChunks-1)/maxCEChunks)
	return chunk, (rows + chunk - 1) / chunk
}

// CrossEntropy returns the weighted sum over rows of -log softmax(logits[r])[targets[r]],
// skipping rows whose weight is zero or whose target is negative; weights nil
// means weight 1 for every row. When dlogits is not nil it receives
// d(loss)/d(logits) = w_r (softmax(logits[r]) - onehot(t_r)), overwriting it
// (zero for skipped rows); dlogits may alias logits, in which case the logits
// are consumed. It is the fused kernel of the trainers' output layers: one
// float32 exponential per logit (the inference kernels' tensor.ExpShift),
// stored in dlogits and rescaled there into the gradient; sums are in float64. The result does not depend on how
// the rows are split over the cores.
func CrossEntropy(logits []float32, rows, v int, targets []int32, weights []float32, dlogits []float32) float64 {
	var partial [maxCEChunks]float64
	chunk, n := ceChunks(rows, v)
	tensor.Parallel(n, 1, func(clo, chi int) {
		for c := clo; c < chi; c++ {
			var loss float64
			for r := c * chunk; r < min((c+1)*chunk, rows); r++ {
				w := float32(1)
				if weights != nil {
					w = weights[r]
				}
				t := targets[r]
				if w == 0 || t < 0 {
					if dlogits != nil {
						clear(dlogits[r*v : r*v+v])
					}
					continue
				}
				row := logits[r*v : r*v+v]
				xt := row[t]
				mx := rowMax(row)
				var d []float32
				if dlogits != nil {
					d = dlogits[r*v : r*v+v]
				}
				sum := expSum(row, d, mx)
				// -log p_t = log(sum_j e^(x_j - max)) - (x_t - max)
				loss += float64(w) * (math.Log(sum) - float64(xt-mx))
				if d != nil {
					scale := float32(float64(w) / sum)
					for j := range d {
						d[j] *= scale
					}
					d[t] -= w
				}
			}
			partial[c] = loss
		}
	})
	var total float64
	for _, l := range partial[:n] {
		total += l
	}
	return total
}

// SoftCrossEntropy returns the weighted sum over rows of -sum_j p[r,j] log q[r,j]
// with q = softmax(logits[r]) and p a target distribution per row (rows of length
// v). Rows with zero weight are skipped; weights nil means weight 1. When
// dlogits is not nil it receives w_r (q sum_j p[r,j] - p[r]) (overwriting; may
// alias logits). Same fused float32-exponential kernel as CrossEntropy.
func SoftCrossEntropy(logits []float32, rows, v int, p []float32, weights []float32, dlogits []float32) float64 {
	var partial [maxCEChunks]float64
	chunk, n := ceChunks(rows, v)
	tensor.Parallel(n, 1, func(clo, chi int) {
		for c := clo; c < chi; c++ {
			var loss float64
			for r := c * chunk; r < min((c+1)*chunk, rows); r++ {
				w := float32(1)
				if weights != nil {
					w = weights[r]
				}
				if w == 0 {
					if dlogits != nil {
						clear(dlogits[r*v : r*v+v])
					}
					continue
				}
				row, pr := logits[r*v:r*v+v], p[r*v:r*v+v]
				// sum_j p_j (logZ - x_j) = psum logZ - sum_j p_j x_j, read
				// before the exponentials may overwrite the logits.
				var psum, px float64
				for j, x := range row {
					pj := float64(pr[j])
					psum += pj
					px += pj * float64(x)
				}
				mx := rowMax(row)
				var d []float32
				if dlogits != nil {
					d = dlogits[r*v : r*v+v]
				}
				sum := expSum(row, d, mx)
				logZ := math.Log(sum) + float64(mx)
				loss += float64(w) * (psum*logZ - px)
				if d != nil {
					scale := float32(float64(w) * psum / sum)
					for j := range d {
						d[j] = d[j]*scale - w*pr[j]
					}
				}
			}
			partial[c] = loss
		}
	})
	var total float64
	for _, l := range partial[:n] {
		total += l
	}
	return total
}

// CrossEntropyEval is CrossEntropy's forward for evaluation. It leaves the
// logits intact and writes, per row, the loss -log softmax(logits[r])[t_r] into
// rowLoss and the target's rank (the number of strictly larger logits: 0 is a
// top-1 hit, < 5 a top-5 hit) into rank. Rows whose target is negative get loss
// 0 and rank -1.
func CrossEntropyEval(logits []float32, rows, v int, targets []int32, rowLoss []float64, rank []int32) {
	tensor.Parallel(rows, tensor.RowChunk(v), func(lo, hi int) {
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
	})
}
