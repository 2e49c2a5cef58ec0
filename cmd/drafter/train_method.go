package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/train"
	"github.com/drafter-ai/drafter/train/loop"
	trainmethods "github.com/drafter-ai/drafter/train/methods"
)

// runFlags are the flags of every drafter train run whatever its method:
// what to train on, where to write, and how to run.
type runFlags struct {
	model, out, precision           string
	data                            []string
	resume, verifyData, quiet, json bool
}

func (f *runFlags) register(c *cobra.Command) {
	fs := c.Flags()
	fs.StringVar(&f.model, "model", "", "the target checkpoint folder the data was captured from")
	fs.StringSliceVar(&f.data, "data", nil, "capture folders made by drafter distill or capture (comma-separated or repeated); a folder without manifest.json stands for its subfolders that have one (one per --shard), and a quoted glob such as 'runs/d-*' is expanded by drafter")
	fs.StringVar(&f.out, "out", "", "output folder: exports, drafter.json, metrics.jsonl, checkpoint")
	fs.BoolVar(&f.resume, "resume", false, "continue the run whose checkpoint is in --out (same settings required)")
	fs.StringVar(&f.precision, "precision", "auto", "arithmetic of the trainer's products: auto (bf16 on a CUDA GPU, fp32 on the CPU), fp32, or bf16 (operands rounded to bfloat16 for the GPU's tensor cores, float32 accumulation); weights, gradients and AdamW state are float32 always")
	fs.BoolVar(&f.verifyData, "verify-data", false, "verify every shard again, ignoring the verification cache (shards are always verified before training; an unchanged shard is otherwise not read again)")
	fs.BoolVarP(&f.quiet, "quiet", "q", false, "no progress bar or evaluation lines on stderr")
	fs.BoolVar(&f.json, "json", false, "print drafter.json on stdout when done")
}

// run checks the run's flags, builds the method (whose errors are all
// usage mistakes: build checks flags only) and trains it, or hands the
// options to runF.
func (f *runFlags) run(c *cobra.Command, o *trainOptions, runF func(*trainOptions) error, build func() (loop.Method, error)) error {
	fs := c.Flags()
	prec, err := train.ParsePrecision(strings.ToLower(f.precision))
	if err != nil {
		return &usageError{err}
	}
	bad := badPattern(f.data)
	if err := checkFlags(c, []flagCheck{{"data", bad != "", fmt.Sprintf("capture folders, folders of them, or glob patterns such as 'runs/d-*' (%q is not a valid pattern)", bad)}}); err != nil {
		return err
	}
	m, err := build()
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return err
		}
		return &usageError{err}
	}
	o.Run = train.Options{Model: f.model, Data: f.data, Out: f.out, Resume: f.resume, VerifyData: f.verifyData,
		Args: given(fs, "json", "device"), Notes: c.ErrOrStderr(), Precision: prec, Method: m}
	if !f.quiet {
		o.Run.Progress = c.ErrOrStderr()
	}
	o.JSON, o.Out = f.json, c.OutOrStdout()
	if runF != nil {
		return runF(o)
	}
	return runTrain(c.Context(), o)
}

// newMethodTrainCmd is `drafter train KIND` for a method that declares its
// own flags (train/methods): the run's flags are drafter's, the rest the
// method's.
func newMethodTrainCmd(mc loop.Command, runF func(*trainOptions) error) *cobra.Command {
	kind := string(mc.Kind())
	c := &cobra.Command{
		Use:   kind + " --model DIR --data DIR[,DIR...] --out DIR",
		Short: mc.Short(),
		Long:  mc.Long() + "\n\nSee drafter train --help for the data checks, the outputs and --resume.",
		Args:  noArgs,
	}
	if ex, ok := mc.(interface{ Example() string }); ok {
		c.Example = ex.Example()
	}
	var f runFlags
	f.register(c)
	build := mc.Flags(methodFlagSet{c.Flags()})
	o := &trainOptions{}
	o.Device.register(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		return f.run(c, o, runF, func() (loop.Method, error) { return build(c.Flags().Changed) })
	}
	if l, ok := mc.(loop.Legacy); ok {
		hints := l.Hints()
		c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
			for old, hint := range hints {
				if err.Error() == "unknown flag: --"+old {
					return usagef("%v: %s", err, hint)
				}
			}
			return &usageError{err}
		})
	}
	requireFlags(c, "model", "data", "out")
	return c
}

// methodFlagSet is the flag set a method declares its settings on: pflag's,
// with float flags that refuse NaN and infinities as drafter's all do.
type methodFlagSet struct{ *pflag.FlagSet }

// Float64Var declares a finite float flag (floatVar).
func (fs methodFlagSet) Float64Var(p *float64, name string, value float64, usage string) {
	floatVar(fs.FlagSet, p, name, value, usage)
}

// methodCommands returns drafter train's subcommands, one per method.
func methodCommands(runF func(*trainOptions) error) []*cobra.Command {
	var out []*cobra.Command
	for _, mc := range trainmethods.Commands() {
		out = append(out, newMethodTrainCmd(mc, runF))
	}
	return out
}

// methodKinds lists every method drafter train trains, for messages.
func methodKinds() string {
	var kinds []string
	for _, mc := range trainmethods.Commands() {
		kinds = append(kinds, string(mc.Kind()))
	}
	return strings.Join(kinds, ", ")
}

// otherMethod says how to train a method drafter train --method does not
// spell: its own subcommand.
func otherMethod(name string) error {
	for _, mc := range trainmethods.Commands() {
		if string(mc.Kind()) == name {
			return usagef("--method %s: train it with drafter train %s (its flags are listed by drafter train %s --help)", name, name, name)
		}
	}
	return usagef("--method %q: want one of %s", name, methodKinds())
}
