package nn

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Softmax replaces each of rows rows of length n with its softmax, subtracting
// the row maximum first and summing in float64.
func Softmax(x []float32, rows, n int) {
	tensor.Parallel(rows, tensor.RowChunk(n), func(lo, hi int) {
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

// maxCEChunks bounds the number of row chunks a cross-entropy call splits its
// rows into, so the per-chunk loss sums fit in a stack array.
const maxCEChunks = 64

// expf returns e^x for x <= 0 (a softmax's shifted logits) to about one ulp of
// float32, and 0 below -86, where e^x is under 1e-37 and cannot change a sum
// >= 1. The softmax cross-entropies below take one of these per logit instead
// of a float64 math.Exp: at a 32000-token vocabulary the exponentials would
// otherwise cost as much as the lm_head GEMMs around them.
func expf(x float32) float32 {
	if x < -86 {
		return 0
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693145751953125
		ln2lo = 1.42860682030941723212e-6
		magic = 12582912 // 1.5 * 2^23: adding and subtracting it rounds to an integer
	)
	n := (x*log2e + magic) - magic
	r := x - n*ln2hi - n*ln2lo // |r| <= ln2/2
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	return math.Float32frombits(math.Float32bits(p) + uint32(int32(n))<<23)
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

// expSum returns sum_j e^(row[j]-mx), accumulated in float64 over two lanes;
// when e is not nil the exponentials are stored there (e may alias row).
func expSum(row, e []float32, mx float32) float64 {
	var s0, s1 float64
	j := 0
	if e == nil {
		for ; j+2 <= len(row); j += 2 {
			s0 += float64(expf(row[j] - mx))
			s1 += float64(expf(row[j+1] - mx))
		}
		if j < len(row) {
			s0 += float64(expf(row[j] - mx))
		}
		return s0 + s1
	}
	e = e[:len(row)]
	for ; j+2 <= len(row); j += 2 {
		e0, e1 := expf(row[j]-mx), expf(row[j+1]-mx)
		e[j], e[j+1] = e0, e1
		s0 += float64(e0)
		s1 += float64(e1)
	}
	if j < len(row) {
		e[j] = expf(row[j] - mx)
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
// float32 exponential per logit (expf), stored in dlogits and rescaled there
// into the gradient; sums are in float64. The result does not depend on how
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
