package run

import (
	"fmt"
	"io"
	"strconv"
	"strings"

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
	MaxSteps     int
	EvalEvery    int
	DType        string
	// EAGLE-3 only.
	TTTSteps   int
	TTTDecay   float64
	DraftVocab int
	MaxLength  int
	Format     string
	// Both.
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
	return []string{"heads", "shared-lm-head", "head-decay", "max-steps", "eval-every", "dtype"}
}

// EAGLE3Flags lists the flags that apply to --method eagle3 only.
func EAGLE3Flags() []string {
	return []string{"ttt-steps", "ttt-decay", "draft-vocab", "max-length", "format"}
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
		var c eagle3.Config // zero values take the trainer's defaults
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
		if given("max-length") && f.MaxLength < 3 {
			return o, flagErr("--max-length must be >= 3 (a sample needs 3 tokens to train a step), got %d", f.MaxLength)
		}
		setInt(given, "max-length", &c.MaxLength, f.MaxLength)
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
		setFloat(given, "min-lr-ratio", &c.MinLRRatio, f.MinLRRatio)
		setFloat(given, "weight-decay", &c.WeightDecay, f.WeightDecay)
		if given("clip-norm") {
			c.ClipNorm = f.ClipNorm
			if f.ClipNorm <= 0 {
				c.ClipNorm = -1 // the trainer's "disabled" (0 would mean its default)
			}
		}
		if given("warmup") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f.Warmup), 64)
			if err != nil || !(v > 0 && v < 1) {
				return o, flagErr("--warmup for eagle3 is the warm-up fraction of all updates, in (0,1) (default 0.015), got %q", f.Warmup)
			}
			c.WarmupFrac = v
		}
		if given("batch-tokens") && f.BatchTokens < 3 {
			return o, flagErr("--batch-tokens must be >= 3, got %d", f.BatchTokens)
		}
		setInt(given, "batch-tokens", &c.BatchTokens, f.BatchTokens)
		if given("epochs") && f.Epochs < 1 {
			return o, flagErr("--epochs must be >= 1, got %d", f.Epochs)
		}
		setInt(given, "epochs", &c.Epochs, f.Epochs)
		if given("patience") {
			c.Patience = f.Patience
			if f.Patience <= 0 {
				c.Patience = -1 // never stop early (0 would mean the trainer's default)
			}
		}
		if given("val-fraction") && !(f.ValFraction > 0 && f.ValFraction < 1) {
			return o, flagErr("--val-fraction for eagle3 must lie in (0,1): the trainer keeps the best weights by held-out loss, got %g", f.ValFraction)
		}
		setFloat(given, "val-fraction", &c.EvalFraction, f.ValFraction)
		if given("checkpoint-every") && f.CheckpointEvery < 0 {
			return o, flagErr("--checkpoint-every must be >= 0, got %d", f.CheckpointEvery)
		}
		setInt(given, "checkpoint-every", &c.CheckpointEvery, f.CheckpointEvery)
		if given("log-every") && f.LogEvery < 1 {
			return o, flagErr("--log-every must be >= 1, got %d", f.LogEvery)
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
