package eagle3

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/train/loop"
)

// commandOptions parses args with the command's flags and returns what it
// builds.
func commandOptions(args ...string) (Options, *pflag.FlagSet, error) {
	fs := pflag.NewFlagSet("eagle3", pflag.ContinueOnError)
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

// TestCommandFlags: no flag given trains DefaultConfig with the target's
// layers; every flag lands in its setting; values out of range, layers the
// engines would gather otherwise, and contradicting norms are refused.
func TestCommandFlags(t *testing.T) {
	o, fs, err := commandOptions()
	if err != nil || !reflect.DeepEqual(o.Config, DefaultConfig()) || o.Layers != nil {
		t.Fatalf("no flags: %+v layers %v (%v), want DefaultConfig %+v", o.Config, o.Layers, err, DefaultConfig())
	}
	if d := fs.Lookup("ttt-steps").DefValue; d != "7" || DefaultConfig().Steps != 7 {
		t.Errorf("--ttt-steps default %s, want DefaultConfig's Steps %d", d, DefaultConfig().Steps)
	}
	o, _, err = commandOptions("--layers", "1, 3,4", "--ttt-steps", "3", "--warmup", "0", "--intermediate", "96", "--format", "speculators",
		"--variant", "eagle3", "--norm-before-fc", "--epochs", "5", "--val-fraction", "0.2", "--loss", "lk_hybrid", "--lk-eta", "2")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Steps, want.WarmupFrac, want.Intermediate, want.Epochs, want.EvalFraction = 3, 0, 96, 5, 0.2
	want.FCNorm, want.NormOutput, want.NormBeforeFC, want.Loss, want.LKEta = false, false, true, "lk_hybrid", 2
	want.Export.Format = "speculators"
	if !reflect.DeepEqual(o.Config, want) || !reflect.DeepEqual(o.Layers, []int{1, 3, 4}) {
		t.Errorf("mapped %+v layers %v, want %+v [1 3 4]", o.Config, o.Layers, want)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--layers", "5,3,1"}, "--layers 5,3,1: engines gather the feature layers in ascending order; use --layers 1,3,5"},
		{[]string{"--layers", "3,3,3"}, "--layers 3,3,3: engines gather each feature layer once"},
		{[]string{"--layers", "0,1,3"}, "--layers 0,1,3: want hidden_states indices of 1 or more"},
		{[]string{"--layers", "1,2"}, "--layers 1,2: want 3 Hugging Face hidden_states indices, low,mid,high (for example 2,16,29), got 2"},
		{[]string{"--warmup", "1"}, "--warmup 1: want the warm-up fraction of all updates, in [0,1)"},
		{[]string{"--batch-tokens", "2"}, "--batch-tokens 2: want 3 or more tokens per step"},
		{[]string{"--val-fraction", "0"}, "--val-fraction 0: want a fraction in (0,1)"},
		{[]string{"--target-temperature", "0"}, "--target-temperature 0: want a temperature in (0, 100]"},
		{[]string{"--format", "gguf"}, "--format gguf: want native or speculators"},
		{[]string{"--variant", "eagle3.2"}, `--variant "eagle3.2": want eagle3.1 or eagle3`},
		{[]string{"--fc-norm", "--norm-before-fc"}, "--fc-norm and --norm-before-fc exclude each other"},
	} {
		if _, _, err := commandOptions(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	// A list that does not read is a syntax error, which drafter train
	// --method eagle3 reports in LegacyFlags' words.
	_, _, err = commandOptions("--layers", "a,b,c")
	var fe *loop.FlagError
	if !errors.As(err, &fe) || !fe.Syntax || fe.Flag != "layers" {
		t.Errorf("--layers a,b,c: %v, want a *loop.FlagError with Syntax", err)
	}
}

// TestCommandLegacy: the flags drafter train --method eagle3 spells
// otherwise stand for flags the command has, and the hints name flags it
// does not have.
func TestCommandLegacy(t *testing.T) {
	_, fs, _ := commandOptions()
	for _, lf := range (Command{}).LegacyFlags() {
		if fs.Lookup(lf.Flag) == nil || lf.Want == "" {
			t.Errorf("--method's --%s stands for --%s, which eagle3 does not have (or says nothing)", lf.Name, lf.Flag)
		}
	}
	for name, hint := range (Command{}).Hints() {
		if fs.Lookup(name) != nil || hint == "" {
			t.Errorf("hint for --%s, a flag eagle3 has", name)
		}
	}
}
