package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/pkg/generate"
)

// samplingFlags are the sampling flags distill and generate share; only the
// flags the user set override generation_config.json.
type samplingFlags struct {
	temperature, topP, minP float64
	topK, maxNew            int
	seed                    uint64
}

func (f *samplingFlags) add(c *cobra.Command) {
	c.Flags().Float64Var(&f.temperature, "temperature", 0, "sampling temperature; 0 is greedy (default: generation_config.json when do_sample, else greedy)")
	c.Flags().Float64Var(&f.topP, "top-p", 0, "nucleus sampling mass, 0 or 1 disables (default: generation_config.json)")
	c.Flags().IntVar(&f.topK, "top-k", 0, "keep the k most probable tokens, 0 disables (default: generation_config.json)")
	c.Flags().Float64Var(&f.minP, "min-p", 0, "drop tokens below min-p times the top probability, 0 disables (default: generation_config.json)")
	c.Flags().IntVar(&f.maxNew, "max-new-tokens", 0, "most tokens to generate (default: generation_config.json max_new_tokens, else max_length, else the context)")
	c.Flags().Uint64Var(&f.seed, "seed", 0, "random seed")
}

func (f *samplingFlags) overrides(c *cobra.Command) generate.Overrides {
	var o generate.Overrides
	if c.Flags().Changed("temperature") {
		o.Temperature = &f.temperature
	}
	if c.Flags().Changed("top-p") {
		o.TopP = &f.topP
	}
	if c.Flags().Changed("top-k") {
		o.TopK = &f.topK
	}
	if c.Flags().Changed("min-p") {
		o.MinP = &f.minP
	}
	if c.Flags().Changed("max-new-tokens") {
		o.MaxNewTokens = &f.maxNew
	}
	return o
}

func newGenerateCmd() *cobra.Command {
	var modelDir, prompt string
	var chatMode, asJSON bool
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
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := generate.Load(modelDir, nil, fileCache())
			if err != nil {
				return err
			}
			defer t.Close()
			st, err := t.Settings(sf.overrides(cmd))
			if err != nil {
				return &usageError{err}
			}
			for _, w := range st.Warnings {
				fmt.Fprintln(os.Stderr, "drafter: warning:", w)
			}
			req := generate.Request{Prompt: prompt, Chat: chatMode, Settings: st, Seed: sf.seed}
			if !asJSON {
				req.OnText = func(s string) error { _, err := os.Stdout.WriteString(s); return err }
			}
			res, err := t.Generate(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(res)
			}
			fmt.Println()
			fmt.Fprintf(os.Stderr, "[%d prompt tokens, %d generated (%s), %.1f tokens/s, %s]\n",
				len(res.PromptIDs), len(res.GeneratedIDs), res.FinishReason, res.TokensPerSecond, res.Sampling)
			return nil
		},
	}
	c.Flags().StringVar(&modelDir, "model", "", "Hugging Face checkpoint folder")
	c.Flags().StringVar(&prompt, "prompt", "", "the prompt text")
	c.Flags().BoolVar(&chatMode, "chat", false, "send the prompt as one user message through the chat template")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: prompt_ids, generated_ids, text, finish_reason, tokens_per_second")
	sf.add(c)
	c.MarkFlagRequired("model")
	c.MarkFlagRequired("prompt")
	return c
}
