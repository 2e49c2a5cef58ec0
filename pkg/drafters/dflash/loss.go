package dflash

import "math"

// Loss computes the logits Y·lmHeadᵀ of the last Blocks pass into logits
// [R, V] (lmHead [V, Hd] is the target's, frozen) and returns
// Σ_r w_r·CE(logits_r, labels_r) / wsum over the rows with a label (>= 0)
// and a non-zero weight. When dY is not nil it adds the loss's gradient at Y
// into it ([R, Hd]), for Backward. correct and counted (per slot 1..B-1; nil
// to skip) count the labelled rows whose first argmax is the label.
func (n *Net[T]) Loss(lmHead []T, labels []int, weights []float64, wsum float64, logits, dY []T, correct, counted []int) float64 {
	g := n.g
	R, V, H, B := len(labels), g.Vocab, g.Hidden, g.BlockSize
	linear(n.dev, logits[:R*V], n.Y[:R*H], lmHead, R, H, V, false)
	var loss float64
	for r, lab := range labels {
		lg := logits[r*V : (r+1)*V]
		if lab < 0 || weights[r] == 0 {
			clear(lg) // no gradient from rows without a label
			continue
		}
		mx, arg := math.Inf(-1), 0
		for v, x := range lg {
			if float64(x) > mx {
				mx, arg = float64(x), v
			}
		}
		var z float64
		for _, x := range lg {
			z += math.Exp(float64(x) - mx)
		}
		lz := mx + math.Log(z)
		loss += weights[r] * (lz - float64(lg[lab])) / wsum
		if counted != nil {
			k := r%B - 1
			counted[k]++
			if arg == lab {
				correct[k]++
			}
		}
		if dY == nil {
			continue
		}
		// The logits row becomes its gradient: w/wsum·(softmax − onehot).
		scale := weights[r] / wsum
		for v, x := range lg {
			lg[v] = T(math.Exp(float64(x)-lz) * scale)
		}
		lg[lab] -= T(scale)
	}
	if dY != nil {
		linearBackward(n.dev, dY[:R*H], nil, logits[:R*V], n.Y[:R*H], lmHead, R, H, V)
	}
	return loss
}
