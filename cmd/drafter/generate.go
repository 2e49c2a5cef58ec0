package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/pkg/generate"
)

type generateOptions struct {
	Model, Prompt string
	Chat, JSON    bool
	Sampling      generate.Overrides
	Seed          uint64
	Out, ErrOut   io.Writer
	Device        deviceChoice
}

func newCmdGenerate(runF func(*generateOptions) error) *cobra.Command {
	o := &generateOptions{}
	var sf samplingFlags
	c := &cobra.Command{
		Use:   "generate --model DIR --prompt TEXT [--chat] [--max-new-tokens N] [sampling flags]",
		Short: "Run the target model on one prompt and stream its answer",
		Long: `generate runs the checkpoint on one prompt and streams the text as it is produced: the
quickest way to see that drafter runs your model exactly. The raw prompt is tokenized with the
tokenizer's post-processor (BOS where it adds one); with --chat the prompt is one user message
rendered with the model's chat template. Generation stops at any eos_token_id
(generation_config.json, else config.json), at the template's end-of-turn token, or after
--max-new-tokens. Sampling defaults come from generation_config.json (greedy unless it sets
do_sample); flags override them.`,
		Example: `  drafter generate --model models/stories260k --prompt "Once upon a time" --max-new-tokens 64
  drafter generate --model /models/my-sft --chat --prompt "Write a haiku" --temperature 0.7 --json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkFlags(c, sf.checks()); err != nil {
				return err
			}
			o.Sampling, o.Seed = sf.overrides(c.Flags()), sf.seed
			o.Out, o.ErrOut = c.OutOrStdout(), c.ErrOrStderr()
			if runF != nil {
				return runF(o)
			}
			return runGenerate(c.Context(), o)
		},
	}
	fs := c.Flags()
	fs.StringVar(&o.Model, "model", "", "Hugging Face checkpoint folder")
	fs.StringVar(&o.Prompt, "prompt", "", "the prompt text")
	fs.BoolVar(&o.Chat, "chat", false, "send the prompt as one user message through the chat template")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object: prompt_ids, generated_ids, text, finish_reason, tokens_per_second")
	sf.register(fs)
	o.Device.register(c)
	requireFlags(c, "model", "prompt")
	return c
}

func runGenerate(ctx context.Context, o *generateOptions) error {
	t, dev, err := loadTarget(o.Model, &o.Device)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer t.Close()
	if o.Chat && t.Template == nil {
		return usagef("--chat: %s has no chat template (tokenizer_config.json sets no chat_template); leave out --chat to send the prompt as raw text", o.Model)
	}
	st, err := generate.Resolve(t, o.Sampling)
	if err != nil {
		return overrideUsage(err)
	}
	for _, w := range st.Warnings {
		fmt.Fprintln(o.ErrOut, "drafter: warning:", w)
	}
	req := generate.Request{Prompt: o.Prompt, Chat: o.Chat, Settings: st, Seed: o.Seed}
	if !o.JSON {
		req.OnText = func(s string) error { _, err := io.WriteString(o.Out, s); return err }
	}
	res, err := generate.Generate(ctx, t, req)
	if err != nil {
		return err
	}
	if o.JSON {
		return json.NewEncoder(o.Out).Encode(res)
	}
	fmt.Fprintln(o.Out)
	fmt.Fprintf(o.ErrOut, "[%d prompt tokens, %d generated (%s), %.1f tokens/s, %s]\n",
		len(res.PromptIDs), len(res.GeneratedIDs), res.FinishReason, res.TokensPerSecond, res.Sampling)
	return nil
}
