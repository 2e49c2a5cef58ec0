package testmodel

import "gonum.org/v1/gonum/stat/distuv"

// ChiSquareP returns the p-value of Pearson's chi-square test of counts
// against probabilities want (bins expecting fewer than 5 draws pooled).
func ChiSquareP(counts []int, want []float64, n int) (p float64, df int) {
	var stat, poolObs, poolExp float64
	bins := 0
	for i, w := range want {
		exp := w * float64(n)
		if exp < 5 {
			poolObs += float64(counts[i])
			poolExp += exp
			continue
		}
		d := float64(counts[i]) - exp
		stat += d * d / exp
		bins++
	}
	if poolExp > 0 {
		d := poolObs - poolExp
		stat += d * d / max(poolExp, 1e-9)
		bins++
	}
	df = bins - 1
	return 1 - distuv.ChiSquared{K: float64(df)}.CDF(stat), df
}
