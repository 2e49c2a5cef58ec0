package medusa

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The output layer's softmax cross-entropy is fused here rather than taken from
// nn.CrossEntropy: at V=32000 its two float64 exponentials per logit cost as
// much as the lm_head GEMMs. This version takes one float32 exponential per
// logit (expf, about 1 ulp), stores it in place and rescales it into the
// gradient, so the [rows, V] buffer holds logits, then probabilities, then
// d(loss)/d(logits).

// expf returns e^x for x <= 0 (the softmax's shifted logits) to about one ulp of
// float32, and 0 below -86 where e^x is under 1e-37 and cannot change a sum >= 1.
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

// softmaxCE computes, for each of rows rows of logits (length v), the loss
// -log softmax(row)[target] into rowLoss, and when w != 0 overwrites the row with
// w * (softmax(row) - onehot(target)). Rows are split over the cores; the caller
// sums rowLoss in order, so the result does not depend on the split.
func softmaxCE(logits []float32, rows, v int, targets []int32, w float32, rowLoss []float64) {
	tensor.Parallel(rows, 1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := logits[r*v : r*v+v]
			t := targets[r]
			xt := row[t]
			mx := row[0]
			for _, x := range row {
				if x > mx {
					mx = x
				}
			}
			var s0, s1 float64
			j := 0
			for ; j+2 <= len(row); j += 2 {
				e0, e1 := expf(row[j]-mx), expf(row[j+1]-mx)
				row[j], row[j+1] = e0, e1
				s0 += float64(e0)
				s1 += float64(e1)
			}
			for ; j < len(row); j++ {
				e := expf(row[j] - mx)
				row[j] = e
				s0 += float64(e)
			}
			sum := s0 + s1
			// -log p_t = log(sum exp(x - max)) - (x_t - max)
			rowLoss[r] = math.Log(sum) - float64(xt-mx)
			scale := float32(float64(w) / sum)
			for j := range row {
				row[j] *= scale
			}
			row[t] -= w
		}
	})
}

// softmaxCEEval is softmaxCE's forward-only form for evaluation: it leaves the
// logits intact, writes each row's loss, and counts rows whose target ranks
// first and within the top five (rank = number of strictly larger logits).
func softmaxCEEval(logits []float32, rows, v int, targets []int32, rowLoss []float64, rank []int32) {
	tensor.Parallel(rows, 1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := logits[r*v : r*v+v]
			lt := row[targets[r]]
			mx := row[0]
			above := int32(0)
			for _, x := range row {
				if x > mx {
					mx = x
				}
				if x > lt {
					above++
				}
			}
			var sum float64
			for _, x := range row {
				sum += float64(expf(x - mx))
			}
			rowLoss[r] = math.Log(sum) + float64(mx) - float64(lt)
			rank[r] = above
		}
	})
}
