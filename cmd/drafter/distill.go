package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/capture/distill"
	"github.com/drafter-ai/drafter/pkg/generate"
)

// captureFlags are the output flags distill and capture share.
type captureFlags struct {
	out, dtype, shard string
	layers            []int
	batch             int
	shardRows         int64
	shardMB           float64
	force, quiet      bool
}

func (f *captureFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.out, "out", "", "output directory (shards, manifest.json, responses.jsonl)")
	c.Flags().IntSliceVar(&f.layers, "layers", nil, "Hugging Face hidden_states indices to store, e.g. 2,16,29 (default: the EAGLE-3 layers 2, L/2, L-3, or 1, (L+1)/2, L below 7 layers; index L is the last layer's output before the final norm); the state after the final norm is always stored as final_norm")
	c.Flags().StringVar(&f.dtype, "dtype", "float16", "storage type of the states: float16 or float32")
	c.Flags().IntVar(&f.batch, "batch", 8, "sequences run through the model together")
	c.Flags().Int64Var(&f.shardRows, "shard-rows", 0, "close a shard after this many rows (token positions); 0: no row limit")
	c.Flags().Float64Var(&f.shardMB, "shard-mb", 1024, "close a shard after this many MiB")
	c.Flags().BoolVar(&f.force, "force", false, "delete the capture in --out and start over (default: resume it)")
	c.Flags().BoolVar(&f.quiet, "quiet", false, "no progress bar or summary")
	c.MarkFlagRequired("out")
}

func (f *captureFlags) dtypeValue() (capture.DType, error) {
	d, err := capture.ParseDType(f.dtype)
	if err != nil {
		return "", &usageError{err}
	}
	return d, nil
}

func newDistillCmd() *cobra.Command {
	var modelDir, prompts string
	var skipInvalid bool
	var spp int
	var sf samplingFlags
	var cf captureFlags
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
split one prompt set.`,
		Example: `  drafter distill --model models/stories260k --prompts data/prompts/stories.jsonl --out runs/d1
  drafter distill --model /models/my-sft --prompts chats.jsonl --out /data/d --batch 16 --shard 3/8`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dt, err := cf.dtypeValue()
			if err != nil {
				return err
			}
			opt := distill.Options{Prompts: prompts, Out: cf.out, SkipInvalid: skipInvalid, Sampling: sf.overrides(cmd),
				SamplesPerPrompt: spp, Seed: sf.seed, Batch: cf.batch, Layers: cf.layers, DType: dt,
				ShardRows: cf.shardRows, ShardBytes: int64(cf.shardMB * (1 << 20)), Force: cf.force}
			if cf.shard != "" {
				if _, err := fmt.Sscanf(cf.shard, "%d/%d", &opt.Shard, &opt.NumShards); err != nil {
					return &usageError{fmt.Errorf("--shard %q: want i/n, e.g. 0/4", cf.shard)}
				}
			}
			if !cf.quiet {
				opt.Progress = os.Stderr
			}
			t, err := generate.Load(modelDir, nil, fileCache())
			if err != nil {
				return err
			}
			defer t.Close()
			_, err = distill.Run(cmd.Context(), t, opt)
			return err
		},
	}
	c.Flags().StringVar(&modelDir, "model", "", "Hugging Face checkpoint folder")
	c.Flags().StringVar(&prompts, "prompts", "", "prompt file (.jsonl or .txt)")
	c.Flags().BoolVar(&skipInvalid, "skip-invalid", false, "skip (and count) malformed records and prompts that leave no room to generate")
	c.Flags().IntVar(&spp, "samples-per-prompt", 1, "responses per prompt")
	c.Flags().StringVar(&cf.shard, "shard", "", "i/n: take the prompts whose index modulo n is i")
	sf.add(c)
	cf.add(c)
	c.MarkFlagRequired("model")
	c.MarkFlagRequired("prompts")
	return c
}
