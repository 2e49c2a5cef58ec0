package nn

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Softmax replaces each of rows rows of length n with its softmax, subtracting
// the row maximum first and summing in float64.
func Softmax(x []float32, rows, n int) {
	tensor.Parallel(rows, rowChunk(n), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			softmaxRow(x[r*n : r*n+n])
		}
	})
}

// softmaxRow normalises one row in place and returns log(sum exp(x - max)) and
// the max, so callers can form log-probabilities.
func softmaxRow(x []float32) (logZ float64, max float32) {
	max = x[0]
	for _, v := range x[1:] {
		if v > max {
			max = v
		}
	}
	var sum float64
	for i, v := range x {
		e := float32(math.Exp(float64(v - max)))
		x[i] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
	return math.Log(sum), max
}

// CrossEntropy returns the weighted sum over rows of -log softmax(logits[r])[targets[r]],
// skipping rows whose weight is zero or whose target is negative. When dlogits is
// not nil it receives d(loss)/d(logits) = w_r (softmax(logits[r]) - onehot(t_r)),
// overwriting it (zero for skipped rows); dlogits may alias logits, in which case
// the logits are consumed.
func CrossEntropy(logits []float32, rows, v int, targets []int32, weights []float32, dlogits []float32) float64 {
	return crossEntropy(logits, rows, v, targets, nil, weights, dlogits)
}

// SoftCrossEntropy returns the weighted sum over rows of -sum_j p[r,j] log q[r,j]
// with q = softmax(logits[r]) and p a target distribution per row (rows of length
// v). Rows with zero weight are skipped. When dlogits is not nil it receives
// w_r (q sum_j p[r,j] - p[r]) (overwriting; may alias logits).
func SoftCrossEntropy(logits []float32, rows, v int, p []float32, weights []float32, dlogits []float32) float64 {
	return crossEntropy(logits, rows, v, nil, p, weights, dlogits)
}

// crossEntropy is the fused softmax + loss + gradient shared by the hard and the
// soft forms; exactly one of targets and p is non-nil.
func crossEntropy(logits []float32, rows, v int, targets []int32, p []float32, weights []float32, dlogits []float32) float64 {
	var losses [64]float64 // per-worker partial sums, indexed by chunk start
	chunk := rowChunk(v)
	nchunks := (rows + chunk - 1) / chunk
	partial := losses[:0]
	if nchunks <= len(losses) {
		partial = losses[:nchunks]
	} else {
		partial = make([]float64, nchunks)
	}
	tensor.Parallel(nchunks, 1, func(clo, chi int) {
		for c := clo; c < chi; c++ {
			var loss float64
			for r := c * chunk; r < (c+1)*chunk && r < rows; r++ {
				w := float32(1)
				if weights != nil {
					w = weights[r]
				}
				row := logits[r*v : r*v+v]
				skip := w == 0 || (targets != nil && targets[r] < 0)
				if skip {
					if dlogits != nil {
						clear(dlogits[r*v : r*v+v])
					}
					continue
				}
				max := row[0]
				for _, x := range row[1:] {
					if x > max {
						max = x
					}
				}
				var sum float64
				for _, x := range row {
					sum += math.Exp(float64(x - max))
				}
				logZ := math.Log(sum) + float64(max)
				if targets != nil {
					t := targets[r]
					loss += float64(w) * (logZ - float64(row[t]))
					if dlogits != nil {
						d := dlogits[r*v : r*v+v]
						for j, x := range row {
							d[j] = w * float32(math.Exp(float64(x)-logZ))
						}
						d[t] -= w
					}
					continue
				}
				pr := p[r*v : r*v+v]
				var psum, l float64
				for j, x := range row {
					if pj := float64(pr[j]); pj != 0 {
						psum += pj
						l += pj * (logZ - float64(x))
					}
				}
				loss += float64(w) * l
				if dlogits != nil {
					d := dlogits[r*v : r*v+v]
					for j, x := range row {
						d[j] = w * (float32(math.Exp(float64(x)-logZ)*psum) - pr[j])
					}
				}
			}
			partial[c] = loss
		}
	})
	var total float64
	for _, l := range partial {
		total += l
	}
	return total
}
