package loop

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/drafter-ai/drafter/pkg/drafters"
)

// FlagSet is where a method declares its settings as command-line flags;
// drafter's command line (*pflag.FlagSet) satisfies it, and the method
// packages need not know the flag library.
type FlagSet interface {
	IntVar(p *int, name string, value int, usage string)
	Float64Var(p *float64, name string, value float64, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
	StringVar(p *string, name string, value string, usage string)
	Uint64Var(p *uint64, name string, value uint64, usage string)
}

// Command is a method as drafter train offers it: `drafter train KIND`
// with the flags the method declares. The command adds the flags of every
// run (--model, --data, --out, --resume, --precision, the device's).
type Command interface {
	// Kind names the method, and the subcommand.
	Kind() drafters.Kind
	// Short is the subcommand's one-line description, Long its help.
	Short() string
	Long() string
	// Flags declares the method's settings on fs, their trainer defaults
	// as the flags' values, and returns what the command calls after
	// parsing: changed reports whether the user gave a flag; it checks the
	// values and returns the Method to train. Its errors are usage mistakes
	// and name the flag and what it takes (a *FlagError, or the method's
	// own check).
	Flags(fs FlagSet) (build func(changed func(name string) bool) (Method, error))
}

// FlagError is a flag value a method refuses: the command reports it as a
// usage mistake.
type FlagError struct {
	// Flag is the flag's name without dashes, Value the value given and
	// Want what the flag takes.
	Flag  string
	Value any
	Want  string
}

func (e *FlagError) Error() string { return fmt.Sprintf("--%s %v: want %s", e.Flag, e.Value, e.Want) }

// Common are the loop settings the trainers share, as one method declares
// them with its own defaults (Register) and checks them (Check).
type Common struct {
	// LR is the peak learning rate, MinLRRatio the cosine floor as a
	// fraction of it, WarmupFrac the linear warm-up as a fraction of all
	// updates.
	LR, MinLRRatio, WarmupFrac float64
	// WeightDecay is AdamW's decoupled decay, ClipNorm the global gradient
	// norm clip (0 off).
	WeightDecay, ClipNorm float64
	// ValFraction is the share of samples held out; the best weights by
	// held-out loss are exported.
	ValFraction float64
	// Epochs caps the epochs, MaxSteps the optimiser steps (0 = none),
	// Patience the evaluations without improvement (0 = never stop early).
	Epochs, MaxSteps, Patience int
	// EvalEvery, CheckpointEvery and LogEvery are steps between held-out
	// evaluations (0 = once per epoch), checkpoints (0 = at evaluations) and
	// metrics lines (0 = none).
	EvalEvery, CheckpointEvery, LogEvery int
	// Seed seeds the split, the sample order and the initialisation.
	Seed uint64
}

// Register declares c's fields on fs with c's values as the defaults.
func (c *Common) Register(fs FlagSet) {
	fs.Float64Var(&c.LR, "lr", c.LR, "peak learning rate, above 0")
	fs.Float64Var(&c.MinLRRatio, "min-lr-ratio", c.MinLRRatio, "floor of the cosine decay as a fraction of --lr, in [0,1]")
	fs.Float64Var(&c.WarmupFrac, "warmup", c.WarmupFrac, "linear warm-up as a fraction of all updates, in [0,1) (0 turns it off)")
	fs.Float64Var(&c.WeightDecay, "weight-decay", c.WeightDecay, "AdamW decoupled weight decay, 0 or more")
	fs.Float64Var(&c.ClipNorm, "clip-norm", c.ClipNorm, "global gradient-norm clip, 0 disables")
	fs.Float64Var(&c.ValFraction, "val-fraction", c.ValFraction, "fraction of the samples held out for evaluation, in (0,1): the best weights by held-out loss are exported")
	fs.IntVar(&c.Epochs, "epochs", c.Epochs, "epoch cap, 1 or more; training stops earlier when the held-out loss stops improving")
	fs.IntVar(&c.MaxSteps, "max-steps", c.MaxSteps, "stop after this many optimiser steps in total, 0 = no limit (the schedule still spans --epochs)")
	fs.IntVar(&c.Patience, "patience", c.Patience, "evaluations without held-out improvement before stopping, 0 = never stop early")
	fs.IntVar(&c.EvalEvery, "eval-every", c.EvalEvery, "optimiser steps between held-out evaluations, 0 = once per epoch")
	fs.IntVar(&c.CheckpointEvery, "checkpoint-every", c.CheckpointEvery, "optimiser steps between checkpoints, 0 = at evaluations only")
	fs.IntVar(&c.LogEvery, "log-every", c.LogEvery, "optimiser steps between training lines in metrics.jsonl, 0 = none")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the held-out split, the sample order and the initialisation")
}

// Check refuses a value out of its range with a *FlagError.
func (c *Common) Check() error {
	for _, f := range []struct {
		bad  bool
		flag string
		v    any
		want string
	}{
		{!(c.LR > 0), "lr", c.LR, "a learning rate above 0"},
		{!(c.MinLRRatio >= 0 && c.MinLRRatio <= 1), "min-lr-ratio", c.MinLRRatio, "a fraction of --lr in [0,1]"},
		{!(c.WarmupFrac >= 0 && c.WarmupFrac < 1), "warmup", c.WarmupFrac, "a fraction of all updates in [0,1)"},
		{!(c.WeightDecay >= 0), "weight-decay", c.WeightDecay, "0 or a positive weight decay"},
		{!(c.ClipNorm >= 0), "clip-norm", c.ClipNorm, "0 (no clipping) or a positive gradient norm"},
		{!(c.ValFraction > 0 && c.ValFraction < 1), "val-fraction", c.ValFraction, "a fraction in (0,1)"},
		{c.Epochs < 1, "epochs", c.Epochs, "an epoch cap of 1 or more"},
		{c.MaxSteps < 0, "max-steps", c.MaxSteps, "0 (no limit) or a positive number of steps"},
		{c.Patience < 0, "patience", c.Patience, "0 (never stop early) or a positive number of evaluations"},
		{c.EvalEvery < 0, "eval-every", c.EvalEvery, "0 (once per epoch) or a positive number of steps"},
		{c.CheckpointEvery < 0, "checkpoint-every", c.CheckpointEvery, "0 (at evaluations only) or a positive number of steps"},
		{c.LogEvery < 0, "log-every", c.LogEvery, "0 (no training lines) or a positive number of steps"},
	} {
		if f.bad {
			return &FlagError{Flag: f.flag, Value: f.v, Want: f.want}
		}
	}
	return nil
}

// ParseLayers reads a --layers value: comma-separated Hugging Face
// hidden_states indices, such as 2,3.
func ParseLayers(flag, text string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(text, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, &FlagError{Flag: flag, Value: text, Want: "comma-separated hidden_states indices such as 2,3"}
		}
		out = append(out, k)
	}
	return out, nil
}
