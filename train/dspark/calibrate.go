package dspark

import (
	"fmt"

	ddspark "github.com/drafter-ai/drafter/pkg/drafters/dspark"
	"github.com/drafter-ai/drafter/train/loop"
)

// heldOut is the held-out blocks as the STS fit reads them
// (ddspark.FitSTS's layout): per block B slots, block-major, and the
// number of leading slots with a label.
type heldOut struct {
	logits, greedy, sampled []float64
	valid                   []int
}

// heldOutBlocks runs the held-out samples through the current weights with
// the blocks Evaluate draws (the same fixed anchor streams) and gathers per
// slot the confidence logit and both rules' conditional outcomes: greedy 1
// when the slot's argmax (Markov bias from the ground-truth previous token,
// which is the accepted draft when the slots before were accepted) is the
// label, else 0; sampled α = 1 − ½‖p_d − p_t‖₁ clamped to [0, 1], the
// probability that speculative sampling at temperature 1 accepts the
// slot's draft. A row of weight 0 (its label is not a response token, or
// lies past the end) ends the block's valid prefix, as in tally.
func (t *trainer) heldOutBlocks() (*heldOut, error) {
	B := t.g.BlockSize
	h := &heldOut{}
	err := t.eachHeldOut(nil, func(sb *seqBatch, _ LossStats) {
		for b := 0; b*B < len(sb.labels); b++ {
			n := 0
			for k := range B {
				r := b*B + k
				if sb.w[r] == 0 {
					break
				}
				n++
				g := 0.0
				if t.pred[r] == sb.labels[r] {
					g = 1
				}
				h.logits = append(h.logits, float64(t.c[r]))
				h.greedy = append(h.greedy, g)
				h.sampled = append(h.sampled, min(max(t.loss.alpha[r], 0), 1))
			}
			if n == 0 {
				continue
			}
			// Pad past the valid prefix: FitSTS ignores those slots.
			for range B - n {
				h.logits, h.greedy, h.sampled = append(h.logits, 0), append(h.greedy, 0), append(h.sampled, 0)
			}
			h.valid = append(h.valid, n)
		}
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// calibrate fits the confidence head's Sequential Temperature Scaling on
// the held-out blocks under the current weights (Export's: the best ones),
// for greedy verification and for speculative sampling. It returns nil
// without a confidence head or without a held-out block: there is nothing
// to calibrate, or nothing to calibrate on.
func (t *trainer) calibrate() (*ddspark.Calibration, error) {
	if t.conf == nil {
		return nil, nil
	}
	h, err := t.heldOutBlocks()
	if err != nil {
		return nil, err
	}
	if len(h.valid) == 0 {
		return nil, nil
	}
	c, err := ddspark.Calibrate(t.g.BlockSize, h.logits, h.greedy, h.sampled, h.valid)
	if err != nil {
		return nil, fmt.Errorf("dspark: confidence calibration on %d held-out blocks: %w", len(h.valid), err)
	}
	return c, nil
}

// calibrationLine is the progress line that reports a calibration.
func calibrationLine(c *ddspark.Calibration) string {
	rule := func(name string, temps, before, after []float64, cf ddspark.CrossFit) string {
		verdict := "applied"
		if !cf.Applied {
			verdict = "not applied (T = 1 kept)"
		}
		return fmt.Sprintf("%s T %s, ECE per slot %s → %s; on unseen halves %.3f → %.3f: %s", name, loop.FormatFloats(temps),
			loop.FormatFloats(before), loop.FormatFloats(after), cf.Before, cf.After, verdict)
	}
	return fmt.Sprintf("confidence calibration (STS, %d held-out blocks): %s; %s", c.Blocks,
		rule("greedy", c.Greedy, c.ECE.GreedyBefore, c.ECE.GreedyAfter, c.Cross.Greedy),
		rule("sampled", c.Sampled, c.ECE.SampledBefore, c.ECE.SampledAfter, c.Cross.Sampled))
}
