package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/capture/distill"
)

// maxSamplesPerPrompt bounds --samples-per-prompt against typos: each
// response is generated in full, so 1024 per prompt is already 1024 times the
// work of one.
const maxSamplesPerPrompt = 1024

type distillOptions struct {
	Model   string
	Distill distill.Options
	// APIKeyEnv is the variable the --generator key was read from (for the
	// message when a server refuses the request for want of one).
	APIKeyEnv string
	JSON      bool
	Out       io.Writer
	Device    deviceChoice
}

func newCmdDistill(runF func(*distillOptions) error) *cobra.Command {
	o := &distillOptions{}
	var sf samplingFlags
	var cf captureFlags
	var gf generatorFlags
	var shard string
	c := &cobra.Command{
		Use:   "distill --model DIR --prompts FILE --out DIR",
		Short: "Generate responses with the frozen target and capture its hidden states",
		Long: `distill answers every prompt with the checkpoint at its serving settings (generation_config.json,
overridable) and stores, from the same forward passes, the hidden states a drafter trains on:
Arrow shards (one row per prompt and response position), manifest.json and responses.jsonl.

Prompt files are JSONL ({"prompt": ...} raw text, {"messages": [...]} OpenAI chat,
{"conversations": [...]} ShareGPT; conversations go through the chat template) or .txt (one
raw prompt per line). Sample j = prompt_index*samples_per_prompt + k draws from the random
stream (seed, j) only. Rerunning the same command after an interruption resumes after the
last complete shard; --shard i/n takes the prompts with index % n == i so n machines can
split one prompt set (drafter train --data takes the n output folders together).

With --generator URL[,URL...] serving engines generate the responses instead: each prompt goes
to the completions endpoint as token ids, with the sampling settings and a seed per sample; the
answers' token ids (or, from an engine that returns only text, the re-tokenized text, checked
to round-trip) are captured with teacher-forced prefills on this machine into the same shards.
Every answer is recorded in generated.jsonl as it arrives, so a rerun never asks twice. A server
that does not answer at the start is left out, said on stderr, and taken in once it answers; the
run fails only when none answers. Answers that name another model than the one requested stop the
run (--allow-served-model NAME accepts them and records NAME in manifest.json). A run that would
store no sample (every prompt skipped, every answer unusable) fails saying why.`,
		Example: `  drafter distill --model models/stories260k --prompts data/prompts/stories.jsonl --out runs/d1
  drafter distill --model /models/my-sft --prompts chats.jsonl --out /data/d --batch 16 --shard 3/8
  drafter distill --model /models/my-sft --prompts chats.jsonl --out /data/d --generator http://vllm-0:8000,http://vllm-1:8000 --concurrency 64`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			d := &o.Distill
			var err error
			own := append(sf.checks(), flagCheck{"samples-per-prompt", d.SamplesPerPrompt < 1 || d.SamplesPerPrompt > maxSamplesPerPrompt,
				fmt.Sprintf("an integer from 1 to %d", maxSamplesPerPrompt)})
			if d.DType, d.Progress, err = cf.resolve(c, own...); err != nil {
				return err
			}
			d.Notes = c.ErrOrStderr() // a server left out is said even with --quiet
			d.Shard, d.NumShards = 0, 1
			if c.Flags().Changed("shard") {
				if d.Shard, d.NumShards, err = parseShard(shard); err != nil {
					return err
				}
			}
			d.Out, d.Batch, d.Layers, d.ShardRows, d.ShardBytes, d.Force = cf.out, cf.batch, cf.layers, cf.shardRows, cf.shardBytes(), cf.force
			// Without --batch a GPU's batch comes from its free memory.
			d.AutoBatch = !c.Flags().Changed("batch")
			d.Sampling, d.Seed = sf.overrides(c.Flags()), sf.seed
			if d.Generator, err = gf.options(c); err != nil {
				return err
			}
			o.APIKeyEnv = gf.keyEnv
			o.JSON, o.Out = cf.json, c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return runDistill(c.Context(), o)
		},
	}
	fs := c.Flags()
	o.Device.register(c)
	fs.StringVar(&o.Model, "model", "", "Hugging Face checkpoint folder")
	fs.StringVar(&o.Distill.Prompts, "prompts", "", "prompt file (.jsonl or .txt)")
	fs.BoolVar(&o.Distill.SkipInvalid, "skip-invalid", false, "skip (and count) malformed records and prompts that leave no room to generate")
	fs.IntVar(&o.Distill.SamplesPerPrompt, "samples-per-prompt", 1, fmt.Sprintf("responses per prompt, 1 to %d", maxSamplesPerPrompt))
	fs.StringVar(&shard, "shard", "", "i/n with n >= 1 and 0 <= i < n: take the prompts whose index modulo n is i (default: all prompts)")
	sf.register(fs)
	cf.register(fs)
	gf.register(fs)
	requireFlags(c, "model", "prompts", "out")
	return c
}

// parseShard parses --shard i/n.
func parseShard(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(strings.TrimSpace(a))
	n, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, usagef("--shard %q: want i/n, e.g. 0/4 (the prompts whose index modulo n is i)", s)
	}
	if n < 1 || i < 0 || i >= n {
		return 0, 0, usagef("--shard %s: want i/n with n >= 1 and 0 <= i < n, e.g. 0/4", s)
	}
	return i, n, nil
}

func runDistill(ctx context.Context, o *distillOptions) error {
	t, dev, err := loadTarget(o.Model, &o.Device)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer t.Close()
	if err := checkLayers(t, o.Distill.Layers); err != nil {
		return err
	}
	sum, err := distill.Run(ctx, t, o.Distill)
	if err != nil {
		return generatorError(overrideUsage(err), o.Distill.Generator, o.APIKeyEnv)
	}
	if o.JSON {
		st := sum.Settings
		return writeJSON(o.Out, struct {
			summaryJSON
			Prompts         int     `json:"prompts"`
			Generated       int64   `json:"generated_tokens"`
			TokensPerSecond float64 `json:"tokens_per_second"`
			Sampling        string  `json:"sampling"`
			MaxNewTokens    int     `json:"max_new_tokens"`
			// Rejected samples had answers from the --generator servers
			// that could not be turned into token ids (see generated.jsonl).
			Rejected int `json:"rejected"`
		}{newSummaryJSON("distill", sum), sum.Prompts, sum.Generated, sum.TokensPerSecond(), st.Params.String(), st.MaxNewTokens, sum.Rejected})
	}
	return nil
}
