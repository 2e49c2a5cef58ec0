package sample

import (
	"fmt"
	"math"
	"slices"
)

// Sampler applies one Params to logits vectors of one vocabulary size. It owns
// its scratch buffers, so Probs and Sample allocate nothing; it is not safe for
// concurrent use (give each goroutine its own).
type Sampler struct {
	vocab  int
	params Params
	vals   []float32 // top-k selection scratch
	idx    []int32   // top-p ordering scratch
	probs  []float32 // Sample's distribution
}

// NewSampler returns a Sampler for logits of length vocab.
func NewSampler(vocab int, p Params) (*Sampler, error) {
	if vocab <= 0 {
		return nil, fmt.Errorf("sample: vocabulary size %d: want a positive size", vocab)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{
		vocab:  vocab,
		params: p,
		vals:   make([]float32, vocab),
		idx:    make([]int32, vocab),
		probs:  make([]float32, vocab),
	}, nil
}

// Vocab reports the logits length s accepts.
func (s *Sampler) Vocab() int { return s.vocab }

// Params reports the decoding rule s applies.
func (s *Sampler) Params() Params { return s.params }

// SetParams changes the decoding rule.
func (s *Sampler) SetParams(p Params) error {
	if err := p.Validate(); err != nil {
		return err
	}
	s.params = p
	return nil
}

// Argmax returns the index of the largest logit, the lowest index on ties.
// It fails on an empty vector, on a NaN or +Inf entry, and when every entry is
// -Inf: those are model bugs that must not turn into a token.
func Argmax(logits []float32) (int, error) {
	best, _, err := scan(logits)
	return best, err
}

// scan returns the argmax (lowest index on ties) and the maximum of logits,
// validating them on the way.
func scan(logits []float32) (int, float32, error) {
	if len(logits) == 0 {
		return -1, 0, fmt.Errorf("sample: empty logits vector")
	}
	best, max := 0, logits[0]
	for i, v := range logits {
		if v != v || v > math.MaxFloat32 {
			return -1, 0, fmt.Errorf("sample: logit %d is %v: the model produced a non-finite value", i, v)
		}
		if v > max {
			best, max = i, v
		}
	}
	if max < -math.MaxFloat32 {
		return -1, 0, fmt.Errorf("sample: all %d logits are -Inf: nothing to choose", len(logits))
	}
	return best, max, nil
}

// Probs writes into out the distribution Sample draws from: one-hot on the
// argmax for greedy Params, otherwise softmax(logits / temperature) restricted
// by top-k, top-p and min-p (in that order) and renormalised. len(logits) and
// len(out) must equal Vocab(). Logits may hold -Inf (masked tokens) but no NaN
// or +Inf.
//
// Top-k is applied to the raw logits (the same set as on logits/temperature,
// since temperature > 0 preserves order); the softmax is computed in float64 as
// exp((logit - max) / temperature), which cannot overflow for small
// temperatures.
func (s *Sampler) Probs(logits, out []float32) error {
	if len(logits) != s.vocab || len(out) != s.vocab {
		return fmt.Errorf("sample: logits of length %d and output of length %d: want both %d (the vocabulary size)", len(logits), len(out), s.vocab)
	}
	best, max, err := scan(logits)
	if err != nil {
		return err
	}
	p := s.params
	if p.Greedy() {
		clear(out)
		out[best] = 1
		return nil
	}

	// Top-k: keep logits >= the k-th largest (ties with it included).
	thr := float32(math.Inf(-1))
	if p.TopK > 0 && p.TopK < s.vocab {
		copy(s.vals, logits)
		thr = kthLargest(s.vals, p.TopK)
	}

	// Softmax over the kept tokens.
	invT := 1 / p.Temperature
	mx := float64(max)
	var sum float64
	for i, v := range logits {
		if v < thr || v < -math.MaxFloat32 {
			out[i] = 0
			continue
		}
		e := math.Exp((float64(v) - mx) * invT)
		out[i] = float32(e)
		sum += e
	}
	scaleTo(out, sum)

	masked := false
	if p.TopP > 0 && p.TopP < 1 {
		masked = s.topP(out, p.TopP) || masked
	}
	if p.MinP > 0 {
		var pmax float32
		for _, v := range out {
			if v > pmax {
				pmax = v
			}
		}
		cut := float32(p.MinP * float64(pmax))
		for i, v := range out {
			if v < cut && v > 0 {
				out[i] = 0
				masked = true
			}
		}
	}
	if masked {
		var sum float64
		for _, v := range out {
			sum += float64(v)
		}
		scaleTo(out, sum)
	}
	return nil
}

// scaleTo divides out by sum (computed by the caller in float64).
func scaleTo(out []float32, sum float64) {
	inv := 1 / sum
	for i, v := range out {
		out[i] = float32(float64(v) * inv)
	}
}

// better orders tokens for top-p: higher probability first, lower id on ties.
func better(p []float32, a, b int32) bool {
	return p[a] > p[b] || (p[a] == p[b] && a < b)
}

// topP zeroes the tokens of out (a normalised distribution) ranked after the
// point where the tokens above them hold topP of the mass. It visits tokens in
// decreasing order without sorting the whole vocabulary: it selects and sorts
// the best chunk of the remaining tokens, doubling the chunk until the mass is
// reached. It reports whether any token was zeroed.
func (s *Sampler) topP(out []float32, topP float64) bool {
	idx := s.idx[:0]
	for i, v := range out {
		if v > 0 {
			idx = append(idx, int32(i))
		}
	}
	cmp := func(a, b int32) int {
		if better(out, a, b) {
			return -1
		}
		if better(out, b, a) {
			return 1
		}
		return 0
	}
	var cum float64
	last := int32(-1) // the last kept token in rank order
	reached := false
	for start, chunk := 0, 64; start < len(idx) && !reached; chunk *= 2 {
		end := start + chunk
		if end >= len(idx) {
			end = len(idx)
		} else {
			selectBest(out, idx[start:], end-start)
		}
		slices.SortFunc(idx[start:end], cmp)
		for _, t := range idx[start:end] {
			if cum >= topP {
				reached = true
				break
			}
			cum += float64(out[t])
			last = t
		}
		start = end
	}
	if !reached {
		return false // every token was kept
	}
	masked := false
	for i, v := range out {
		if v > 0 && better(out, last, int32(i)) {
			out[i] = 0
			masked = true
		}
	}
	return masked
}

// selectBest partially orders idx so that idx[:k] holds its k best tokens
// (by better) in some order: quickselect with a median-of-three pivot.
func selectBest(p []float32, idx []int32, k int) {
	lo, hi := 0, len(idx)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Median of three moved to idx[hi] as the pivot.
		if better(p, idx[mid], idx[lo]) {
			idx[mid], idx[lo] = idx[lo], idx[mid]
		}
		if better(p, idx[hi], idx[lo]) {
			idx[hi], idx[lo] = idx[lo], idx[hi]
		}
		if better(p, idx[mid], idx[hi]) {
			idx[mid], idx[hi] = idx[hi], idx[mid]
		}
		pivot := idx[hi]
		store := lo
		for i := lo; i < hi; i++ {
			if better(p, idx[i], pivot) {
				idx[i], idx[store] = idx[store], idx[i]
				store++
			}
		}
		idx[store], idx[hi] = idx[hi], idx[store]
		// idx[lo:store] are better than the pivot, now at idx[store].
		switch {
		case store == k-1 || store == k:
			return
		case store > k:
			hi = store - 1
		default:
			lo = store + 1
		}
	}
}

// kthLargest returns the k-th largest value of v (1-based), reordering v. It
// is a quickselect with three-way partitioning, linear on average even when
// many values tie (for example many -Inf).
func kthLargest(v []float32, k int) float32 {
	lo, hi := 0, len(v) // v[lo:hi] holds the answer at rank k-1
	want := k - 1
	for {
		if hi-lo == 1 {
			return v[lo]
		}
		// Median of three as the pivot value.
		a, b, c := v[lo], v[lo+(hi-lo)/2], v[hi-1]
		if a < b {
			a, b = b, a
		}
		if b < c {
			b = c
			if a < b {
				b = a
			}
		}
		pivot := b
		// Partition descending: [lo,gt) > pivot, [gt,i) == pivot, [lt,hi) < pivot.
		gt, i, lt := lo, lo, hi
		for i < lt {
			switch x := v[i]; {
			case x > pivot:
				v[i], v[gt] = v[gt], v[i]
				gt++
				i++
			case x < pivot:
				lt--
				v[i], v[lt] = v[lt], v[i]
			default:
				i++
			}
		}
		switch {
		case want < gt:
			hi = gt
		case want < lt:
			return pivot
		default:
			lo = lt
		}
	}
}

// Sample draws a token from the distribution Probs computes for logits (the
// argmax, without consuming randomness, for greedy Params).
func (s *Sampler) Sample(logits []float32, rng *RNG) (int, error) {
	if s.params.Greedy() {
		if len(logits) != s.vocab {
			return -1, fmt.Errorf("sample: logits of length %d: want %d (the vocabulary size)", len(logits), s.vocab)
		}
		return Argmax(logits)
	}
	if err := s.Probs(logits, s.probs); err != nil {
		return -1, err
	}
	return SampleProbs(s.probs, rng)
}

// SampleProbs draws index i with probability probs[i] / sum(probs) by inverse
// transform with one uniform draw. probs need not be normalised but must be
// non-negative with a positive, finite sum.
func SampleProbs(probs []float32, rng *RNG) (int, error) {
	var sum float64
	for i, v := range probs {
		if !(v >= 0) || v > math.MaxFloat32 {
			return -1, fmt.Errorf("sample: probability %d is %v: want a finite non-negative value", i, v)
		}
		sum += float64(v)
	}
	if !(sum > 0) {
		return -1, fmt.Errorf("sample: the %d probabilities sum to %v: nothing to draw", len(probs), sum)
	}
	u := rng.Float64() * sum
	var cum float64
	last := -1
	for i, v := range probs {
		if v == 0 {
			continue
		}
		cum += float64(v)
		if u < cum {
			return i, nil
		}
		last = i
	}
	return last, nil // u rounded past the final partial sum
}
