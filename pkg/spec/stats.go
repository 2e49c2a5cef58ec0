package spec

// Stats accumulates acceptance over verification steps for reports. The zero
// value is ready to use; fields are exported for JSON reports.
type Stats struct {
	// Steps counts verification steps (target forwards over a tree).
	Steps int `json:"steps"`
	// Tokens counts committed tokens: accepted draft tokens plus one bonus
	// token per step.
	Tokens int `json:"tokens"`
	// Hist[a] counts the steps that accepted a draft tokens.
	Hist []int `json:"accepted_histogram"`
	// Tried[d-1] counts the steps that examined a draft token at depth d;
	// Accepted[d-1] those that accepted one.
	Tried    []int `json:"tried_by_depth"`
	Accepted []int `json:"accepted_by_depth"`
}

// Add records one step's result.
func (s *Stats) Add(r *Result) { s.AddCounts(len(r.Path), r.Reached, len(r.Tokens)) }

// AddCounts records a step that accepted `accepted` draft tokens, examined
// depths 1..reached, and committed `tokens` tokens (normally accepted+1; less
// when generation stopped inside the step, e.g. at an end-of-sequence token).
func (s *Stats) AddCounts(accepted, reached, tokens int) {
	s.Steps++
	s.Tokens += tokens
	s.Hist = growTo(s.Hist, accepted+1)
	s.Hist[accepted]++
	s.Tried = growTo(s.Tried, reached)
	s.Accepted = growTo(s.Accepted, reached)
	for d := range reached {
		s.Tried[d]++
		if d < accepted {
			s.Accepted[d]++
		}
	}
}

// Merge adds o's counts to s.
func (s *Stats) Merge(o *Stats) {
	s.Steps += o.Steps
	s.Tokens += o.Tokens
	s.Hist = growTo(s.Hist, len(o.Hist))
	for i, v := range o.Hist {
		s.Hist[i] += v
	}
	s.Tried = growTo(s.Tried, len(o.Tried))
	s.Accepted = growTo(s.Accepted, len(o.Accepted))
	for i := range o.Tried {
		s.Tried[i] += o.Tried[i]
		s.Accepted[i] += o.Accepted[i]
	}
}

func growTo(x []int, n int) []int {
	for len(x) < n {
		x = append(x, 0)
	}
	return x
}

// MeanAcceptLength reports the mean number of tokens committed per target
// forward, bonus token included (the "acceptance length" τ of the EAGLE and
// Medusa papers); 0 before any step.
func (s *Stats) MeanAcceptLength() float64 {
	if s.Steps == 0 {
		return 0
	}
	return float64(s.Tokens) / float64(s.Steps)
}

// AcceptRate reports the fraction of steps that accepted a token at depth
// (1-based) among those that examined one: the conditional acceptance rate
// at that depth; 0 when no step reached it.
func (s *Stats) AcceptRate(depth int) float64 {
	d := depth - 1
	if d < 0 || d >= len(s.Tried) || s.Tried[d] == 0 {
		return 0
	}
	return float64(s.Accepted[d]) / float64(s.Tried[d])
}

// ExpectedChainLength returns the expected tokens per target forward of a
// chain draft whose k-th token is accepted with conditional probability acc[k]
// given that the earlier ones were: 1 + sum_k prod_{j<=k} acc[j]. Trainers
// report it from per-step accuracies measured on held-out data.
func ExpectedChainLength(acc []float64) float64 {
	total, prod := 1.0, 1.0
	for _, a := range acc {
		prod *= a
		total += prod
	}
	return total
}
