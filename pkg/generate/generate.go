package generate

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/drafter-ai/drafter/data"
	"github.com/drafter-ai/drafter/pkg/chat"
)

// Request is one `drafter generate` call.
type Request struct {
	// Prompt is the text. With Chat it is one user message rendered with the
	// chat template (add_generation_prompt); otherwise it is raw text,
	// tokenized with the post-processor (BOS where the tokenizer adds one).
	Prompt string
	Chat   bool
	// Settings are the resolved generation settings (Target.Settings).
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

// Generate answers one prompt, streaming text through OnText. Generated ids
// include the stop id when the generation ended at one; Text leaves special
// tokens out.
func (t *Target) Generate(ctx context.Context, r Request) (*Result, error) {
	if strings.TrimSpace(r.Prompt) == "" {
		return nil, fmt.Errorf("generate: empty prompt")
	}
	p := data.Prompt{Text: r.Prompt}
	if r.Chat {
		p = data.Prompt{Messages: []chat.Message{{Role: "user", Content: r.Prompt}}}
	}
	ids, err := t.EncodePrompt(p)
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
