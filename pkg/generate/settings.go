package generate

import (
	"fmt"
	"math"
	"strconv"

	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/target"
)

// Overrides are command-line choices; nil fields keep the default.
type Overrides struct {
	Temperature, TopP, MinP *float64
	TopK, MaxNewTokens      *int
}

// OverrideError is an override the model cannot take (a --max-new-tokens
// that leaves no room for a prompt in its context): a command-line mistake,
// unlike an invalid generation_config.json.
type OverrideError struct{ Err error }

// Error describes the failure.
func (e *OverrideError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *OverrideError) Unwrap() error { return e.Err }

// params returns the sampling overrides given, zero (disabled) elsewhere.
func (o Overrides) params() sample.Params {
	var p sample.Params
	if o.Temperature != nil {
		p.Temperature = *o.Temperature
	}
	if o.TopP != nil {
		p.TopP = *o.TopP
	}
	if o.TopK != nil {
		p.TopK = *o.TopK
	}
	if o.MinP != nil {
		p.MinP = *o.MinP
	}
	return p
}

// Settings are resolved generation settings.
type Settings struct {
	// Params is the decoding rule.
	Params sample.Params `json:"params"`
	// MaxNewTokens caps each generation; 0 means "up to MaxLength".
	MaxNewTokens int `json:"max_new_tokens"`
	// MaxLength caps prompt plus generation (generation_config.json's
	// max_length) when MaxNewTokens is 0; 0 means the model's context.
	MaxLength int `json:"max_length"`
	// Explicit is true when MaxNewTokens was asked for on the command line:
	// a prompt that leaves less room than that is then an error, not a
	// silently shorter generation.
	Explicit bool `json:"-"`
	// Warnings name generation_config.json settings that are not applied.
	Warnings []string `json:"-"`
}

// Resolve resolves the generation settings of target t: generation_config.json's
// sampling values when it sets do_sample (temperature, top_p, top_k, min_p as
// the file sets them; a value the file does not set is disabled, as serving
// engines do, rather than Transformers' top_k=50), otherwise greedy; then each
// override. A temperature override above 0 turns sampling on. Limits come from
// max_new_tokens, else max_length, else the model's context.
func Resolve(t *target.Target, o Overrides) (Settings, error) {
	var s Settings
	g := t.Gen
	if g != nil && g.DoSample {
		s.Params.Temperature = 1
		if g.HasTemperature {
			s.Params.Temperature = g.Temperature
		}
	}
	if g != nil && (g.DoSample || (o.Temperature != nil && *o.Temperature > 0)) {
		if g.HasTopP {
			s.Params.TopP = g.TopP
		}
		if g.HasTopK {
			s.Params.TopK = g.TopK
		}
		if v, ok := rawFloat(g.Raw, "min_p"); ok {
			s.Params.MinP = v
		}
	}
	if g != nil {
		if g.HasRepetitionPenalty && g.RepetitionPenalty != 1 {
			s.Warnings = append(s.Warnings, fmt.Sprintf("generation_config.json repetition_penalty %g is not applied (drafter does not implement it)", g.RepetitionPenalty))
		}
		s.MaxNewTokens, s.MaxLength = g.MaxNewTokens, g.MaxLength
	}
	// An override out of range is refused even where greedy decoding would
	// ignore it: --top-p 2 is a mistake at any temperature.
	if err := o.params().Validate(); err != nil {
		return s, &OverrideError{fmt.Errorf("generate: %w", err)}
	}
	if o.Temperature != nil {
		s.Params.Temperature = *o.Temperature
	}
	if o.TopP != nil {
		s.Params.TopP = *o.TopP
	}
	if o.TopK != nil {
		s.Params.TopK = *o.TopK
	}
	if o.MinP != nil {
		s.Params.MinP = *o.MinP
	}
	if o.MaxNewTokens != nil {
		if *o.MaxNewTokens <= 0 {
			return s, &OverrideError{fmt.Errorf("--max-new-tokens %d: want a positive count", *o.MaxNewTokens)}
		}
		s.MaxNewTokens, s.Explicit = *o.MaxNewTokens, true
		if s.MaxNewTokens >= t.Model.MaxPositions() {
			return s, &OverrideError{fmt.Errorf("--max-new-tokens %d leaves no room for a prompt in the model's context of %d tokens", s.MaxNewTokens, t.Model.MaxPositions())}
		}
	}
	if s.Params.Greedy() {
		s.Params = sample.Params{}
	}
	if err := s.Params.Validate(); err != nil {
		return s, err
	}
	return s, nil
}

// Budget returns how many tokens may be generated after a prompt of n tokens:
// MaxNewTokens, else MaxLength-n, else the rest of the context, never more than
// the context allows. It fails when the prompt leaves no room, or less room
// than an explicit MaxNewTokens.
func (s Settings) Budget(n, context int) (int, error) {
	if n == 0 {
		return 0, fmt.Errorf("generate: empty prompt (no tokens)")
	}
	if n >= context {
		return 0, fmt.Errorf("generate: the prompt has %d tokens; the model's context is %d, which leaves no room to generate", n, context)
	}
	b := context - n
	switch {
	case s.Explicit && n+s.MaxNewTokens > context:
		return 0, fmt.Errorf("generate: a %d-token prompt plus %d new tokens exceeds the model's context of %d tokens; lower --max-new-tokens to %d or shorten the prompt", n, s.MaxNewTokens, context, context-n)
	case s.MaxNewTokens > 0:
		b = min(b, s.MaxNewTokens)
	case s.MaxLength > 0:
		if n >= s.MaxLength {
			return 0, fmt.Errorf("generate: the prompt has %d tokens, at least generation_config.json's max_length %d; pass --max-new-tokens", n, s.MaxLength)
		}
		b = min(b, s.MaxLength-n)
	}
	return b, nil
}

func rawFloat(raw map[string]any, key string) (float64, bool) {
	switch v := raw[key].(type) {
	case float64:
		return v, true
	case interface{ String() string }: // json.Number
		f, err := strconv.ParseFloat(v.String(), 64)
		if err == nil && !math.IsNaN(f) {
			return f, true
		}
	}
	return 0, false
}
