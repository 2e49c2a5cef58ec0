// Package sample turns a logits vector into a next token: greedy decoding, or
// sampling from the logits warped by temperature, top-k, top-p and min-p.
//
// The warpers are applied in Hugging Face transformers' order: temperature,
// then top-k, then top-p, then min-p, each on the distribution left by the
// previous one (renormalised). vLLM's V1 sampler applies min-p before top-k and
// top-p; min-p commutes with top-k (it compares a token's probability with the
// top token's, a ratio renormalisation does not change) but not with top-p, so
// results differ from vLLM only when both top-p and min-p are set.
//
// Sampler.Probs returns the exact distribution Sampler.Sample draws from:
// speculative decoding verifies drafts against Probs and draws residual tokens
// with SampleProbs, so that it reproduces plain sampling exactly.
//
// Randomness comes from RNG, one independent, serialisable stream per
// sequence keyed by (seed, stream), so results do not depend on batch
// composition and resume exactly.
package sample

import (
	"fmt"
	"math"
)

// Params selects the decoding rule. The zero value is greedy decoding.
type Params struct {
	// Temperature divides the logits; 0 selects greedy decoding (argmax,
	// lowest token id on ties) and ignores the other fields.
	Temperature float64
	// TopP keeps the smallest set of most probable tokens whose probability
	// reaches TopP (Hugging Face's rule: a token is dropped when the tokens
	// ranked above it already hold TopP). 0 and 1 disable it.
	TopP float64
	// TopK keeps the TopK largest logits and every token tied with the
	// TopK-th (Hugging Face's rule). 0 disables it.
	TopK int
	// MinP drops tokens whose probability is below MinP times the most
	// probable token's. 0 disables it.
	MinP float64
}

// Greedy reports whether p selects greedy decoding (Temperature == 0).
func (p Params) Greedy() bool { return p.Temperature == 0 }

// Validate reports the first out-of-range field.
func (p Params) Validate() error {
	switch {
	case math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0) || p.Temperature < 0:
		return fmt.Errorf("sample: temperature %v: want 0 (greedy) or a finite positive value", p.Temperature)
	case math.IsNaN(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("sample: top-p %v: want a value in [0, 1] (0 or 1 disables it)", p.TopP)
	case p.TopK < 0:
		return fmt.Errorf("sample: top-k %d: want 0 (disabled) or a positive count", p.TopK)
	case math.IsNaN(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("sample: min-p %v: want a value in [0, 1] (0 disables it)", p.MinP)
	}
	return nil
}

// String renders p the way reports print it.
func (p Params) String() string {
	if p.Greedy() {
		return "greedy"
	}
	return fmt.Sprintf("temperature=%g top_k=%d top_p=%g min_p=%g", p.Temperature, p.TopK, p.TopP, p.MinP)
}
