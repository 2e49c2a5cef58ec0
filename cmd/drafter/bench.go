package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/bench"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

type benchOptions struct {
	Bench bench.Options
	// Save, when set, writes the random model as a checkpoint there
	// instead of measuring it.
	Save   string
	JSON   bool
	Out    io.Writer
	Device deviceChoice
}

func newCmdBench(runF func(*benchOptions) error) *cobra.Command {
	o := &benchOptions{}
	var quick bool
	var dtype string
	sizes := bench.Defaults()
	c := &cobra.Command{
		Use:   "bench --random SHAPE [--quick] [--device D] [--json] | --random SHAPE --save DIR",
		Short: "Measure the whole pipeline on a random-weight model of a named shape",
		Long: `bench --random builds a model of a named shape with random weights in memory on the device
(bf16 by default, as the published checkpoints are) and prints one table: prefill and decode
tokens/s at batch 1 and 32 (decode at batch 32: 32 sequences stepped together in one forward
pass), distillation tokens/s at batch 64 (the generation engine with distill's capture taps),
training tokens/s of Medusa and EAGLE-3 (the trainers' own steps with the optimiser update, on
random features of the shape) and eval's step costs in batch-1 decode steps of the target: a
chain-4 verification (5 rows), a 60-node tree verification, an EAGLE-3 draft layer step and a
Medusa heads step. A GPU is measured without carrying checkpoints.

The shapes:
` + bench.ShapeList() + `
--layers N builds N decoder layers instead of the shape's own (every other dimension stays the
shape's; the table says so): a way to run a large shape's layers on a small machine.
Before building, bench estimates the memory the model and the trainers need and refuses when
the host's available memory, or the GPU's free memory, is short.

--save DIR writes the random model as a checkpoint instead (config.json, model.safetensors, a
tokenizer covering the shape's vocabulary) for the other commands to load: the same weights
bench measures, with the same logits.`,
		Example: `  drafter bench --random 60m
  drafter bench --random llama3-1b --quick --layers 2 --device cpu
  drafter bench --random llama3-8b --device cuda --json
  drafter bench --random llama3-1b --save /tmp/llama3-1b-random`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			b := &o.Bench
			if quick {
				q := bench.Quick()
				for _, f := range []struct {
					name     string
					dst, val *int
				}{{"prompt", &sizes.Prompt, &q.Prompt}, {"decode", &sizes.Decode, &q.Decode}, {"iters", &sizes.Iters, &q.Iters},
					{"distill-prompt", &sizes.DistillPrompt, &q.DistillPrompt}, {"distill-tokens", &sizes.DistillTokens, &q.DistillTokens},
					{"train-tokens", &sizes.TrainTokens, &q.TrainTokens}, {"train-steps", &sizes.TrainSteps, &q.TrainSteps}} {
					if !c.Flags().Changed(f.name) {
						*f.dst = *f.val
					}
				}
			}
			b.Prompt, b.Decode, b.Iters = sizes.Prompt, sizes.Decode, sizes.Iters
			b.DistillPrompt, b.DistillTokens = sizes.DistillPrompt, sizes.DistillTokens
			b.TrainTokens, b.TrainSteps = sizes.TrainTokens, sizes.TrainSteps
			switch strings.ToLower(dtype) {
			case "bf16", "bfloat16":
				b.DType = tensor.BF16
			case "f16", "float16":
				b.DType = tensor.F16
			case "f32", "float32":
				b.DType = tensor.F32
			default:
				return usagef("--dtype %s: want bf16, f16 or f32", dtype)
			}
			if b.Layers < 0 {
				return usagef("--layers %d: want a positive number of decoder layers (0: the shape's own)", b.Layers)
			}
			if _, _, err := bench.ShapeConfig(b.Shape, 0); err != nil {
				return usagef("--random %s: %v\n%s", b.Shape, err, strings.TrimRight(bench.ShapeList(), "\n"))
			}
			if o.Save != "" {
				for _, f := range []string{"quick", "json", "prompt", "decode", "iters", "distill-prompt", "distill-tokens", "train-tokens", "train-steps", "medusa-shared-lm-head"} {
					if c.Flags().Changed(f) {
						return usagef("--%s does not apply with --save (which writes the model without measuring it)", f)
					}
				}
			}
			b.Log = c.ErrOrStderr()
			o.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return runBench(c.Context(), o)
		},
	}
	fs := c.Flags()
	o.Device.register(c)
	fs.StringVar(&o.Bench.Shape, "random", "", "the shape to build with random weights: "+strings.Join(bench.Shapes(), ", "))
	fs.IntVar(&o.Bench.Layers, "layers", 0, "decoder layers to build instead of the shape's own (an override for small machines; 0: the shape's)")
	fs.StringVar(&dtype, "dtype", "bf16", "the weights' dtype: bf16, f16 or f32")
	fs.Uint64Var(&o.Bench.Seed, "seed", 1, "the random weights' seed")
	fs.BoolVar(&quick, "quick", false, "the smallest sizes that measure every row (prompt 32, 4 decode steps, 1 repetition, 8-token distilled prompts with 4 new tokens, 32-token training steps, 1 timed); size flags given still apply")
	fs.IntVar(&sizes.Prompt, "prompt", sizes.Prompt, "prefill length in tokens")
	fs.IntVar(&sizes.Decode, "decode", sizes.Decode, "decode steps timed after the prompt")
	fs.IntVar(&sizes.Iters, "iters", sizes.Iters, "repetitions of each prefill, decode run and step cost (the best is kept)")
	fs.IntVar(&sizes.DistillPrompt, "distill-prompt", sizes.DistillPrompt, "prompt length of each distilled sequence")
	fs.IntVar(&sizes.DistillTokens, "distill-tokens", sizes.DistillTokens, "tokens generated per distilled sequence")
	fs.IntVar(&sizes.TrainTokens, "train-tokens", sizes.TrainTokens, "tokens of one training step (each method's batch)")
	fs.IntVar(&sizes.TrainSteps, "train-steps", sizes.TrainSteps, "training steps timed (after one untimed)")
	fs.BoolVar(&o.Bench.MedusaSharedLMHead, "medusa-shared-lm-head", false, "Medusa heads share the target's frozen lm_head (as drafter train medusa --shared-lm-head) instead of one trained copy per head, whose training state is 16 bytes per value")
	fs.BoolVar(&o.JSON, "json", false, "print the table as JSON")
	fs.StringVar(&o.Save, "save", "", "write the random model as a checkpoint into this folder instead of measuring it")
	requireFlags(c, "random")
	return c
}

func runBench(ctx context.Context, o *benchOptions) error {
	b := o.Bench
	if o.Save != "" {
		if err := bench.Save(o.Save, bench.SaveOptions{Shape: b.Shape, Layers: b.Layers, DType: b.DType, Seed: b.Seed}); err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "wrote a random %s checkpoint to %s\n", b.Shape, o.Save)
		return nil
	}
	dev, err := o.Device.open()
	if err != nil {
		return err
	}
	defer dev.Close()
	b.Device = dev.Device
	tb, err := bench.Run(ctx, b)
	var se *bench.SizeError
	if errors.As(err, &se) {
		return usagef("--%s", se.Error())
	}
	if err != nil {
		return err
	}
	if o.JSON {
		return tb.WriteJSON(o.Out)
	}
	return tb.WriteText(o.Out)
}
