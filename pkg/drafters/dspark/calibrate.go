package dspark

import (
	"fmt"
	"math"
)

// CalibrationSTS names Sequential Temperature Scaling (DSpark §3.2).
const CalibrationSTS = "sts"

// Calibration is the confidence head's calibration on held-out blocks: per
// slot k a temperature T_k that the slot's confidence logit is divided by,
// fitted by Sequential Temperature Scaling so that the cumulative product
// Π_{i≤k} σ(z_i/T_i) predicts whether the first k+1 drafts are accepted.
// Acceptance differs with the serving rule, so there is one set per rule:
// Greedy (a draft is accepted when it is the target's argmax) and Sampled
// (speculative sampling at temperature 1: a draft is accepted with
// probability α = 1 - ½‖p_d - p_t‖₁). train writes it into drafter.json;
// eval reads it from there (no engine's config key for it is known).
type Calibration struct {
	// Method is CalibrationSTS.
	Method string `json:"method"`
	// Greedy and Sampled are the per-slot temperatures, one per slot of
	// the block.
	Greedy  []float64 `json:"greedy"`
	Sampled []float64 `json:"sampled"`
	// Blocks is the number of held-out blocks fitted on.
	Blocks int `json:"blocks"`
	// ECE is each rule's expected calibration error of the cumulative
	// products per slot, before (every T_k = 1) and after the fit, on the
	// blocks fitted on.
	ECE CalibrationECE `json:"ece"`
}

// CalibrationECE are the ECEs per slot of both rules before and after
// calibration.
type CalibrationECE struct {
	GreedyBefore  []float64 `json:"greedy_before"`
	GreedyAfter   []float64 `json:"greedy_after"`
	SampledBefore []float64 `json:"sampled_before"`
	SampledAfter  []float64 `json:"sampled_after"`
}

// Validate checks c for a block of B slots: a known method and B finite
// positive temperatures per rule.
func (c *Calibration) Validate(B int) error {
	if c.Method != CalibrationSTS {
		return fmt.Errorf("confidence_calibration.method %q: want %q", c.Method, CalibrationSTS)
	}
	for _, set := range []struct {
		name string
		t    []float64
	}{{"greedy", c.Greedy}, {"sampled", c.Sampled}} {
		if len(set.t) != B {
			return fmt.Errorf("confidence_calibration.%s holds %d temperatures, want one per slot of the block (%d)", set.name, len(set.t), B)
		}
		for k, v := range set.t {
			if !(v > 0) || math.IsInf(v, 0) {
				return fmt.Errorf("confidence_calibration.%s[%d] = %g: want a finite positive temperature", set.name, k, v)
			}
		}
	}
	return nil
}

// Temperatures returns the per-slot temperatures for a serving rule:
// greedy verification or speculative sampling.
func (c *Calibration) Temperatures(greedy bool) []float64 {
	if greedy {
		return c.Greedy
	}
	return c.Sampled
}
