package dspark

import (
	"math"
	"math/rand/v2"
	"slices"
)

// sampleAnchors returns up to k of the candidates (train/dflash's
// AnchorCandidates from position 0), drawn without replacement by rng and
// sorted ascending (the training blocks of one sequence). cand is permuted.
// It is not train/dflash's SampleAnchors: the two draw different subsets
// from the same stream, and each method's runs and references keep theirs.
func sampleAnchors(dst, cand []int, k int, rng *rand.Rand) []int {
	if k >= len(cand) {
		return append(dst, cand...)
	}
	// A partial Fisher-Yates shuffle: the first k entries are a uniform
	// k-subset.
	for i := range k {
		j := i + rng.IntN(len(cand)-i)
		cand[i], cand[j] = cand[j], cand[i]
	}
	start := len(dst)
	dst = append(dst, cand[:k]...)
	slices.Sort(dst[start:])
	return dst
}

// slotRows fills the B rows of one block anchored at position p of a
// sequence of tokens and loss mask, with DSpark's shifted labels (slot k at
// position p+k predicts x_{p+k+1}, every slot drafts):
//
//   - label[k] = x_{p+k+1} (-1 past the end);
//   - prev[k] = the Markov head's previous token: x_p for slot 0, the
//     ground truth x_{p+k} (slot k-1's label) after it;
//   - tgt[k] = p+k, the position whose target final-norm state gives the
//     distribution of x_{p+k+1} (the position before the label: using the
//     label's own position is methods.md §4's silent break 3);
//   - w[k] = decay[k] while slots 0..k all have an in-bounds response-token
//     label, 0 from the first that does not (DeepSpec's eval mask is the
//     cumulative product over the block: a draft after a miss is never
//     verified).
func slotRows(tokens []int32, lossMask []bool, p int, decay []float32, label, prev, tgt []int32, w []float32) {
	n := len(tokens)
	ok := true
	for k := range decay {
		l := p + k + 1
		label[k], tgt[k], prev[k], w[k] = -1, int32(min(p+k, n-1)), tokens[p], 0
		if k > 0 && p+k < n {
			prev[k] = tokens[p+k]
		}
		ok = ok && l < n && lossMask[l]
		if l < n {
			label[k] = tokens[l]
		}
		if ok {
			w[k] = decay[k]
		}
	}
}

// slotDecay returns DSpark's slot weights exp(-k/γ), k = 0..B-1 (slot 0,
// the first draft, weighs 1; DFlash's exp(-(k-1)/γ) from slot 1 is the
// same curve on its unshifted slots).
func slotDecay(B int, gamma float64) []float32 {
	d := make([]float32, B)
	for k := range d {
		d[k] = 1
		if gamma > 0 {
			d[k] = float32(math.Exp(-float64(k) / gamma))
		}
	}
	return d
}
