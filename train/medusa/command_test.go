package medusa

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/train/loop"
)

// commandOptions parses args with the command's flags and returns what it
// builds.
func commandOptions(args ...string) (Options, *pflag.FlagSet, error) {
	fs := pflag.NewFlagSet("medusa", pflag.ContinueOnError)
	build := Command{}.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return Options{}, fs, err
	}
	m, err := build(fs.Changed)
	if err != nil {
		return Options{}, fs, err
	}
	return m.(Options), fs, nil
}

// TestCommandFlags: no flag given trains DefaultConfig; every flag lands in
// its setting; a value out of range is a *loop.FlagError naming the flag.
func TestCommandFlags(t *testing.T) {
	o, fs, err := commandOptions()
	if err != nil || !reflect.DeepEqual(o.Config, DefaultConfig()) {
		t.Fatalf("no flags: %+v (%v), want DefaultConfig %+v", o.Config, err, DefaultConfig())
	}
	if d := fs.Lookup("blocks").DefValue; d != "3" || DefaultConfig().Layers != 3 {
		t.Errorf("--blocks default %s, want DefaultConfig's Layers %d", d, DefaultConfig().Layers)
	}
	o, _, err = commandOptions("--heads", "3", "--blocks", "2", "--warmup-steps", "17", "--shared-lm-head", "--head-decay", "1",
		"--dtype", "bf16", "--tree-nodes", "0", "--lr", "3e-3", "--val-fraction", "0", "--batch-tokens", "512", "--loss", "nla")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Heads, want.Layers, want.WarmupSteps, want.SharedLMHead, want.Decay, want.DType, want.TreeNodes = 3, 2, 17, true, 1, safetensors.BF16, 0
	want.LR, want.HeldOut, want.BatchTokens, want.Loss = 3e-3, 0, 512, "nla"
	if !reflect.DeepEqual(o.Config, want) {
		t.Errorf("mapped config %+v, want %+v", o.Config, want)
	}
	for _, c := range []struct {
		args []string
		flag string
		want string
	}{
		{[]string{"--heads", "17"}, "heads", "--heads 17: want 1 to 16 heads"},
		{[]string{"--blocks", "-1"}, "blocks", "--blocks -1: want the number of residual blocks per head, 0 or more"},
		{[]string{"--warmup-steps", "-1"}, "warmup-steps", "--warmup-steps -1: want a number of optimiser steps"},
		{[]string{"--tree-nodes", "257"}, "tree-nodes", "--tree-nodes 257: want 0 (no calibrated tree) to 256 paths"},
		{[]string{"--head-decay", "0"}, "head-decay", "--head-decay 0: want a loss decay per head in (0,1]"},
		{[]string{"--dtype", "int8"}, "dtype", "--dtype int8: want f32, bf16 or f16"},
		{[]string{"--val-fraction", "1"}, "val-fraction", "--val-fraction 1: want a fraction in [0,1)"},
		{[]string{"--batch-tokens", "-8"}, "batch-tokens", "--batch-tokens -8: want tokens per step, 1 or more, or 0"},
	} {
		_, _, err := commandOptions(c.args...)
		var fe *loop.FlagError
		if !errors.As(err, &fe) || fe.Flag != c.flag || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a *loop.FlagError for --%s with %q", c.args, err, c.flag, c.want)
		}
	}
}

// TestCommandLegacy: the flags drafter train --method medusa spells
// otherwise stand for flags the command has, and the hints name flags it
// does not have.
func TestCommandLegacy(t *testing.T) {
	_, fs, _ := commandOptions()
	for _, lf := range (Command{}).LegacyFlags() {
		if fs.Lookup(lf.Flag) == nil || lf.Want == "" {
			t.Errorf("--method's --%s stands for --%s, which medusa does not have (or says nothing)", lf.Name, lf.Flag)
		}
	}
	for name, hint := range (Command{}).Hints() {
		if fs.Lookup(name) != nil || hint == "" {
			t.Errorf("hint for --%s, a flag medusa has", name)
		}
	}
}
