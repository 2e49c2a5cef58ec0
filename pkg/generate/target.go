// Package generate runs the frozen target model as a text generator: prompt to
// tokens, a batched decode loop over pkg/model and pkg/sample that stops at any
// end-of-sequence or end-of-turn token, optional hidden-state capture from the
// very forward passes that produce the tokens, and streaming text.
//
// `drafter generate` uses Generate (one sequence); distillation uses Engine
// (many sequences decoded together, refilled as they finish).
package generate

import (
	"fmt"
	"math"
	"strconv"

	"github.com/drafter-ai/drafter/data"
	"github.com/drafter-ai/drafter/pkg/chat"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/fingerprint"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tokenizer"
)

// Target is a loaded checkpoint with everything needed to prompt it: model,
// tokenizer, chat template (nil when the model has none), generation config
// (nil when the folder has none) and fingerprint.
type Target struct {
	// Dir is the checkpoint folder ("" for a model built in memory).
	Dir string
	// Model is the target model.
	Model *model.Model
	// Tok is the model's tokenizer.
	Tok *tokenizer.Tokenizer
	// Template is the chat template, nil when the model has none.
	Template *chat.Template
	// Config is config.json.
	Config *checkpoint.Config
	// Gen is generation_config.json, nil when absent.
	Gen *checkpoint.GenerationConfig
	// Fingerprint is the model's fingerprint (package fingerprint).
	Fingerprint string
	// TokenizerHash is the hex SHA-256 of tokenizer.json as canonical JSON
	// ("" when unknown).
	TokenizerHash string
	// Stop are the ids that end a generation: generation_config.json's
	// eos_token_id list (else config.json's), plus the chat template's
	// end-of-turn token when it is a single token.
	Stop []int
}

// Load opens the checkpoint in dir: the weights (converted to float32 on be,
// tensor.CPU() when nil), tokenizer, chat template and generation config, and
// fingerprints it (package fingerprint) with cache (nil: no cache).
func Load(dir string, be tensor.Backend, cache *filecache.Cache) (*Target, error) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	tmpl, err := chat.Load(dir)
	if err != nil {
		return nil, err
	}
	fp, err := fingerprint.Of(ck, cache)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	m, err := model.FromWeights(ck.Config, ck.Weights, be)
	if err != nil {
		return nil, err
	}
	t, err := New(m, tok, tmpl, ck.Config, ck.Generation)
	if err != nil {
		m.Close()
		return nil, err
	}
	t.Dir, t.Fingerprint, t.TokenizerHash = dir, fp.Fingerprint, fp.Tokenizer
	return t, nil
}

// New assembles a Target from parts (tests and benchmarks build models in
// memory). cfg may be nil to use m.Config; gen may be nil.
func New(m *model.Model, tok *tokenizer.Tokenizer, tmpl *chat.Template, cfg *checkpoint.Config, gen *checkpoint.GenerationConfig) (*Target, error) {
	if cfg == nil {
		cfg = m.Config
	}
	t := &Target{Model: m, Tok: tok, Template: tmpl, Config: cfg, Gen: gen}
	eos := cfg.EOS
	if gen != nil && gen.HasEOS && len(gen.EOS) > 0 {
		eos = gen.EOS
	}
	seen := map[int]bool{}
	for _, id := range eos {
		if id < 0 || id >= m.VocabSize() {
			return nil, fmt.Errorf("generate: eos_token_id %d is outside the vocabulary [0, %d)", id, m.VocabSize())
		}
		if !seen[id] {
			seen[id] = true
			t.Stop = append(t.Stop, id)
		}
	}
	if tmpl != nil {
		if eot := tmpl.EndOfTurn(); eot != "" {
			if id, ok := tok.TokenID(eot); ok && !seen[id] && id < m.VocabSize() {
				seen[id] = true
				t.Stop = append(t.Stop, id)
			}
		}
	}
	if len(t.Stop) == 0 {
		return nil, fmt.Errorf("generate: the model has no eos_token_id (config.json and generation_config.json) and no end-of-turn token; generation could never stop")
	}
	return t, nil
}

// Close releases the model.
func (t *Target) Close() error { return t.Model.Close() }

// TemplateHash returns the hex SHA-256 of the chat template's sources and
// special tokens (chat.Sources.Hash: the content, not the file it came from),
// "" when the model has none.
func (t *Target) TemplateHash() string {
	if t.Template == nil {
		return ""
	}
	return t.Template.Hash()
}

// EncodePrompt turns a prompt into the model's input ids: a conversation is
// rendered with the chat template and add_generation_prompt and tokenized
// without special tokens (the template writes BOS itself); raw text is
// tokenized with the post-processor (BOS where the tokenizer adds one).
func (t *Target) EncodePrompt(p data.Prompt) ([]int, error) {
	if p.IsChat() {
		// Line is 0 for a prompt that comes from no file (drafter generate).
		where := ""
		if p.Line > 0 {
			where = fmt.Sprintf(" line %d:", p.Line)
		}
		if t.Template == nil {
			return nil, fmt.Errorf("generate:%s %w", where, data.ErrNoChatTemplate)
		}
		text, err := data.Render(p, t.Template)
		if err != nil {
			return nil, fmt.Errorf("generate:%s %w", where, err)
		}
		return t.Tok.Encode(text, false), nil
	}
	return t.Tok.Encode(p.Text, true), nil
}

// IsStop reports whether id ends a generation.
func (t *Target) IsStop(id int) bool {
	for _, s := range t.Stop {
		if s == id {
			return true
		}
	}
	return false
}

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

// Settings resolves the generation settings: generation_config.json's
// sampling values when it sets do_sample (temperature, top_p, top_k, min_p as
// the file sets them; a value the file does not set is disabled, as serving
// engines do, rather than Transformers' top_k=50), otherwise greedy; then each
// override. A temperature override above 0 turns sampling on. Limits come from
// max_new_tokens, else max_length, else the model's context.
func (t *Target) Settings(o Overrides) (Settings, error) {
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
			return s, &OverrideError{fmt.Errorf("generate: --max-new-tokens %d: want a positive count", *o.MaxNewTokens)}
		}
		s.MaxNewTokens, s.Explicit = *o.MaxNewTokens, true
		if s.MaxNewTokens >= t.Model.MaxPositions() {
			return s, &OverrideError{fmt.Errorf("generate: --max-new-tokens %d leaves no room for a prompt in the model's context of %d tokens", s.MaxNewTokens, t.Model.MaxPositions())}
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
