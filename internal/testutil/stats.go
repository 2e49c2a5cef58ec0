package testutil

import (
	"math/rand/v2"

	"gonum.org/v1/gonum/stat/distuv"
)

// ChiSquareP returns the p-value of Pearson's chi-square test of counts, the
// outcomes of n draws, against the probabilities probs, and its degrees of
// freedom. Cells expecting fewer than 5 draws are pooled into one. A draw in
// a cell of probability 0 gives p = 0: the sampler drew what it never may.
// Fewer than two cells leave nothing to test: p = 1.
func ChiSquareP(counts []int, probs []float64, n int) (p float64, df int) {
	var stat, poolObs, poolExp float64
	df = -1
	for i, pr := range probs {
		if pr == 0 {
			if counts[i] != 0 {
				return 0, df
			}
			continue
		}
		e := pr * float64(n)
		if e < 5 {
			poolObs += float64(counts[i])
			poolExp += e
			continue
		}
		d := float64(counts[i]) - e
		stat += d * d / e
		df++
	}
	if poolExp > 0 {
		d := poolObs - poolExp
		stat += d * d / poolExp
		df++
	}
	if df < 1 {
		return 1, df
	}
	return distuv.ChiSquared{K: float64(df)}.Survival(stat), df
}

// RandomTree returns the parents of an n-node tree in topological order
// (every parent before its child; -1 for a root), with several roots and
// branches: node i is a root with probability 2/(i+2), else a child of one of
// the nodes before it.
func RandomTree(r *rand.Rand, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = max(r.IntN(i+2)-2, -1) // -2..i-1
	}
	return p
}
