package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/medusa"
	"github.com/drafter-ai/drafter/train/run"
)

func newTrainCmd() *cobra.Command {
	var f run.Flags
	var asJSON bool
	def := medusa.DefaultConfig()
	c := &cobra.Command{
		Use:   "train --method medusa|eagle3 --model DIR --data DIR[,DIR...] --out DIR",
		Short: "Train Medusa-1 heads or an EAGLE-3 draft layer on captured hidden states",
		Long: `train reads the shards drafter distill captured from --model and trains a drafter on them,
with the target frozen:

  medusa  Medusa-1 heads on the target's final post-norm state; head h predicts the token at
          t+h+2. Exported for vLLM (out/vllm/) and FasterDecoding/TensorRT-LLM (out/medusa/).
  eagle3  one EAGLE-3 draft layer over the fused low/middle/high target features, trained with
          training-time test. Exported to out/eagle3/ (--format native or speculators).

Every capture directory must come from exactly this checkpoint (its manifest's model
fingerprint is checked) and hold the columns the method reads. The defaults train well
without tuning: training stops when the held-out loss stops improving, within an epoch cap,
and the best weights are exported. Flags left out keep the method's trainer defaults.

out/ also receives metrics.jsonl, checkpoint.safetensors and drafter.json (method, target
fingerprint, the data manifests' SHA-256, all arguments, final held-out metrics). Ctrl-C
stops cleanly with a checkpoint; run the same command with --resume to continue: the result
is identical to an uninterrupted run. A resume with different settings is refused.`,
		Example: `  drafter train --method medusa --model models/stories260k --data caps/stories --out drafters/medusa
  drafter train --method eagle3 --model /models/my-sft --data caps/a,caps/b --out drafters/eagle3 --format speculators
  drafter train --method eagle3 --model /models/my-sft --data caps/a --out drafters/eagle3 --resume`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.Given = map[string]string{}
			cmd.Flags().Visit(func(fl *pflag.Flag) {
				if fl.Name != "json" {
					f.Given[fl.Name] = fl.Value.String()
				}
			})
			opt, err := f.Options(cmd.ErrOrStderr())
			var fe *run.FlagError
			if errors.As(err, &fe) {
				return &usageError{err}
			}
			if err != nil {
				return err
			}
			res, err := run.Run(cmd.Context(), opt)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res.Provenance)
			}
			for _, e := range res.Exports {
				fmt.Fprintln(cmd.OutOrStdout(), e)
			}
			return nil
		},
	}
	fs := c.Flags()
	fs.StringVar(&f.Method, "method", "", "medusa or eagle3")
	fs.StringVar(&f.Model, "model", "", "the target checkpoint folder the data was captured from")
	fs.StringSliceVar(&f.Data, "data", nil, "capture directories made by drafter distill (comma-separated or repeated)")
	fs.StringVar(&f.Out, "out", "", "output folder: exports, drafter.json, metrics.jsonl, checkpoint")

	fs.StringVar(&f.Layers, "layers", "", fmt.Sprintf("medusa: residual blocks per head (default %d); eagle3: the 3 feature layers as Hugging Face hidden_states indices low,mid,high (default 2,L/2,L-3; must have been captured)", def.Layers))
	fs.IntVar(&f.Heads, "heads", def.Heads, "medusa: number of heads (head h predicts the token at t+h+2)")
	fs.BoolVar(&f.SharedLMHead, "shared-lm-head", def.SharedLMHead, "medusa: keep the target's lm_head for every head, frozen (a much smaller export)")
	fs.Float64Var(&f.HeadDecay, "head-decay", def.Decay, "medusa: loss weight of head h is decay^h (1 = equal weights)")
	fs.IntVar(&f.MaxSteps, "max-steps", def.MaxSteps, "medusa: stop after this many optimiser steps in total (0 = no limit; the schedule still spans --epochs)")
	fs.IntVar(&f.EvalEvery, "eval-every", def.EvalEvery, "medusa: optimiser steps between held-out evaluations (0 = once per epoch)")
	fs.StringVar(&f.DType, "dtype", "f32", "medusa: dtype of the exported weights: f32, bf16 or f16")

	fs.IntVar(&f.TTTSteps, "ttt-steps", 7, "eagle3: training-time-test unroll length")
	fs.Float64Var(&f.TTTDecay, "ttt-decay", 0.8, "eagle3: loss weight of unrolled step k is decay^k")
	fs.IntVar(&f.DraftVocab, "draft-vocab", eagle3.DefaultDraftVocab, "eagle3: draft vocabulary size N (the N most frequent response tokens; capped at the target's vocabulary)")
	fs.IntVar(&f.MaxLength, "max-length", 0, "eagle3: truncate samples to this many tokens (default min(2048, --batch-tokens))")
	fs.StringVar(&f.Format, "format", "native", "eagle3: export layout: native (EAGLE/SpecForge/SGLang, also loaded by vLLM) or speculators")

	fs.Float64Var(&f.LR, "lr", def.LR, "peak learning rate (eagle3 default 2e-3)")
	fs.Float64Var(&f.MinLRRatio, "min-lr-ratio", def.MinLRRatio, "floor of the cosine decay as a fraction of --lr (eagle3 default 0)")
	fs.Float64Var(&f.WeightDecay, "weight-decay", def.WeightDecay, "AdamW decoupled weight decay")
	fs.Float64Var(&f.ClipNorm, "clip-norm", def.ClipNorm, "global gradient-norm clip, 0 disables (eagle3 default 0.5)")
	fs.StringVar(&f.Warmup, "warmup", "", "linear warm-up: medusa in optimiser steps (default 2% of the scheduled steps); eagle3 as a fraction of all updates (default 0.015)")
	fs.IntVar(&f.Epochs, "epochs", def.MaxEpochs, "epoch cap; training stops earlier when the held-out loss stops improving (eagle3 default 40)")
	fs.IntVar(&f.Patience, "patience", def.Patience, "evaluations without held-out improvement before stopping, 0 = never stop early (eagle3 default 4)")
	fs.IntVar(&f.BatchTokens, "batch-tokens", def.BatchTokens, "tokens per optimiser step (eagle3 default 2048)")
	fs.Float64Var(&f.ValFraction, "val-fraction", def.HeldOut, "fraction of the samples held out for evaluation (eagle3 default 0.1)")
	fs.IntVar(&f.CheckpointEvery, "checkpoint-every", def.CheckpointEvery, "optimiser steps between checkpoints (0 = at evaluations / epoch ends)")
	fs.IntVar(&f.LogEvery, "log-every", def.LogEvery, "optimiser steps between training lines in metrics.jsonl")
	fs.Uint64Var(&f.Seed, "seed", def.Seed, "seed of the held-out split, the sample order and the initialisation (eagle3 default 0)")
	fs.BoolVar(&f.Resume, "resume", false, "continue the run whose checkpoint is in --out (same arguments required)")
	fs.BoolVar(&f.VerifyData, "verify-data", false, "recompute every shard's SHA-256 against its manifest before training")
	fs.BoolVarP(&f.Quiet, "quiet", "q", false, "no progress bar or evaluation lines on stderr")
	fs.BoolVar(&asJSON, "json", false, "print drafter.json on stdout when done")
	for _, n := range []string{"method", "model", "data", "out"} {
		c.MarkFlagRequired(n)
	}
	return c
}
