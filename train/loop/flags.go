package loop

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/train/lkloss"
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

// Legacy is a method that `drafter train --method KIND` also trains, the
// spelling kept for scripts: that command line has the flags of all such
// methods, refuses those of a method other than KIND, and reads the flags
// that LegacyFlags lists as KIND reads them. A method that implements it
// also gives the hints of its own subcommand for the flags that the other
// spelling, or another method, has under another name.
type Legacy interface {
	Command
	// Settings names the method's settings in messages, with the article:
	// "--heads is a Medusa setting".
	Settings() string
	// LegacyFlags are the flags drafter train --method spells otherwise
	// than the method's subcommand.
	LegacyFlags() []LegacyFlag
	// Hints maps flags the subcommand does not have, but that a user of
	// the other spelling would try, to where the subcommand has that
	// meaning ("residual blocks per head are --blocks").
	Hints() map[string]string
}

// LegacyFlag is a flag of drafter train --method KIND that several
// methods share but read each its own way: its text is given to the
// method's flag Flag, and refused with Want when that flag cannot read it
// (its flag set refuses the text, or the method's check returns a
// *FlagError with Syntax).
type LegacyFlag struct {
	// Name is the flag under --method, Flag the method's own flag that
	// receives its value (the same name or another).
	Name, Flag string
	// Want says what Name takes for this method, as in "--layers x: for
	// medusa it is the number of residual blocks per head".
	Want string
}

// FlagMistake is an error a method finds while training that the user's
// flags caused, such as --layers past the target's depth, which is known
// only once the target is read: the command reports it as a usage
// mistake when FlagMistake is true.
type FlagMistake interface {
	error
	FlagMistake() bool
}

// FlagError is a flag value a method refuses: the command reports it as a
// usage mistake.
type FlagError struct {
	// Flag is the flag's name without dashes, Value the value given and
	// Want what the flag takes.
	Flag  string
	Value any
	Want  string
	// Syntax tells a value that cannot be read at all (not a list of
	// numbers, say) from one out of range: drafter train --method says
	// then what its shared flags take for the method (LegacyFlag.Want).
	Syntax bool
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
	always := func(string) bool { return true }
	return CheckGiven(always, append(scheduleRules(c.LR, c.MinLRRatio, c.WeightDecay, c.ClipNorm, c.MaxSteps, c.Patience, c.EvalEvery, c.CheckpointEvery, c.LogEvery),
		Rule{"warmup", !(c.WarmupFrac >= 0 && c.WarmupFrac < 1), c.WarmupFrac, "a fraction of all updates in [0,1)"},
		Rule{"val-fraction", !(c.ValFraction > 0 && c.ValFraction < 1), c.ValFraction, "a fraction in (0,1)"},
		Rule{"epochs", c.Epochs < 1, c.Epochs, "an epoch cap of 1 or more"},
	)...)
}

// scheduleRules are the checks of the loop settings whose ranges every
// method shares.
func scheduleRules(lr, minLRRatio, weightDecay, clipNorm float64, maxSteps, patience, evalEvery, checkpointEvery, logEvery int) []Rule {
	return []Rule{
		{"lr", !(lr > 0), lr, "a learning rate above 0"},
		{"min-lr-ratio", !(minLRRatio >= 0 && minLRRatio <= 1), minLRRatio, "a fraction of --lr in [0,1]"},
		{"weight-decay", !(weightDecay >= 0), weightDecay, "0 or a positive weight decay"},
		{"clip-norm", !(clipNorm >= 0), clipNorm, "0 (no clipping) or a positive gradient norm"},
		{"max-steps", maxSteps < 0, maxSteps, "0 (no limit) or a positive number of steps"},
		{"patience", patience < 0, patience, "0 (never stop early) or a positive number of evaluations"},
		{"eval-every", evalEvery < 0, evalEvery, "0 (once per epoch) or a positive number of steps"},
		{"checkpoint-every", checkpointEvery < 0, checkpointEvery, "0 (at evaluations only) or a positive number of steps"},
		{"log-every", logEvery < 0, logEvery, "0 (no training lines) or a positive number of steps"},
	}
}

// Rule is one check of a flag's value: Bad says whether the value breaks
// it, Want what the flag takes.
type Rule struct {
	Flag  string
	Bad   bool
	Value any
	Want  string
}

// CheckGiven returns a *FlagError for the first rule broken by a flag the
// user gave (changed): a flag left out keeps a trainer default, which is
// valid or stands for "from the data".
func CheckGiven(changed func(string) bool, rules ...Rule) error {
	for _, r := range rules {
		if r.Bad && changed(r.Flag) {
			return &FlagError{Flag: r.Flag, Value: r.Value, Want: r.Want}
		}
	}
	return nil
}

// Given points at the loop settings in a trainer's configuration that
// Medusa's and EAGLE-3's commands declare alike (RegisterGiven): a flag
// starts at zero, its help quotes the value pointed at as the trainer
// default, and only a flag the user gives sets its setting, so that a flag
// left out keeps the trainer's default even where that is "from the data".
type Given struct {
	LR, MinLRRatio, WeightDecay, ClipNorm, ValFraction                            *float64
	Epochs, MaxSteps, Patience, EvalEvery, BatchTokens, CheckpointEvery, LogEvery *int
	Seed                                                                          *uint64
}

// GivenRules are the method's own words and ranges for the settings of
// Given whose meaning depends on it.
type GivenRules struct {
	// Metric is the held-out metric that stops training early.
	Metric string
	// EpochsDefault and BatchDefault describe the defaults of --epochs and
	// --batch-tokens when not their values ("from the data: ...").
	EpochsDefault, BatchDefault string
	// Batch is --batch-tokens' help; BatchOK its range, BatchWant what it
	// takes.
	Batch, BatchWant string
	BatchOK          func(int) bool
	// ValFraction is --val-fraction's help; ValOK its range, ValWant what
	// it takes.
	ValFraction, ValWant string
	ValOK                func(float64) bool
}

// RegisterGiven declares the settings of to on fs, with help quoting their
// current values as the defaults, and returns what sets them after
// parsing: it checks the flags given (a *FlagError for a value out of
// range) and copies them into to.
func RegisterGiven(fs FlagSet, to Given, r GivenRules) func(changed func(string) bool) error {
	def := func(v any) string { return fmt.Sprintf("(default %v)", v) }
	orText := func(text string, v int) string {
		if text != "" {
			return "(default " + text + ")"
		}
		return def(v)
	}
	var v struct {
		lr, minLRRatio, weightDecay, clipNorm, valFraction                            float64
		epochs, maxSteps, patience, evalEvery, batchTokens, checkpointEvery, logEvery int
		seed                                                                          uint64
	}
	fs.Float64Var(&v.lr, "lr", 0, "peak learning rate, above 0 "+def(*to.LR))
	fs.Float64Var(&v.minLRRatio, "min-lr-ratio", 0, "floor of the cosine decay as a fraction of --lr, in [0,1] "+def(*to.MinLRRatio))
	fs.Float64Var(&v.weightDecay, "weight-decay", 0, "AdamW decoupled weight decay, 0 or more "+def(*to.WeightDecay))
	fs.Float64Var(&v.clipNorm, "clip-norm", 0, "global gradient-norm clip, 0 disables "+def(*to.ClipNorm))
	fs.IntVar(&v.epochs, "epochs", 0, "epoch cap, 1 or more, or 0 to choose it from the data; training stops earlier when the held-out metric stops improving ("+r.Metric+") "+orText(r.EpochsDefault, *to.Epochs))
	fs.IntVar(&v.maxSteps, "max-steps", 0, "stop after this many optimiser steps in total, 0 = no limit (the schedule still spans --epochs) "+def(*to.MaxSteps))
	fs.IntVar(&v.patience, "patience", 0, "evaluations without held-out improvement before stopping, 0 = never stop early "+def(*to.Patience))
	fs.IntVar(&v.evalEvery, "eval-every", 0, "optimiser steps between held-out evaluations, 0 = once per epoch "+def(*to.EvalEvery))
	fs.IntVar(&v.batchTokens, "batch-tokens", 0, r.Batch+" "+orText(r.BatchDefault, *to.BatchTokens))
	fs.Float64Var(&v.valFraction, "val-fraction", 0, r.ValFraction+" "+def(*to.ValFraction))
	fs.IntVar(&v.checkpointEvery, "checkpoint-every", 0, "optimiser steps between checkpoints, 0 = at evaluations only "+def(*to.CheckpointEvery))
	fs.IntVar(&v.logEvery, "log-every", 0, "optimiser steps between training lines in metrics.jsonl, 0 = none "+def(*to.LogEvery))
	fs.Uint64Var(&v.seed, "seed", 0, "seed of the held-out split, the sample order and the initialisation "+def(*to.Seed))
	return func(changed func(string) bool) error {
		rules := append(scheduleRules(v.lr, v.minLRRatio, v.weightDecay, v.clipNorm, v.maxSteps, v.patience, v.evalEvery, v.checkpointEvery, v.logEvery),
			Rule{"epochs", v.epochs < 0, v.epochs, "an epoch cap of 1 or more, or 0 to choose it from the data"},
			Rule{"batch-tokens", !r.BatchOK(v.batchTokens), v.batchTokens, r.BatchWant},
			Rule{"val-fraction", !r.ValOK(v.valFraction), v.valFraction, r.ValWant})
		if err := CheckGiven(changed, rules...); err != nil {
			return err
		}
		Assign(changed, "lr", to.LR, v.lr)
		Assign(changed, "min-lr-ratio", to.MinLRRatio, v.minLRRatio)
		Assign(changed, "weight-decay", to.WeightDecay, v.weightDecay)
		Assign(changed, "clip-norm", to.ClipNorm, v.clipNorm)
		Assign(changed, "val-fraction", to.ValFraction, v.valFraction)
		Assign(changed, "epochs", to.Epochs, v.epochs)
		Assign(changed, "max-steps", to.MaxSteps, v.maxSteps)
		Assign(changed, "patience", to.Patience, v.patience)
		Assign(changed, "eval-every", to.EvalEvery, v.evalEvery)
		Assign(changed, "batch-tokens", to.BatchTokens, v.batchTokens)
		Assign(changed, "checkpoint-every", to.CheckpointEvery, v.checkpointEvery)
		Assign(changed, "log-every", to.LogEvery, v.logEvery)
		Assign(changed, "seed", to.Seed, v.seed)
		return nil
	}
}

// RegisterLoss declares --loss and --lk-eta on fs (the loss trained toward
// target) and returns what sets *loss and *eta from those given after
// parsing, the loss canonically spelt (lkloss.Canonical) so that every
// spelling of the same loss records the same settings; without either flag
// they keep the trainer's default.
func RegisterLoss(fs FlagSet, target string, loss *string, eta *float64) func(changed func(string) bool) error {
	var spec string
	var e float64
	fs.StringVar(&spec, "loss", lkloss.CE, fmt.Sprintf("training loss, %s: ce (cross-entropy), or an LK loss (arXiv 2602.23881) that trains toward the acceptance rate α: kl, tv (1-α), nla (-log α), lk_hybrid (λ·kl + (1-λ)·tv, λ = exp(-η·α)), or a JSON object of them to weights such as '{\"kl\":0.1,\"tv\":0.9}'", target))
	fs.Float64Var(&e, "lk-eta", lkloss.DefaultEta, "η of lk_hybrid's λ = exp(-η·α), 0 or more; only with a --loss that weighs lk_hybrid")
	return func(changed func(string) bool) error {
		if !changed("loss") && !changed("lk-eta") {
			return nil // the trainer's default
		}
		s, x := *loss, *eta
		Assign(changed, "loss", &s, spec)
		Assign(changed, "lk-eta", &x, e)
		l, err := lkloss.Parse(s, x)
		if err != nil {
			return fmt.Errorf("--%w", err)
		}
		*loss, *eta = lkloss.Canonical(l), 0
		if l.UsesEta() {
			*eta = l.LK.Eta
		}
		return nil
	}
}

// Assign sets *dst to v when the flag name was given (changed): a flag
// left out keeps the trainer default in *dst.
func Assign[T any](changed func(string) bool, name string, dst *T, v T) {
	if changed(name) {
		*dst = v
	}
}

// ParseLayers reads a --layers value: comma-separated Hugging Face
// hidden_states indices, such as 2,3.
func ParseLayers(flag, text string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(text, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, &FlagError{Flag: flag, Value: text, Want: "comma-separated hidden_states indices such as 2,3", Syntax: true}
		}
		out = append(out, k)
	}
	return out, nil
}
