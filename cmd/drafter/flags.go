package main

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// floatValue is a float64 flag that refuses NaN and ±Inf when parsed: no
// setting of drafter means anything at a non-finite value, and a NaN would
// otherwise travel into the recorded settings (JSON cannot even encode it).
// Every float flag of every command uses it (TestFloatFlagsAreFinite).
type floatValue float64

func (f *floatValue) Set(s string) error {
	v, err := parseFinite(s)
	if err != nil {
		return errors.New("want a finite number")
	}
	*f = floatValue(v)
	return nil
}

// parseFinite parses a finite number.
func parseFinite(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
		err = errors.New("not a finite number")
	}
	return v, err
}

func (f *floatValue) String() string { return strconv.FormatFloat(float64(*f), 'g', -1, 64) }
func (f *floatValue) Type() string   { return "float" }

// floatVar defines a finite float flag.
func floatVar(fs *pflag.FlagSet, p *float64, name string, def float64, usage string) {
	*p = def
	fs.Var((*floatValue)(p), name, usage)
}

// flagCheck is one rule of a table of flag checks: bad says whether the
// flag's parsed value breaks the rule, want what the flag takes.
type flagCheck struct {
	flag string
	bad  bool
	want string
}

// checkFlags returns a *usageError naming the first flag of checks that the
// user set and whose value breaks its rule. Flags left out keep their
// defaults, which are valid (or stand for "the method's default").
func checkFlags(c *cobra.Command, checks []flagCheck) error {
	for _, k := range checks {
		f := c.Flags().Lookup(k.flag)
		if f == nil {
			panic("drafter: check of unknown flag --" + k.flag)
		}
		if k.bad && f.Changed {
			return usagef("--%s %s: want %s", k.flag, flagText(f), k.want)
		}
	}
	return nil
}

// flagText is a flag's value as the user wrote it, as near as pflag keeps
// it: lists without their brackets.
func flagText(f *pflag.Flag) string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return strings.Join(sv.GetSlice(), ",")
	}
	return f.Value.String()
}

// given returns the name and value of every flag the user set, as drafter
// train records them in drafter.json.
func given(fs *pflag.FlagSet, skip ...string) map[string]string {
	m := map[string]string{}
	fs.Visit(func(f *pflag.Flag) {
		if !slices.Contains(skip, f.Name) {
			m[f.Name] = f.Value.String()
		}
	})
	return m
}

// noArgs refuses positional arguments as a command-line mistake.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 && c.HasSubCommands() {
		return usagef("unknown command %q for %q", args[0], c.CommandPath())
	}
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q (flags start with --)", c.CommandPath(), args)
	}
	return nil
}

// requireFlags marks flags required: cobra refuses a command line without
// them before the command runs.
func requireFlags(c *cobra.Command, names ...string) {
	for _, n := range names {
		if err := c.MarkFlagRequired(n); err != nil {
			panic(err)
		}
	}
}
