package medusa

import (
	"fmt"
	"strings"

	"github.com/drafter-ai/drafter/pkg/drafters"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/train/loop"
)

// MaxHeads bounds --heads. Head h predicts the token h+2 positions ahead,
// and its hit rate falls with h: Medusa's authors train 5 heads, drafter's
// default tree uses 4, and beyond 16 the heads add nothing a verification
// could accept while each adds a vocabulary-by-hidden output layer to the
// export and the checkpoint (--heads 1000 wrote 1.1 GB for the
// 260k-parameter demo model).
const MaxHeads = 16

// MaxTreeNodes bounds --tree-nodes: the calibrated tree's paths.
const MaxTreeNodes = 256

// Command is `drafter train medusa` (loop.Command), and drafter train
// --method medusa (loop.Legacy). Its flags start at zero, or at the
// trainer's default, with help quoting DefaultConfig: a flag left out keeps
// the trainer's default, some of which (the batch, the epoch cap) are
// chosen from the data.
type Command struct{}

var _ loop.Legacy = Command{}

// Kind is medusa.
func (Command) Kind() drafters.Kind { return dmedusa.Kind }

// Short is the subcommand's one-line description.
func (Command) Short() string { return "Train Medusa-1 heads on captured hidden states" }

// Long is the subcommand's help.
func (Command) Long() string {
	return `train medusa trains Medusa-1 heads on the target's final post-norm state, the target frozen;
head h predicts the token at t+h+2. Exported for vLLM (out/vllm/) and
FasterDecoding/TensorRT-LLM (out/medusa/).`
}

// Example is the subcommand's examples.
func (Command) Example() string {
	return `  drafter train medusa --model models/stories260k --data caps/stories --out drafters/medusa
  drafter train medusa --model /models/my-sft --data caps/a --out drafters/m --heads 5 --blocks 1 --warmup-steps 100`
}

// Settings names Medusa's settings in messages.
func (Command) Settings() string { return "a Medusa" }

// LegacyFlags: drafter train --method medusa spells --blocks as --layers
// and --warmup-steps as --warmup.
func (Command) LegacyFlags() []loop.LegacyFlag {
	return []loop.LegacyFlag{
		{Name: "layers", Flag: "blocks", Want: "for medusa it is the number of residual blocks per head (an integer >= 0)"},
		{Name: "warmup", Flag: "warmup-steps", Want: "for medusa it is a number of optimiser steps (an integer >= 0; by default 2% of the scheduled steps)"},
	}
}

// Hints point a user of drafter train --method medusa to --blocks and
// --warmup-steps.
func (Command) Hints() map[string]string {
	return map[string]string{"layers": "residual blocks per head are --blocks", "warmup": "the warm-up in optimiser steps is --warmup-steps"}
}

// Flags declares Medusa's settings on fs.
func (Command) Flags(fs loop.FlagSet) func(changed func(string) bool) (loop.Method, error) {
	cfg := DefaultConfig()
	var f struct {
		heads, blocks, warmupSteps, treeNodes int
		sharedLMHead                          bool
		headDecay                             float64
		dtype                                 string
	}
	fs.IntVar(&f.blocks, "blocks", cfg.Layers, "residual blocks per head, 0 or more")
	fs.IntVar(&f.warmupSteps, "warmup-steps", 0, fmt.Sprintf("linear warm-up in optimiser steps, 0 disables (default: %s)", warmupText(cfg)))
	fs.IntVar(&f.heads, "heads", cfg.Heads, fmt.Sprintf("number of heads, 1 to %d (head h predicts the token at t+h+2)", MaxHeads))
	fs.BoolVar(&f.sharedLMHead, "shared-lm-head", cfg.SharedLMHead, "keep the target's lm_head for every head, frozen (a much smaller export)")
	fs.Float64Var(&f.headDecay, "head-decay", cfg.Decay, "loss weight of head h is decay^h, in (0,1] (1 = equal weights)")
	fs.StringVar(&f.dtype, "dtype", "f32", "dtype of the exported weights: f32, bf16 or f16")
	fs.IntVar(&f.treeNodes, "tree-nodes", cfg.TreeNodes, "size of the calibrated tree written to drafter.json, eval's default tree for the heads (the paths most likely accepted given the held-out rank accuracies of each head); 0 writes none")
	loss := loop.RegisterLoss(fs, "against the data's tokens", &cfg.Loss, &cfg.LKEta)
	given := loop.RegisterGiven(fs, loop.Given{LR: &cfg.LR, MinLRRatio: &cfg.MinLRRatio, WeightDecay: &cfg.WeightDecay, ClipNorm: &cfg.ClipNorm,
		ValFraction: &cfg.HeldOut, Epochs: &cfg.MaxEpochs, MaxSteps: &cfg.MaxSteps, Patience: &cfg.Patience, EvalEvery: &cfg.EvalEvery,
		BatchTokens: &cfg.BatchTokens, CheckpointEvery: &cfg.CheckpointEvery, LogEvery: &cfg.LogEvery, Seed: &cfg.Seed},
		loop.GivenRules{
			Metric:        "greedy chain acceptance",
			EpochsDefault: autoText(cfg.MaxEpochs, fmt.Sprintf("enough epochs to see %gM positions, 2 to 40", float64(AutoPositions)/1e6)),
			BatchDefault:  autoText(cfg.BatchTokens, "training positions/256 as a power of two, 64 to 4096"),
			Batch:         "tokens per optimiser step, 1 or more, or 0 to choose it from the data",
			BatchWant:     "tokens per step, 1 or more, or 0 to choose them from the data",
			BatchOK:       func(n int) bool { return n >= 0 },
			ValFraction:   "fraction of the samples held out for evaluation, in [0,1)",
			ValWant:       "a fraction in [0,1)",
			ValOK:         func(v float64) bool { return v >= 0 && v < 1 },
		})
	return func(changed func(string) bool) (loop.Method, error) {
		if err := given(changed); err != nil {
			return nil, err
		}
		if err := loop.CheckGiven(changed,
			loop.Rule{Flag: "heads", Bad: f.heads < 1 || f.heads > MaxHeads, Value: f.heads,
				Want: fmt.Sprintf("1 to %d heads (head h predicts the token h+2 ahead; further heads rarely hit and each adds an output layer to the export)", MaxHeads)},
			loop.Rule{Flag: "tree-nodes", Bad: f.treeNodes < 0 || f.treeNodes > MaxTreeNodes, Value: f.treeNodes, Want: fmt.Sprintf("0 (no calibrated tree) to %d paths", MaxTreeNodes)},
			loop.Rule{Flag: "blocks", Bad: f.blocks < 0, Value: f.blocks, Want: "the number of residual blocks per head, 0 or more"},
			loop.Rule{Flag: "head-decay", Bad: !(f.headDecay > 0 && f.headDecay <= 1), Value: f.headDecay, Want: "a loss decay per head in (0,1]"},
			loop.Rule{Flag: "warmup-steps", Bad: f.warmupSteps < 0, Value: f.warmupSteps, Want: "a number of optimiser steps, 0 or more (0 turns the warm-up off)"},
		); err != nil {
			return nil, err
		}
		if err := loss(changed); err != nil {
			return nil, err
		}
		loop.Assign(changed, "heads", &cfg.Heads, f.heads)
		loop.Assign(changed, "blocks", &cfg.Layers, f.blocks)
		loop.Assign(changed, "tree-nodes", &cfg.TreeNodes, f.treeNodes)
		loop.Assign(changed, "warmup-steps", &cfg.WarmupSteps, f.warmupSteps)
		loop.Assign(changed, "shared-lm-head", &cfg.SharedLMHead, f.sharedLMHead)
		loop.Assign(changed, "head-decay", &cfg.Decay, f.headDecay)
		if changed("dtype") {
			switch strings.ToLower(f.dtype) {
			case "f32", "float32", "fp32":
				cfg.DType = safetensors.F32
			case "bf16", "bfloat16":
				cfg.DType = safetensors.BF16
			case "f16", "float16", "fp16":
				cfg.DType = safetensors.F16
			default:
				return nil, &loop.FlagError{Flag: "dtype", Value: f.dtype, Want: "f32, bf16 or f16"}
			}
		}
		return Options{Config: cfg}, nil
	}
}

// autoText describes a default that 0 makes data-derived.
func autoText(v int, rule string) string {
	if v == 0 {
		return "from the data: " + rule
	}
	return fmt.Sprint(v)
}

// warmupText describes c's warm-up.
func warmupText(c Config) string {
	if c.WarmupSteps < 0 {
		return "2% of the scheduled steps"
	}
	return fmt.Sprint(c.WarmupSteps)
}
