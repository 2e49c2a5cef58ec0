package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/train"
	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/lkloss"
	"github.com/drafter-ai/drafter/train/medusa"
)

// maxHeads bounds --heads. Head h predicts the token h+2 positions ahead, and
// its hit rate falls with h: Medusa's authors train 5 heads, drafter's default
// tree uses 4, and beyond 16 the heads add nothing a verification could
// accept while each adds a vocabulary-by-hidden output layer to the export
// and the checkpoint (--heads 1000 wrote 1.1 GB for the 260k-parameter demo
// model).
const maxHeads = 16

// The methods drafter train trains, by name.
const (
	methodMedusa = string(dmedusa.Kind)
	methodEAGLE3 = string(deagle3.Kind)
)

// trainSpelling is one of the three command lines of drafter train.
type trainSpelling int

const (
	// byMethodFlag is `drafter train --method M`, kept for scripts: it has
	// both methods' flags, refuses those of the other method, and reads
	// --layers and --warmup as M reads them.
	byMethodFlag trainSpelling = iota
	// medusaCmd is `drafter train medusa`: Medusa's flags only.
	medusaCmd
	// eagle3Cmd is `drafter train eagle3`: EAGLE-3's flags only.
	eagle3Cmd
)

// has reports whether the spelling carries the method's flags.
func (sp trainSpelling) has(method string) bool {
	switch sp {
	case medusaCmd:
		return method == methodMedusa
	case eagle3Cmd:
		return method == methodEAGLE3
	}
	return true
}

// def describes a trainer default in a flag's help: the spelling's method's,
// or both methods' for drafter train --method.
func (sp trainSpelling) def(mv, ev any) string {
	switch {
	case sp == medusaCmd:
		return fmt.Sprintf("(default %v)", mv)
	case sp == eagle3Cmd:
		return fmt.Sprintf("(default %v)", ev)
	case fmt.Sprint(mv) == fmt.Sprint(ev):
		return fmt.Sprintf("(default %v)", mv)
	}
	return fmt.Sprintf("(default: medusa %v, eagle3 %v)", mv, ev)
}

// only prefixes the help of a one-method flag with its method under
// drafter train --method.
func (sp trainSpelling) only(method, usage string) string {
	if sp == byMethodFlag {
		return method + ": " + usage
	}
	return usage
}

// trainFlags are the values of drafter train's flags; which of them a
// command line has depends on its spelling.
type trainFlags struct {
	method, model, out string
	data               []string
	// Medusa.
	heads, blocks, warmupSteps, treeNodes int
	sharedLMHead                          bool
	headDecay                             float64
	dtype                                 string
	// EAGLE-3.
	tttSteps, draftVocab, intermediate, maxLength int
	tttDecay, targetTemp, warmupFrac              float64
	format                                        string
	layers                                        []int
	fcNorm, normBeforeFC, normOutput              bool
	variant                                       string
	// --layers and --warmup of drafter train --method, read as the method
	// reads them.
	layersText, warmupText string
	// Both.
	loss                                                                          string
	lkEta                                                                         float64
	lr, minLRRatio, weightDecay, clipNorm, valFraction                            float64
	epochs, maxSteps, patience, evalEvery, batchTokens, checkpointEvery, logEvery int
	seed                                                                          uint64
	resume, quiet, verifyData, json                                               bool
	precision                                                                     string
}

// register defines the spelling's flags on fs, with help texts that quote
// the trainers' own defaults (medusa.DefaultConfig, eagle3.DefaultConfig) so
// that the help cannot drift from the code. A flag left out keeps the
// method's trainer default whatever its registered value.
func (f *trainFlags) register(fs *pflag.FlagSet, sp trainSpelling) {
	m, e := medusa.DefaultConfig(), eagle3.DefaultConfig()
	if sp == byMethodFlag {
		fs.StringVar(&f.method, "method", "", "medusa or eagle3 (drafter train medusa and drafter train eagle3 are preferred: each has only its method's flags)")
	}
	fs.StringVar(&f.model, "model", "", "the target checkpoint folder the data was captured from")
	fs.StringSliceVar(&f.data, "data", nil, "capture folders made by drafter distill or capture (comma-separated or repeated); a folder without manifest.json stands for its subfolders that have one (one per --shard), and a quoted glob such as 'runs/d-*' is expanded by drafter")
	fs.StringVar(&f.out, "out", "", "output folder: exports, drafter.json, metrics.jsonl, checkpoint")

	switch sp {
	case byMethodFlag:
		fs.StringVar(&f.layersText, "layers", "", fmt.Sprintf("medusa: residual blocks per head (default %d); eagle3: the 3 feature layers as Hugging Face hidden_states indices low,mid,high in ascending order (default 2,L/2,L-3, or 1,(L+1)/2,L below 7 layers; must have been captured)", m.Layers))
		fs.StringVar(&f.warmupText, "warmup", "", fmt.Sprintf("linear warm-up, 0 disables: medusa in optimiser steps (default %s), eagle3 as a fraction of all updates in [0,1) (default %g)", medusaWarmup(m), e.WarmupFrac))
	case medusaCmd:
		fs.IntVar(&f.blocks, "blocks", m.Layers, "residual blocks per head, 0 or more")
		fs.IntVar(&f.warmupSteps, "warmup-steps", 0, fmt.Sprintf("linear warm-up in optimiser steps, 0 disables (default: %s)", medusaWarmup(m)))
	case eagle3Cmd:
		fs.Var((*intsValue)(&f.layers), "layers", "the 3 feature layers as Hugging Face hidden_states indices low,mid,high in ascending order (default 2,L/2,L-3, or 1,(L+1)/2,L below 7 layers; must have been captured)")
		floatVar(fs, &f.warmupFrac, "warmup", e.WarmupFrac, "linear warm-up as a fraction of all updates, in [0,1); 0 disables")
	}

	if sp.has(methodMedusa) {
		fs.IntVar(&f.heads, "heads", m.Heads, sp.only("medusa", fmt.Sprintf("number of heads, 1 to %d (head h predicts the token at t+h+2)", maxHeads)))
		fs.BoolVar(&f.sharedLMHead, "shared-lm-head", m.SharedLMHead, sp.only("medusa", "keep the target's lm_head for every head, frozen (a much smaller export)"))
		floatVar(fs, &f.headDecay, "head-decay", m.Decay, sp.only("medusa", "loss weight of head h is decay^h, in (0,1] (1 = equal weights)"))
		fs.StringVar(&f.dtype, "dtype", "f32", sp.only("medusa", "dtype of the exported weights: f32, bf16 or f16"))
		fs.IntVar(&f.treeNodes, "tree-nodes", m.TreeNodes, sp.only("medusa", "size of the calibrated tree written to drafter.json, eval's default tree for the heads (the paths most likely accepted given the held-out rank accuracies of each head); 0 writes none"))
	}
	if sp.has(methodEAGLE3) {
		fs.IntVar(&f.tttSteps, "ttt-steps", e.Steps, sp.only("eagle3", "training-time-test unroll length, 1 or more"))
		floatVar(fs, &f.tttDecay, "ttt-decay", e.StepDecay, sp.only("eagle3", "loss weight of unrolled step k is decay^k, in (0,1]"))
		fs.IntVar(&f.draftVocab, "draft-vocab", e.DraftVocab, sp.only("eagle3", "draft vocabulary size N, 1 or more (the N most frequent response tokens; capped at the target's vocabulary)"))
		fs.IntVar(&f.intermediate, "intermediate", 0, sp.only("eagle3", "MLP width of the draft layer, 1 or more, written as its intermediate_size (default: the target's intermediate_size)"))
		floatVar(fs, &f.targetTemp, "target-temperature", 0, sp.only("eagle3", fmt.Sprintf("the draft learns softmax(target logits / this), in (0, 100] (default %g when all --data was distilled greedily, else 1)", eagle3.GreedyTargetTemperature)))
		fs.IntVar(&f.maxLength, "max-length", 0, sp.only("eagle3", fmt.Sprintf("truncate samples to this many tokens, 3 or more (default %d); a sample longer than --batch-tokens trains as a batch of its own", e.MaxLength)))
		fs.StringVar(&f.format, "format", deagle3.FormatNative, sp.only("eagle3", "export layout: native (EAGLE/SpecForge/SGLang, also loaded by vLLM) or speculators"))
		fs.StringVar(&f.variant, "variant", variantOf(e), sp.only("eagle3", "eagle3.1 (--fc-norm and --norm-output, the default: the most accepted on held-out prompts, docs/acceptance.md) or eagle3 (plain EAGLE-3, for engines that predate EAGLE-3.1); --fc-norm, --norm-before-fc and --norm-output given with it refine it"))
		fs.BoolVar(&f.fcNorm, "fc-norm", e.FCNorm, sp.only("eagle3", "EAGLE-3.1: an RMSNorm on each feature layer before fc (exported as fc_norm); excludes --norm-before-fc. Engines that predate EAGLE-3.1 ignore it"))
		fs.BoolVar(&f.normBeforeFC, "norm-before-fc", e.NormBeforeFC, sp.only("eagle3", "one RMSNorm over the fused features before fc (exported as norm_before_fc) instead of --fc-norm's per-feature ones (given alone, it turns --fc-norm off)"))
		fs.BoolVar(&f.normOutput, "norm-output", e.NormOutput, sp.only("eagle3", "EAGLE-3.1: each step feeds the next the final norm's output, the lm_head's input, instead of the pre-norm output (exported as norm_output)"))
	}

	lossTarget := map[trainSpelling]string{
		byMethodFlag: "medusa: against the data's tokens; eagle3: against the target's distribution over the draft vocabulary",
		medusaCmd:    "against the data's tokens",
		eagle3Cmd:    "against the target's distribution over the draft vocabulary",
	}[sp]
	fs.StringVar(&f.loss, "loss", lkloss.CE, fmt.Sprintf("training loss, %s: ce (cross-entropy), or an LK loss (arXiv 2602.23881) that trains toward the acceptance rate α: kl, tv (1-α), nla (-log α), lk_hybrid (λ·kl + (1-λ)·tv, λ = exp(-η·α)), or a JSON object of them to weights such as '{\"kl\":0.1,\"tv\":0.9}'", lossTarget))
	floatVar(fs, &f.lkEta, "lk-eta", lkloss.DefaultEta, "η of lk_hybrid's λ = exp(-η·α), 0 or more; only with a --loss that weighs lk_hybrid")
	metric := map[trainSpelling]string{byMethodFlag: "medusa: greedy chain acceptance; eagle3: loss", medusaCmd: "greedy chain acceptance", eagle3Cmd: "loss"}[sp]
	epochsAuto := medusaAuto(m.MaxEpochs, fmt.Sprintf("enough epochs to see %gM positions, 2 to 40", float64(medusa.AutoPositions)/1e6))
	batchAuto := medusaAuto(m.BatchTokens, "training positions/256 as a power of two, 64 to 4096")
	floatVar(fs, &f.lr, "lr", 0, "peak learning rate, above 0 "+sp.def(m.LR, e.LR))
	floatVar(fs, &f.minLRRatio, "min-lr-ratio", 0, "floor of the cosine decay as a fraction of --lr, in [0,1] "+sp.def(m.MinLRRatio, e.MinLRRatio))
	floatVar(fs, &f.weightDecay, "weight-decay", 0, "AdamW decoupled weight decay, 0 or more "+sp.def(m.WeightDecay, e.WeightDecay))
	floatVar(fs, &f.clipNorm, "clip-norm", 0, "global gradient-norm clip, 0 disables "+sp.def(m.ClipNorm, e.ClipNorm))
	epochs := "epoch cap, 1 or more, or 0 to choose it from the data"
	e3EpochsAuto := fmt.Sprintf("from the data: enough epochs to see %gM tokens, 2 to 40", float64(eagle3.AutoTokens)/1e6)
	if e.Epochs != 0 {
		e3EpochsAuto = fmt.Sprint(e.Epochs)
	}
	fs.IntVar(&f.epochs, "epochs", 0, epochs+"; training stops earlier when the held-out metric stops improving ("+metric+") "+sp.def(epochsAuto, e3EpochsAuto))
	fs.IntVar(&f.maxSteps, "max-steps", 0, "stop after this many optimiser steps in total, 0 = no limit (the schedule still spans --epochs) "+sp.def(m.MaxSteps, e.MaxSteps))
	fs.IntVar(&f.patience, "patience", 0, "evaluations without held-out improvement before stopping, 0 = never stop early "+sp.def(m.Patience, e.Patience))
	fs.IntVar(&f.evalEvery, "eval-every", 0, "optimiser steps between held-out evaluations, 0 = once per epoch "+sp.def(m.EvalEvery, e.EvalEvery))
	batch := map[trainSpelling]string{
		byMethodFlag: "tokens per optimiser step; eagle3 packs whole samples up to it (3 or more) and trains a longer sample alone (one sample per step for samples over half of it); medusa takes 1 or more, or 0 to choose it from the data ",
		medusaCmd:    "tokens per optimiser step, 1 or more, or 0 to choose it from the data ",
		eagle3Cmd:    "tokens per optimiser step, 3 or more: whole samples are packed up to it and a longer sample trains alone (one sample per step for samples over half of it) ",
	}[sp]
	fs.IntVar(&f.batchTokens, "batch-tokens", 0, batch+sp.def(batchAuto, e.BatchTokens))
	valFraction := map[trainSpelling]string{
		byMethodFlag: "fraction of the samples held out for evaluation (medusa: in [0,1); eagle3: in (0,1), it keeps the best weights by held-out loss) ",
		medusaCmd:    "fraction of the samples held out for evaluation, in [0,1) ",
		eagle3Cmd:    "fraction of the samples held out for evaluation, in (0,1): the best weights are kept by held-out loss ",
	}[sp]
	floatVar(fs, &f.valFraction, "val-fraction", 0, valFraction+sp.def(m.HeldOut, e.EvalFraction))
	fs.IntVar(&f.checkpointEvery, "checkpoint-every", 0, "optimiser steps between checkpoints, 0 = at evaluations only "+sp.def(m.CheckpointEvery, e.CheckpointEvery))
	fs.IntVar(&f.logEvery, "log-every", 0, "optimiser steps between training lines in metrics.jsonl, 0 = none "+sp.def(m.LogEvery, e.LogEvery))
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the held-out split, the sample order and the initialisation "+sp.def(m.Seed, e.Seed))
	fs.BoolVar(&f.resume, "resume", false, "continue the run whose checkpoint is in --out (same settings required)")
	fs.StringVar(&f.precision, "precision", "auto", "arithmetic of the trainer's products: auto (bf16 on a CUDA GPU, fp32 on the CPU), fp32, or bf16 (operands rounded to bfloat16 for the GPU's tensor cores, float32 accumulation); weights, gradients and AdamW state are float32 always")
	fs.BoolVar(&f.verifyData, "verify-data", false, "verify every shard again, ignoring the verification cache (shards are always verified before training; an unchanged shard is otherwise not read again)")
	fs.BoolVarP(&f.quiet, "quiet", "q", false, "no progress bar or evaluation lines on stderr")
	fs.BoolVar(&f.json, "json", false, "print drafter.json on stdout when done")
}

// medusaAuto describes a Medusa default that 0 makes data-derived.
func medusaAuto(v int, rule string) string {
	if v == 0 {
		return "from the data: " + rule
	}
	return fmt.Sprint(v)
}

// medusaWarmup describes Medusa's default warm-up.
func medusaWarmup(c medusa.Config) string {
	if c.WarmupSteps < 0 {
		return "2% of the scheduled steps"
	}
	return fmt.Sprint(c.WarmupSteps)
}

// trainOptions are what a drafter train command line asks for.
type trainOptions struct {
	Run    train.Options
	JSON   bool
	Out    io.Writer
	Device deviceChoice
}

// options checks the flags of c (spelled sp) and maps them onto the chosen
// trainer's configuration, starting from its defaults: both spellings of the
// same settings give the same train.Options, so their train_args.json match
// and either resumes the other. progress receives the progress bar unless
// --quiet, and the notes always.
func (f *trainFlags) options(c *cobra.Command, sp trainSpelling, progress io.Writer) (train.Options, error) {
	fs := c.Flags()
	set := fs.Changed
	method := map[trainSpelling]string{medusaCmd: methodMedusa, eagle3Cmd: methodEAGLE3, byMethodFlag: f.method}[sp]
	o := train.Options{Model: f.model, Data: f.data, Out: f.out, Resume: f.resume, VerifyData: f.verifyData, Args: given(fs, "json", "device"),
		Notes: progress}
	if !f.quiet {
		o.Progress = progress
	}
	prec, err := train.ParsePrecision(strings.ToLower(f.precision))
	if err != nil {
		return o, &usageError{err}
	}
	o.Precision = prec
	// The flag names of Medusa's residual blocks and warm-up steps.
	blocks, warmupSteps := "blocks", "warmup-steps"
	if sp == byMethodFlag {
		blocks, warmupSteps = "layers", "warmup"
		if err := f.readMethodFlags(fs); err != nil {
			return o, err
		}
	}
	bad := badPattern(f.data)
	checks := []flagCheck{
		{"data", bad != "", fmt.Sprintf("capture folders, folders of them, or glob patterns such as 'runs/d-*' (%q is not a valid pattern)", bad)},
		{"lr", !(f.lr > 0), "a learning rate above 0"},
		{"min-lr-ratio", !(f.minLRRatio >= 0 && f.minLRRatio <= 1), "a fraction of --lr in [0,1]"},
		{"weight-decay", f.weightDecay < 0, "0 or a positive weight decay"},
		{"clip-norm", f.clipNorm < 0, "0 (no clipping) or a positive gradient norm"},
		{"max-steps", f.maxSteps < 0, "0 (no limit) or a positive number of steps"},
		{"patience", f.patience < 0, "0 (never stop early) or a positive number of evaluations"},
		{"eval-every", f.evalEvery < 0, "0 (once per epoch) or a positive number of steps"},
		{"checkpoint-every", f.checkpointEvery < 0, "0 (at evaluations only) or a positive number of steps"},
		{"log-every", f.logEvery < 0, "0 (no training lines) or a positive number of steps"},
	}
	switch method {
	case methodMedusa:
		checks = append(checks,
			flagCheck{"heads", f.heads < 1 || f.heads > maxHeads, fmt.Sprintf("1 to %d heads (head h predicts the token h+2 ahead; further heads rarely hit and each adds an output layer to the export)", maxHeads)},
			flagCheck{"tree-nodes", f.treeNodes < 0 || f.treeNodes > 256, "0 (no calibrated tree) to 256 paths"},
			flagCheck{blocks, f.blocks < 0, "the number of residual blocks per head, 0 or more"},
			flagCheck{"head-decay", !(f.headDecay > 0 && f.headDecay <= 1), "a loss decay per head in (0,1]"},
			flagCheck{warmupSteps, f.warmupSteps < 0, "a number of optimiser steps, 0 or more (0 turns the warm-up off)"},
			flagCheck{"epochs", f.epochs < 0, "an epoch cap of 1 or more, or 0 to choose it from the data"},
			flagCheck{"batch-tokens", f.batchTokens < 0, "tokens per step, 1 or more, or 0 to choose them from the data"},
			flagCheck{"val-fraction", !(f.valFraction >= 0 && f.valFraction < 1), "a fraction in [0,1)"},
		)
		if err := checkFlags(c, checks); err != nil {
			return o, err
		}
		cfg := medusa.DefaultConfig()
		if err := f.assignLoss(set, &cfg.Loss, &cfg.LKEta); err != nil {
			return o, err
		}
		assign(set, "heads", &cfg.Heads, f.heads)
		assign(set, blocks, &cfg.Layers, f.blocks)
		assign(set, "shared-lm-head", &cfg.SharedLMHead, f.sharedLMHead)
		assign(set, "head-decay", &cfg.Decay, f.headDecay)
		assign(set, "tree-nodes", &cfg.TreeNodes, f.treeNodes)
		assign(set, warmupSteps, &cfg.WarmupSteps, f.warmupSteps)
		f.assignShared(set, shared{lr: &cfg.LR, minLRRatio: &cfg.MinLRRatio, weightDecay: &cfg.WeightDecay, clipNorm: &cfg.ClipNorm,
			valFraction: &cfg.HeldOut, epochs: &cfg.MaxEpochs, maxSteps: &cfg.MaxSteps, patience: &cfg.Patience, evalEvery: &cfg.EvalEvery,
			batchTokens: &cfg.BatchTokens, checkpointEvery: &cfg.CheckpointEvery, logEvery: &cfg.LogEvery, seed: &cfg.Seed})
		if set("dtype") {
			switch strings.ToLower(f.dtype) {
			case "f32", "float32", "fp32":
				cfg.DType = safetensors.F32
			case "bf16", "bfloat16":
				cfg.DType = safetensors.BF16
			case "f16", "float16", "fp16":
				cfg.DType = safetensors.F16
			default:
				return o, usagef("--dtype %s: want f32, bf16 or f16", f.dtype)
			}
		}
		o.Method = medusa.Options{Config: cfg}

	case methodEAGLE3:
		checks = append(checks,
			flagCheck{"ttt-steps", f.tttSteps < 1, "an unroll length of 1 or more"},
			flagCheck{"ttt-decay", !(f.tttDecay > 0 && f.tttDecay <= 1), "a loss decay per step in (0,1]"},
			flagCheck{"draft-vocab", f.draftVocab < 1, "a vocabulary size of 1 or more"},
			flagCheck{"intermediate", f.intermediate < 1, "an MLP width of 1 or more"},
			flagCheck{"target-temperature", !(f.targetTemp > 0 && f.targetTemp <= 100), "a temperature in (0, 100]"},
			flagCheck{"max-length", f.maxLength < 3, "3 or more tokens (a sample needs 3 tokens to train a step)"},
			flagCheck{"warmup", !(f.warmupFrac >= 0 && f.warmupFrac < 1), "the warm-up fraction of all updates, in [0,1) (0 turns it off)"},
			flagCheck{"epochs", f.epochs < 0, "an epoch cap of 1 or more, or 0 to choose it from the data"},
			flagCheck{"batch-tokens", f.batchTokens < 3, "3 or more tokens per step"},
			flagCheck{"val-fraction", !(f.valFraction > 0 && f.valFraction < 1), "a fraction in (0,1): the trainer keeps the best weights by held-out loss"},
		)
		if err := checkFlags(c, checks); err != nil {
			return o, err
		}
		opts := eagle3.Options{Config: eagle3.DefaultConfig()}
		if set("variant") {
			switch f.variant {
			case variantEAGLE3:
				opts.Config.FCNorm, opts.Config.NormOutput = false, false
			case variantEAGLE31:
				opts.Config.FCNorm, opts.Config.NormOutput = true, true
			default:
				return o, usagef("--variant %q: want %s or %s", f.variant, variantEAGLE31, variantEAGLE3)
			}
		}
		if set("norm-before-fc") && f.normBeforeFC && !set("fc-norm") {
			// One norm over the fused features replaces the per-feature ones.
			opts.Config.FCNorm = false
		}
		if set("layers") {
			if err := eagle3Layers(f.layers); err != nil {
				return o, err
			}
			opts.Layers = f.layers
		}
		cfg := &opts.Config
		if err := f.assignLoss(set, &cfg.Loss, &cfg.LKEta); err != nil {
			return o, err
		}
		assign(set, "ttt-steps", &cfg.Steps, f.tttSteps)
		assign(set, "ttt-decay", &cfg.StepDecay, f.tttDecay)
		assign(set, "draft-vocab", &cfg.DraftVocab, f.draftVocab)
		assign(set, "intermediate", &cfg.Intermediate, f.intermediate)
		assign(set, "target-temperature", &cfg.TargetTemperature, f.targetTemp)
		assign(set, "max-length", &cfg.MaxLength, f.maxLength)
		assign(set, "warmup", &cfg.WarmupFrac, f.warmupFrac)
		assign(set, "fc-norm", &cfg.FCNorm, f.fcNorm)
		assign(set, "norm-before-fc", &cfg.NormBeforeFC, f.normBeforeFC)
		assign(set, "norm-output", &cfg.NormOutput, f.normOutput)
		if cfg.FCNorm && cfg.NormBeforeFC {
			return o, usagef("--fc-norm and --norm-before-fc exclude each other: one norm per feature layer before fc (EAGLE-3.1, on by default: --norm-before-fc alone turns it off), or one over their concatenation")
		}
		f.assignShared(set, shared{lr: &cfg.LR, minLRRatio: &cfg.MinLRRatio, weightDecay: &cfg.WeightDecay, clipNorm: &cfg.ClipNorm,
			valFraction: &cfg.EvalFraction, epochs: &cfg.Epochs, maxSteps: &cfg.MaxSteps, patience: &cfg.Patience, evalEvery: &cfg.EvalEvery,
			batchTokens: &cfg.BatchTokens, checkpointEvery: &cfg.CheckpointEvery, logEvery: &cfg.LogEvery, seed: &cfg.Seed})
		if set("format") {
			if f.format != deagle3.FormatNative && f.format != deagle3.FormatSpeculators {
				return o, usagef("--format %s: want %s or %s", f.format, deagle3.FormatNative, deagle3.FormatSpeculators)
			}
			cfg.Export.Format = f.format
		}
		o.Method = opts

	}
	return o, nil
}

// readMethodFlags checks drafter train --method's flags against the method
// and reads --layers and --warmup as the method reads them.
func (f *trainFlags) readMethodFlags(fs *pflag.FlagSet) error {
	var this, other trainSpelling
	var otherName string
	switch f.method {
	case methodMedusa:
		this, other, otherName = medusaCmd, eagle3Cmd, "an EAGLE-3"
	case methodEAGLE3:
		this, other, otherName = eagle3Cmd, medusaCmd, "a Medusa"
	default:
		return otherMethod(f.method)
	}
	// The other method's flags are those its subcommand has and this
	// method's does not; --layers and --warmup are read below.
	mine := flagNames(this)
	for n := range flagNames(other) {
		if !mine[n] && n != "layers" && n != "warmup" && fs.Changed(n) {
			return usagef("--%s is %s setting; it does not apply to --method %s (drafter train %s lists its flags)", n, otherName, f.method, f.method)
		}
	}
	switch f.method {
	case methodMedusa:
		if fs.Changed("layers") {
			n, err := strconv.Atoi(strings.TrimSpace(f.layersText))
			if err != nil {
				return usagef("--layers %s: for medusa it is the number of residual blocks per head (an integer >= 0)", f.layersText)
			}
			f.blocks = n
		}
		if fs.Changed("warmup") {
			n, err := strconv.Atoi(strings.TrimSpace(f.warmupText))
			if err != nil {
				return usagef("--warmup %s: for medusa it is a number of optimiser steps (an integer >= 0; by default 2%% of the scheduled steps)", f.warmupText)
			}
			f.warmupSteps = n
		}
	case methodEAGLE3:
		if fs.Changed("layers") {
			if err := (*intsValue)(&f.layers).Set(f.layersText); err != nil {
				return usagef("--layers %s: for eagle3 it takes 3 Hugging Face hidden_states indices, low,mid,high (for example 2,16,29)", f.layersText)
			}
		}
		if fs.Changed("warmup") {
			var v floatValue
			if err := v.Set(f.warmupText); err != nil {
				return usagef("--warmup %s: for eagle3 it is the warm-up fraction of all updates, in [0,1) (0 turns it off)", f.warmupText)
			}
			f.warmupFrac = float64(v)
		}
	}
	return nil
}

// flagNames returns the names of the flags of spelling sp.
func flagNames(sp trainSpelling) map[string]bool {
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	new(trainFlags).register(fs, sp)
	names := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
	return names
}

// eagle3Layers checks --layers for EAGLE-3: three hidden_states indices,
// ascending and distinct. The serving engines gather the auxiliary states
// in ascending layer order, each once, whatever order the draft's config
// lists: vLLM's LlamaModel.forward (vllm/model_executor/models/llama.py)
// walks the decoder layers and keeps the state entering layer idx when idx is
// in aux_hidden_state_layers, and its GPU model runner
// (vllm/v1/worker/gpu_model_runner.py) concatenates that list for the
// EAGLE-3 draft; SGLang's LlamaModel.forward
// (python/sglang/srt/models/llama.py) does the same with layers_to_capture,
// which LlamaForCausalLM.set_eagle3_layers_to_capture sets. A draft trained
// on 5,3,1 would be served its features as 1,3,5, and one trained on 3,3,3
// would get one copy of layer 3 where it expects three.
func eagle3Layers(layers []int) error {
	text := (*intsValue)(&layers).String()
	if len(layers) != 3 {
		return usagef("--layers %s: want 3 Hugging Face hidden_states indices, low,mid,high (for example 2,16,29), got %d", text, len(layers))
	}
	if slices.ContainsFunc(layers, func(k int) bool { return k < 1 }) {
		return usagef("--layers %s: want hidden_states indices of 1 or more (0 is the embedding output)", text)
	}
	u := slices.Compact(slices.Sorted(slices.Values(layers)))
	switch {
	case len(u) < 3:
		return usagef("--layers %s: engines gather each feature layer once; give 3 distinct hidden_states indices in ascending order", text)
	case !slices.Equal(u, layers):
		return usagef("--layers %s: engines gather the feature layers in ascending order; use --layers %d,%d,%d", text, u[0], u[1], u[2])
	}
	return nil
}

// shared points at the settings both trainers have, in one method's
// configuration.
type shared struct {
	lr, minLRRatio, weightDecay, clipNorm, valFraction                            *float64
	epochs, maxSteps, patience, evalEvery, batchTokens, checkpointEvery, logEvery *int
	seed                                                                          *uint64
}

// assignShared sets the shared settings whose flags the user gave.
func (f *trainFlags) assignShared(set func(string) bool, s shared) {
	assign(set, "lr", s.lr, f.lr)
	assign(set, "min-lr-ratio", s.minLRRatio, f.minLRRatio)
	assign(set, "weight-decay", s.weightDecay, f.weightDecay)
	assign(set, "clip-norm", s.clipNorm, f.clipNorm)
	assign(set, "val-fraction", s.valFraction, f.valFraction)
	assign(set, "epochs", s.epochs, f.epochs)
	assign(set, "max-steps", s.maxSteps, f.maxSteps)
	assign(set, "patience", s.patience, f.patience)
	assign(set, "eval-every", s.evalEvery, f.evalEvery)
	assign(set, "batch-tokens", s.batchTokens, f.batchTokens)
	assign(set, "checkpoint-every", s.checkpointEvery, f.checkpointEvery)
	assign(set, "log-every", s.logEvery, f.logEvery)
	assign(set, "seed", s.seed, f.seed)
}

// assignLoss checks --loss and --lk-eta and sets the trainer's Loss and
// LKEta from those given, canonically spelt (lkloss.Canonical), so that
// both spellings of the same loss record the same settings.
func (f *trainFlags) assignLoss(set func(string) bool, loss *string, eta *float64) error {
	if !set("loss") && !set("lk-eta") {
		return nil // the trainer's default
	}
	spec, e := *loss, *eta
	assign(set, "loss", &spec, f.loss)
	assign(set, "lk-eta", &e, f.lkEta)
	l, err := lkloss.Parse(spec, e)
	if err != nil {
		return usagef("--%v", err)
	}
	*loss, *eta = lkloss.Canonical(l), 0
	if l.UsesEta() {
		*eta = l.LK.Eta
	}
	return nil
}

// assign sets *dst to v when the flag name was given: a flag left out keeps
// the trainer's default.
// The --variant names: EAGLE-3.1's norms (fc_norm and norm_output) or plain
// EAGLE-3.
const (
	variantEAGLE31 = "eagle3.1"
	variantEAGLE3  = "eagle3"
)

// variantOf names the variant c's switches make (the default's, for the
// help).
func variantOf(c eagle3.Config) string {
	if c.FCNorm && c.NormOutput && !c.NormBeforeFC {
		return variantEAGLE31
	}
	return variantEAGLE3
}

func assign[T any](set func(string) bool, name string, dst *T, v T) {
	if set(name) {
		*dst = v
	}
}

const trainLong = `train reads the shards drafter distill captured from --model and trains a drafter on them,
with the target frozen:

  drafter train medusa   Medusa-1 heads on the target's final post-norm state; head h predicts
                         the token at t+h+2. Exported for vLLM (out/vllm/) and
                         FasterDecoding/TensorRT-LLM (out/medusa/).
  drafter train eagle3   one EAGLE-3 draft layer over the fused low/middle/high target features,
                         trained with training-time test. Exported to out/eagle3/ (--format
                         native or speculators). --fc-norm, --norm-before-fc and --norm-output
                         train EAGLE-3.1's norms (off: plain EAGLE-3, for engines that
                         predate 3.1); drafter.json's variant says which it is.

Each subcommand has only its method's flags. drafter train --method medusa|eagle3 takes both
methods' flags, refuses those of the other method, and reads --layers (medusa: residual blocks
per head; eagle3: feature layers) and --warmup (medusa: steps; eagle3: a fraction) as the
method does; it is kept for scripts, the subcommands are preferred. Both spellings of the
same settings train the same drafter and resume each other.

--data takes capture folders, a folder of them (every subfolder holding a manifest.json, such
as one per distill --shard i/n), or a quoted glob that drafter expands ('runs/d-*'). Every
capture directory must come from exactly this checkpoint (its manifest's model fingerprint is
checked), hold the columns the method reads and be stored like the others; the shards of a
--shard split must have been made with the same settings and all be there, and are read as one
dataset, by sample id, each sample once. The defaults train well
without tuning: medusa picks its batch and epoch cap from the data's size, eagle3 trains one
sample per update (SpecForge's recipe) up to an epoch cap; training stops when the held-out
metric stops improving (medusa: the chain acceptance its heads give on held-out responses;
eagle3: the held-out loss), and the best weights are exported. Flags left out keep the
method's trainer defaults.

--loss picks the training loss of either method: ce (the cross-entropy, the default) or an LK
loss (kl, tv, nla, lk_hybrid with --lk-eta, or a JSON object of them to weights), which trains
toward the acceptance rate α of speculative sampling; with an LK loss metrics.jsonl logs α.

out/ also receives metrics.jsonl, checkpoint.safetensors and drafter.json (method, target
fingerprint, the data manifests' SHA-256, all arguments, final held-out metrics). Ctrl-C
stops cleanly with a checkpoint; run the same command with --resume to continue: the result
is identical to an uninterrupted run. A resume with different settings is refused.`

// newCmdTrain is drafter train: the --method spelling, with the medusa and
// eagle3 subcommands.
func newCmdTrain(runF func(*trainOptions) error) *cobra.Command {
	c := newTrainCmd(byMethodFlag, runF, &cobra.Command{
		Use:   "train --method medusa|eagle3 --model DIR --data DIR[,DIR...] --out DIR",
		Short: "Train Medusa-1 heads or an EAGLE-3 draft layer on captured hidden states",
		Long:  trainLong,
		Example: `  drafter train medusa --model models/stories260k --data caps/stories --out drafters/medusa
  drafter train eagle3 --model /models/my-sft --data caps/a,caps/b --out drafters/eagle3 --format speculators
  drafter train eagle3 --model /models/my-sft --data caps/a --out drafters/eagle3 --resume
  drafter train eagle3 --model /models/my-sft --data '/data/distill/shard-*' --out drafters/eagle3
  drafter train --method medusa --model models/stories260k --data caps/stories --out drafters/medusa`,
	})
	c.AddCommand(
		newTrainCmd(medusaCmd, runF, &cobra.Command{
			Use:   "medusa --model DIR --data DIR[,DIR...] --out DIR",
			Short: "Train Medusa-1 heads on captured hidden states",
			Long: `train medusa trains Medusa-1 heads on the target's final post-norm state, the target frozen;
head h predicts the token at t+h+2. Exported for vLLM (out/vllm/) and
FasterDecoding/TensorRT-LLM (out/medusa/). See drafter train --help for the data checks,
the outputs and --resume.`,
			Example: `  drafter train medusa --model models/stories260k --data caps/stories --out drafters/medusa
  drafter train medusa --model /models/my-sft --data caps/a --out drafters/m --heads 5 --blocks 1 --warmup-steps 100`,
		}),
		newTrainCmd(eagle3Cmd, runF, &cobra.Command{
			Use:   "eagle3 --model DIR --data DIR[,DIR...] --out DIR",
			Short: "Train an EAGLE-3 draft layer on captured hidden states",
			Long: `train eagle3 trains one EAGLE-3 draft layer over the fused low/middle/high target features
(--layers, in ascending order), with training-time test, the target frozen. Exported to
out/eagle3/ (--format native or speculators). See drafter train --help for the data checks,
the outputs and --resume.`,
			Example: `  drafter train eagle3 --model /models/my-sft --data caps/a,caps/b --out drafters/eagle3 --format speculators
  drafter train eagle3 --model /models/my-sft --data caps/a --out drafters/eagle3 --layers 2,16,29 --warmup 0.02`,
		}),
	)
	c.AddCommand(methodCommands(runF)...)
	return c
}

// renamed maps the flags a subcommand does not have, but a user of the other
// spelling would try, to where the subcommand has that meaning.
func renamed(sp trainSpelling) map[string]string {
	switch sp {
	case medusaCmd:
		return map[string]string{"layers": "residual blocks per head are --blocks", "warmup": "the warm-up in optimiser steps is --warmup-steps"}
	case eagle3Cmd:
		return map[string]string{"blocks": "EAGLE-3 has one draft layer; --layers are its feature layers", "warmup-steps": "the warm-up is --warmup, a fraction of all updates"}
	}
	return nil
}

// newTrainCmd completes c as the spelling sp of drafter train.
func newTrainCmd(sp trainSpelling, runF func(*trainOptions) error, c *cobra.Command) *cobra.Command {
	var f trainFlags
	o := &trainOptions{}
	c.Args = noArgs
	c.RunE = func(c *cobra.Command, _ []string) error {
		var err error
		if o.Run, err = f.options(c, sp, c.ErrOrStderr()); err != nil {
			return err
		}
		o.JSON, o.Out = f.json, c.OutOrStdout()
		if runF != nil {
			return runF(o)
		}
		return runTrain(c.Context(), o)
	}
	f.register(c.Flags(), sp)
	o.Device.register(c)
	if hints := renamed(sp); hints != nil {
		c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
			for old, hint := range hints {
				if err.Error() == "unknown flag: --"+old {
					return usagef("%v: %s", err, hint)
				}
			}
			return &usageError{err}
		})
	}
	required := []string{"model", "data", "out"}
	if sp == byMethodFlag {
		required = append(required, "method")
	}
	requireFlags(c, required...)
	return c
}

func runTrain(ctx context.Context, o *trainOptions) error {
	o.Run.Cache = fileCache()
	dev, err := o.Device.open()
	if err != nil {
		return err
	}
	defer dev.Close()
	o.Run.Device = dev
	res, err := train.Run(ctx, o.Run)
	var le *eagle3.LayerError
	if errors.As(err, &le) && le.FromOverride {
		return &usageError{err}
	}
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSON(o.Out, res.Provenance)
	}
	for _, e := range res.Exports {
		fmt.Fprintln(o.Out, e)
	}
	return nil
}

// badPattern returns the first --data entry that is neither an existing path
// nor a valid glob pattern, "" when there is none.
func badPattern(entries []string) string {
	for _, e := range entries {
		if _, err := filepath.Match(e, ""); err != nil {
			if _, err := os.Stat(e); err != nil {
				return e
			}
		}
	}
	return ""
}
