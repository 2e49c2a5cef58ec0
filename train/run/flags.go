package run

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/medusa"
)

// Flags are drafter train's command-line settings as parsed. Given maps the
// name of every flag the user gave to its text; a flag not in Given keeps the
// chosen method's trainer default, whatever its field holds.
type Flags struct {
	Method, Model, Out string
	Data               []string

	// Layers is Medusa's residual blocks per head (one integer) or EAGLE-3's
	// feature layers (three Hugging Face hidden_states indices, low,mid,high).
	Layers string
	// Medusa only.
	Heads        int
	SharedLMHead bool
	HeadDecay    float64
	DType        string
	// EAGLE-3 only.
	TTTSteps     int
	TTTDecay     float64
	DraftVocab   int
	Intermediate int
	TargetTemp   float64
	MaxLength    int
	Format       string
	// Both.
	MaxSteps, EvalEvery                   int
	LR, MinLRRatio, WeightDecay, ClipNorm float64
	// Warmup is Medusa's warm-up in steps or EAGLE-3's warm-up fraction.
	Warmup                                                   string
	Epochs, Patience, BatchTokens, CheckpointEvery, LogEvery int
	ValFraction                                              float64
	Seed                                                     uint64
	Resume, Quiet, VerifyData                                bool
	Given                                                    map[string]string
}

// FlagError is a command-line mistake: a flag that does not apply to the
// method or a value it cannot take.
type FlagError struct{ Msg string }

// Error returns the message.
func (e *FlagError) Error() string { return e.Msg }

func flagErr(format string, a ...any) error { return &FlagError{Msg: fmt.Sprintf(format, a...)} }

// MedusaFlags lists the flags that apply to --method medusa only.
func MedusaFlags() []string {
	return []string{"heads", "shared-lm-head", "head-decay", "dtype"}
}

// EAGLE3Flags lists the flags that apply to --method eagle3 only.
func EAGLE3Flags() []string {
	return []string{"ttt-steps", "ttt-decay", "draft-vocab", "intermediate", "target-temperature", "max-length", "format"}
}

// Options maps the flags onto the chosen trainer's configuration, starting
// from its defaults. progress receives the progress bar unless Quiet.
func (f *Flags) Options(progress io.Writer) (Options, error) {
	given := func(name string) bool { _, ok := f.Given[name]; return ok }
	o := Options{Method: f.Method, Model: f.Model, Data: f.Data, Out: f.Out, Resume: f.Resume, VerifyData: f.VerifyData, Args: f.Given}
	if !f.Quiet {
		o.Progress = progress
	}
	switch f.Method {
	case MethodMedusa:
		for _, n := range EAGLE3Flags() {
			if given(n) {
				return o, flagErr("--%s is an EAGLE-3 setting; it does not apply to --method medusa", n)
			}
		}
		c := medusa.DefaultConfig()
		if given("layers") {
			n, err := strconv.Atoi(strings.TrimSpace(f.Layers))
			if err != nil || n < 0 {
				return o, flagErr("--layers for medusa is the number of residual blocks per head (an integer >= 0), got %q", f.Layers)
			}
			c.Layers = n
		}
		setInt(given, "heads", &c.Heads, f.Heads)
		if given("shared-lm-head") {
			c.SharedLMHead = f.SharedLMHead
		}
		setFloat(given, "head-decay", &c.Decay, f.HeadDecay)
		setFloat(given, "lr", &c.LR, f.LR)
		setFloat(given, "min-lr-ratio", &c.MinLRRatio, f.MinLRRatio)
		setFloat(given, "weight-decay", &c.WeightDecay, f.WeightDecay)
		setFloat(given, "clip-norm", &c.ClipNorm, f.ClipNorm)
		if given("warmup") {
			n, err := strconv.Atoi(strings.TrimSpace(f.Warmup))
			if err != nil || n < 0 {
				return o, flagErr("--warmup for medusa is a number of optimiser steps (an integer >= 0; by default 2%% of the scheduled steps), got %q", f.Warmup)
			}
			c.WarmupSteps = n
		}
		if (given("batch-tokens") && f.BatchTokens < 0) || (given("epochs") && f.Epochs < 0) {
			return o, flagErr("--batch-tokens and --epochs for medusa must be >= 1, or 0 to choose them from the data; got %d and %d", f.BatchTokens, f.Epochs)
		}
		setInt(given, "batch-tokens", &c.BatchTokens, f.BatchTokens)
		setInt(given, "epochs", &c.MaxEpochs, f.Epochs)
		setInt(given, "max-steps", &c.MaxSteps, f.MaxSteps)
		setInt(given, "patience", &c.Patience, f.Patience)
		setInt(given, "eval-every", &c.EvalEvery, f.EvalEvery)
		setFloat(given, "val-fraction", &c.HeldOut, f.ValFraction)
		setInt(given, "checkpoint-every", &c.CheckpointEvery, f.CheckpointEvery)
		setInt(given, "log-every", &c.LogEvery, f.LogEvery)
		if given("seed") {
			c.Seed = f.Seed
		}
		if given("dtype") {
			switch strings.ToLower(f.DType) {
			case "f32", "float32", "fp32":
				o.DType = "F32"
			case "bf16", "bfloat16":
				o.DType = "BF16"
			case "f16", "float16", "fp16":
				o.DType = "F16"
			default:
				return o, flagErr("--dtype must be f32, bf16 or f16, got %q", f.DType)
			}
		}
		o.Medusa = c

	case MethodEAGLE3:
		for _, n := range MedusaFlags() {
			if given(n) {
				return o, flagErr("--%s is a Medusa setting; it does not apply to --method eagle3", n)
			}
		}
		c := eagle3.DefaultConfig()
		if given("layers") {
			parts := strings.Split(f.Layers, ",")
			o.Layers = make([]int, len(parts))
			for i, p := range parts {
				n, err := strconv.Atoi(strings.TrimSpace(p))
				if err != nil {
					return o, flagErr("--layers for eagle3 takes 3 Hugging Face hidden_states indices, low,mid,high (for example 2,16,29), got %q", f.Layers)
				}
				o.Layers[i] = n
			}
			if len(o.Layers) != 3 {
				return o, flagErr("--layers for eagle3 takes 3 Hugging Face hidden_states indices, low,mid,high, got %d in %q", len(o.Layers), f.Layers)
			}
		}
		if given("ttt-steps") && f.TTTSteps < 1 {
			return o, flagErr("--ttt-steps must be >= 1, got %d", f.TTTSteps)
		}
		setInt(given, "ttt-steps", &c.Steps, f.TTTSteps)
		if given("ttt-decay") && !(f.TTTDecay > 0 && f.TTTDecay <= 1) {
			return o, flagErr("--ttt-decay must lie in (0,1], got %g", f.TTTDecay)
		}
		setFloat(given, "ttt-decay", &c.StepDecay, f.TTTDecay)
		if given("draft-vocab") && f.DraftVocab < 1 {
			return o, flagErr("--draft-vocab must be >= 1, got %d", f.DraftVocab)
		}
		setInt(given, "draft-vocab", &c.DraftVocab, f.DraftVocab)
		if given("intermediate") && f.Intermediate < 1 {
			return o, flagErr("--intermediate must be >= 1, got %d", f.Intermediate)
		}
		setInt(given, "intermediate", &c.Intermediate, f.Intermediate)
		if given("target-temperature") && !(f.TargetTemp > 0 && f.TargetTemp <= 100) {
			return o, flagErr("--target-temperature must lie in (0, 100], got %g", f.TargetTemp)
		}
		setFloat(given, "target-temperature", &c.TargetTemperature, f.TargetTemp)
		if given("format") {
			if f.Format != eagle3.FormatNative && f.Format != eagle3.FormatSpeculators {
				return o, flagErr("--format must be %s or %s, got %q", eagle3.FormatNative, eagle3.FormatSpeculators, f.Format)
			}
			o.Format = f.Format
		}
		if given("lr") && !(f.LR > 0) {
			return o, flagErr("--lr must be > 0, got %g", f.LR)
		}
		setFloat(given, "lr", &c.LR, f.LR)
		if given("min-lr-ratio") && !(f.MinLRRatio >= 0 && f.MinLRRatio <= 1) {
			return o, flagErr("--min-lr-ratio must lie in [0,1], got %g", f.MinLRRatio)
		}
		setFloat(given, "min-lr-ratio", &c.MinLRRatio, f.MinLRRatio)
		if given("weight-decay") && f.WeightDecay < 0 {
			return o, flagErr("--weight-decay must not be negative, got %g", f.WeightDecay)
		}
		setFloat(given, "weight-decay", &c.WeightDecay, f.WeightDecay)
		setFloat(given, "clip-norm", &c.ClipNorm, f.ClipNorm) // <= 0 disables
		if given("warmup") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f.Warmup), 64)
			if err != nil || !(v >= 0 && v < 1) {
				return o, flagErr("--warmup for eagle3 is the warm-up fraction of all updates, in [0,1) (0 turns it off; default %g), got %q", c.WarmupFrac, f.Warmup)
			}
			c.WarmupFrac = v
		}
		if given("batch-tokens") && f.BatchTokens < 3 {
			return o, flagErr("--batch-tokens must be >= 3, got %d", f.BatchTokens)
		}
		setInt(given, "batch-tokens", &c.BatchTokens, f.BatchTokens)
		if given("max-length") {
			if f.MaxLength < 3 {
				return o, flagErr("--max-length must be >= 3 (a sample needs 3 tokens to train a step), got %d", f.MaxLength)
			}
			c.MaxLength = f.MaxLength
		}
		if given("epochs") && f.Epochs < 1 {
			return o, flagErr("--epochs must be >= 1, got %d", f.Epochs)
		}
		setInt(given, "epochs", &c.Epochs, f.Epochs)
		if given("max-steps") && f.MaxSteps < 0 {
			return o, flagErr("--max-steps must be >= 0, got %d", f.MaxSteps)
		}
		setInt(given, "max-steps", &c.MaxSteps, f.MaxSteps)
		if given("patience") && f.Patience < 0 {
			return o, flagErr("--patience must be >= 0 (0 never stops early), got %d", f.Patience)
		}
		setInt(given, "patience", &c.Patience, f.Patience)
		if given("eval-every") && f.EvalEvery < 0 {
			return o, flagErr("--eval-every must be >= 0, got %d", f.EvalEvery)
		}
		setInt(given, "eval-every", &c.EvalEvery, f.EvalEvery)
		if given("val-fraction") && !(f.ValFraction > 0 && f.ValFraction < 1) {
			return o, flagErr("--val-fraction for eagle3 must lie in (0,1): the trainer keeps the best weights by held-out loss, got %g", f.ValFraction)
		}
		setFloat(given, "val-fraction", &c.EvalFraction, f.ValFraction)
		if given("checkpoint-every") && f.CheckpointEvery < 0 {
			return o, flagErr("--checkpoint-every must be >= 0, got %d", f.CheckpointEvery)
		}
		setInt(given, "checkpoint-every", &c.CheckpointEvery, f.CheckpointEvery)
		if given("log-every") && f.LogEvery < 0 {
			return o, flagErr("--log-every must be >= 0, got %d", f.LogEvery)
		}
		setInt(given, "log-every", &c.LogEvery, f.LogEvery)
		if given("seed") {
			c.Seed = f.Seed
		}
		o.EAGLE3 = c

	default:
		return o, flagErr("--method must be %s or %s, got %q", MethodMedusa, MethodEAGLE3, f.Method)
	}
	return o, nil
}

func setInt(given func(string) bool, name string, dst *int, v int) {
	if given(name) {
		*dst = v
	}
}

func setFloat(given func(string) bool, name string, dst *float64, v float64) {
	if given(name) {
		*dst = v
	}
}

// Register defines drafter train's flags on fs, bound to f's fields, with help
// texts that quote each method's trainer defaults (medusa.DefaultConfig and
// eagle3.DefaultConfig), so the help cannot drift from the code. Flags shared
// by both methods but defaulting differently show no pflag default of their
// own: a flag left out keeps the chosen method's default (see Options).
func (f *Flags) Register(fs *pflag.FlagSet) {
	m, e := medusa.DefaultConfig(), eagle3.DefaultConfig()
	both := func(mv, ev any) string {
		if fmt.Sprint(mv) == fmt.Sprint(ev) {
			return fmt.Sprintf("(default %v)", mv)
		}
		return fmt.Sprintf("(default: medusa %v, eagle3 %v)", mv, ev)
	}
	fs.StringVar(&f.Method, "method", "", "medusa or eagle3")
	fs.StringVar(&f.Model, "model", "", "the target checkpoint folder the data was captured from")
	fs.StringSliceVar(&f.Data, "data", nil, "capture directories made by drafter distill (comma-separated or repeated)")
	fs.StringVar(&f.Out, "out", "", "output folder: exports, drafter.json, metrics.jsonl, checkpoint")

	fs.StringVar(&f.Layers, "layers", "", fmt.Sprintf("medusa: residual blocks per head (default %d); eagle3: the 3 feature layers as Hugging Face hidden_states indices low,mid,high (default 2,L/2,L-3, or 1,(L+1)/2,L below 7 layers; must have been captured)", m.Layers))
	fs.IntVar(&f.Heads, "heads", m.Heads, "medusa: number of heads (head h predicts the token at t+h+2)")
	fs.BoolVar(&f.SharedLMHead, "shared-lm-head", m.SharedLMHead, "medusa: keep the target's lm_head for every head, frozen (a much smaller export)")
	fs.Float64Var(&f.HeadDecay, "head-decay", m.Decay, "medusa: loss weight of head h is decay^h (1 = equal weights)")
	fs.StringVar(&f.DType, "dtype", "f32", "medusa: dtype of the exported weights: f32, bf16 or f16")

	fs.IntVar(&f.TTTSteps, "ttt-steps", e.Steps, "eagle3: training-time-test unroll length")
	fs.Float64Var(&f.TTTDecay, "ttt-decay", e.StepDecay, "eagle3: loss weight of unrolled step k is decay^k")
	fs.IntVar(&f.DraftVocab, "draft-vocab", e.DraftVocab, "eagle3: draft vocabulary size N (the N most frequent response tokens; capped at the target's vocabulary)")
	fs.IntVar(&f.Intermediate, "intermediate", 0, "eagle3: MLP width of the draft layer, written as its intermediate_size (default: the target's intermediate_size)")
	fs.Float64Var(&f.TargetTemp, "target-temperature", 0, fmt.Sprintf("eagle3: the draft learns softmax(target logits / this) (default %g when all --data was distilled greedily, else 1)", eagle3.GreedyTargetTemperature))
	fs.IntVar(&f.MaxLength, "max-length", 0, fmt.Sprintf("eagle3: truncate samples to this many tokens (default %d); a sample longer than --batch-tokens trains as a batch of its own", e.MaxLength))
	fs.StringVar(&f.Format, "format", eagle3.FormatNative, "eagle3: export layout: native (EAGLE/SpecForge/SGLang, also loaded by vLLM) or speculators")

	fs.Float64Var(&f.LR, "lr", 0, "peak learning rate "+both(m.LR, e.LR))
	fs.Float64Var(&f.MinLRRatio, "min-lr-ratio", 0, "floor of the cosine decay as a fraction of --lr "+both(m.MinLRRatio, e.MinLRRatio))
	fs.Float64Var(&f.WeightDecay, "weight-decay", 0, "AdamW decoupled weight decay "+both(m.WeightDecay, e.WeightDecay))
	fs.Float64Var(&f.ClipNorm, "clip-norm", 0, "global gradient-norm clip, 0 disables "+both(m.ClipNorm, e.ClipNorm))
	fs.StringVar(&f.Warmup, "warmup", "", fmt.Sprintf("linear warm-up, 0 disables: medusa in optimiser steps (default %s), eagle3 as a fraction of all updates (default %g)", medusaWarmup(m), e.WarmupFrac))
	fs.IntVar(&f.Epochs, "epochs", 0, "epoch cap; training stops earlier when the held-out metric stops improving (medusa: greedy chain acceptance; eagle3: loss) "+both(medusaAuto(m.MaxEpochs, "enough epochs to see 1.5M positions, 2 to 40"), e.Epochs))
	fs.IntVar(&f.MaxSteps, "max-steps", 0, "stop after this many optimiser steps in total, 0 = no limit (the schedule still spans --epochs) "+both(m.MaxSteps, e.MaxSteps))
	fs.IntVar(&f.Patience, "patience", 0, "evaluations without held-out improvement before stopping, 0 = never stop early "+both(m.Patience, e.Patience))
	fs.IntVar(&f.EvalEvery, "eval-every", 0, "optimiser steps between held-out evaluations, 0 = once per epoch "+both(m.EvalEvery, e.EvalEvery))
	fs.IntVar(&f.BatchTokens, "batch-tokens", 0, "tokens per optimiser step; eagle3 packs whole samples up to it and trains a longer sample alone (one sample per step for samples over half of it) "+both(medusaAuto(m.BatchTokens, "training positions/256 as a power of two, 64 to 4096"), e.BatchTokens))
	fs.Float64Var(&f.ValFraction, "val-fraction", 0, "fraction of the samples held out for evaluation "+both(m.HeldOut, e.EvalFraction))
	fs.IntVar(&f.CheckpointEvery, "checkpoint-every", 0, "optimiser steps between checkpoints, 0 = at evaluations only "+both(m.CheckpointEvery, e.CheckpointEvery))
	fs.IntVar(&f.LogEvery, "log-every", 0, "optimiser steps between training lines in metrics.jsonl, 0 = none "+both(m.LogEvery, e.LogEvery))
	fs.Uint64Var(&f.Seed, "seed", 0, "seed of the held-out split, the sample order and the initialisation "+both(m.Seed, e.Seed))
	fs.BoolVar(&f.Resume, "resume", false, "continue the run whose checkpoint is in --out (same arguments required)")
	fs.BoolVar(&f.VerifyData, "verify-data", false, "recompute every shard's SHA-256 against its manifest before training")
	fs.BoolVarP(&f.Quiet, "quiet", "q", false, "no progress bar or evaluation lines on stderr")
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
