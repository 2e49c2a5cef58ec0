// Package generate runs the frozen target model as a text generator: prompt to
// tokens, a batched decode loop over pkg/model and pkg/sample that stops at any
// end-of-sequence or end-of-turn token, optional hidden-state capture from the
// very forward passes that produce the tokens, and streaming text.
//
// `drafter generate` uses Generate (one prompt of a target.Target);
// distillation uses Engine (many sequences of a model decoded together,
// refilled as they finish); Resolve turns generation_config.json and the
// command line into Settings for both.
package generate

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/drafter-ai/drafter/pkg/chat"
	"github.com/drafter-ai/drafter/pkg/target"
)

// Request is one `drafter generate` call.
type Request struct {
	// Prompt is the text. With Chat it is one user message rendered with the
	// chat template (add_generation_prompt); otherwise it is raw text,
	// tokenized with the post-processor (BOS where the tokenizer adds one).
	Prompt string
	Chat   bool
	// Settings are the resolved generation settings (Resolve).
	Settings Settings
	// Seed keys the random stream (stream 0).
	Seed uint64
	// OnText, when set, receives the text as it becomes final (streaming).
	OnText func(string) error
}

// Result is what Generate produced; it is what `drafter generate --json` prints.
type Result struct {
	PromptIDs       []int   `json:"prompt_ids"`
	GeneratedIDs    []int   `json:"generated_ids"`
	Text            string  `json:"text"`
	FinishReason    string  `json:"finish_reason"`
	Sampling        string  `json:"sampling"`
	Seconds         float64 `json:"seconds"`
	TokensPerSecond float64 `json:"tokens_per_second"`
}

// Generate answers one prompt with target t (loaded by target.Load),
// streaming text through OnText. Generated ids include the stop id when the
// generation ended at one; Text leaves special tokens out.
func Generate(ctx context.Context, t *target.Target, r Request) (*Result, error) {
	if strings.TrimSpace(r.Prompt) == "" {
		return nil, fmt.Errorf("generate: empty prompt")
	}
	ids, err := encode(t, r)
	if err != nil {
		return nil, err
	}
	budget, err := r.Settings.Budget(len(ids), t.Model.MaxPositions())
	if err != nil {
		return nil, err
	}
	dec := t.Tok.NewStreamDecoder()
	var text strings.Builder
	emitText := func(s string) error {
		if s == "" {
			return nil
		}
		text.WriteString(s)
		if r.OnText != nil {
			return r.OnText(s)
		}
		return nil
	}
	e, err := NewEngine(t.Model, EngineOptions{
		Params: r.Settings.Params, Seed: r.Seed, Stop: t.Stop, Batch: 1, Capacity: len(ids) + budget,
		OnToken: func(_, id int) error { return emitText(dec.Add(id)) },
	})
	if err != nil {
		return nil, err
	}
	res := &Result{PromptIDs: ids, Sampling: r.Settings.Params.String()}
	start := time.Now()
	err = e.Run(ctx, []Job{{Prompt: ids, MaxNew: budget}}, func(d Done) error {
		res.GeneratedIDs = append([]int(nil), d.Tokens...)
		res.FinishReason = d.Finish
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := emitText(dec.Flush()); err != nil {
		return nil, err
	}
	res.Seconds = time.Since(start).Seconds()
	res.Text = text.String()
	if res.Seconds > 0 {
		res.TokensPerSecond = float64(len(res.GeneratedIDs)) / res.Seconds
	}
	return res, nil
}

// encode returns the model input of r's prompt: raw text tokenized with the
// post-processor (BOS where the tokenizer adds one), or, with Chat, one user
// message rendered with the chat template and add_generation_prompt and
// tokenized without special tokens (the template writes BOS itself).
func encode(t *target.Target, r Request) ([]int, error) {
	if !r.Chat {
		return t.Tok.Encode(r.Prompt, true), nil
	}
	if t.Template == nil {
		return nil, fmt.Errorf("generate: a chat prompt needs a chat template, and the model has no chat template; send the prompt as raw text")
	}
	text, err := t.Template.Render([]chat.Message{{Role: "user", Content: r.Prompt}}, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	return t.Tok.Encode(text, false), nil
}
