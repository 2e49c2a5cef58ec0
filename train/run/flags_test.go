package run

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/medusa"
)

func TestFlagsDefaults(t *testing.T) {
	// Field values of flags not given are ignored: the trainer defaults apply.
	f := Flags{Method: MethodMedusa, Heads: 9, LR: 5, Patience: 77, Given: map[string]string{}}
	o, err := f.Options(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.Medusa, medusa.DefaultConfig()) {
		t.Errorf("medusa config without flags = %+v, want DefaultConfig %+v", o.Medusa, medusa.DefaultConfig())
	}
	if o.Progress == nil {
		t.Error("progress writer dropped without --quiet")
	}
	f = Flags{Method: MethodEAGLE3, TTTSteps: 3, LR: 5, Quiet: true, Given: map[string]string{"quiet": "true"}}
	o, err = f.Options(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.EAGLE3, eagle3.DefaultConfig()) || o.Layers != nil || o.Format != "" || o.Progress != nil {
		t.Errorf("eagle3 options without flags = %+v, want DefaultConfig %+v and no progress", o, eagle3.DefaultConfig())
	}
	// --batch-tokens does not bound --max-length: a longer sample trains as
	// a batch of its own.
	e := eagle3.DefaultConfig()
	f = Flags{Method: MethodEAGLE3, BatchTokens: 64, MaxLength: 4096, Given: map[string]string{"batch-tokens": "64", "max-length": "4096"}}
	if o, err = f.Options(nil); err != nil || o.EAGLE3.MaxLength != 4096 || o.EAGLE3.BatchTokens != 64 {
		t.Errorf("--batch-tokens 64 --max-length 4096: max length %d, batch %d, err %v; want 4096, 64", o.EAGLE3.MaxLength, o.EAGLE3.BatchTokens, err)
	}
	f = Flags{Method: MethodEAGLE3, BatchTokens: 64, Given: map[string]string{"batch-tokens": "64"}}
	if o, err = f.Options(nil); err != nil || o.EAGLE3.MaxLength != e.MaxLength || o.EAGLE3.BatchTokens != 64 {
		t.Errorf("--batch-tokens 64: max length %d, batch %d, err %v; want %d, 64", o.EAGLE3.MaxLength, o.EAGLE3.BatchTokens, err, e.MaxLength)
	}
}

func TestFlagsMapping(t *testing.T) {
	given := func(names ...string) map[string]string {
		m := map[string]string{}
		for _, n := range names {
			m[n] = "x"
		}
		return m
	}
	f := Flags{Method: MethodMedusa, Heads: 3, Layers: "2", SharedLMHead: true, HeadDecay: 1, LR: 3e-3, WeightDecay: 0.1, Warmup: "17",
		Epochs: 9, MaxSteps: 50, Patience: 0, BatchTokens: 512, ValFraction: 0.1, EvalEvery: 25, CheckpointEvery: 10, Seed: 0, DType: "bf16",
		Given: given("heads", "layers", "shared-lm-head", "head-decay", "lr", "weight-decay", "warmup", "epochs", "max-steps", "patience",
			"batch-tokens", "val-fraction", "eval-every", "checkpoint-every", "seed", "dtype")}
	o, err := f.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := medusa.DefaultConfig()
	want.Heads, want.Layers, want.SharedLMHead, want.Decay, want.LR, want.WeightDecay, want.WarmupSteps = 3, 2, true, 1, 3e-3, 0.1, 17
	want.MaxEpochs, want.MaxSteps, want.Patience, want.BatchTokens, want.HeldOut, want.EvalEvery, want.CheckpointEvery, want.Seed = 9, 50, 0, 512, 0.1, 25, 10, 0
	if !reflect.DeepEqual(o.Medusa, want) || o.DType != "BF16" {
		t.Errorf("medusa config = %+v dtype %s, want %+v BF16", o.Medusa, o.DType, want)
	}

	f = Flags{Method: MethodEAGLE3, Layers: "1, 3,4", TTTSteps: 3, TTTDecay: 0.5, DraftVocab: 100, Intermediate: 96, TargetTemp: 0.7, MaxLength: 64, Format: "speculators",
		LR: 1e-3, Warmup: "0", ClipNorm: 0, Patience: 0, Epochs: 5, MaxSteps: 40, EvalEvery: 7, ValFraction: 0.2, Seed: 4,
		Given: given("layers", "ttt-steps", "ttt-decay", "draft-vocab", "intermediate", "target-temperature", "max-length", "format", "lr", "warmup", "clip-norm", "patience", "epochs",
			"max-steps", "eval-every", "val-fraction", "seed")}
	o, err = f.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	we := eagle3.DefaultConfig()
	we.Steps, we.StepDecay, we.DraftVocab, we.MaxLength, we.LR, we.WarmupFrac, we.ClipNorm, we.Patience = 3, 0.5, 100, 64, 1e-3, 0, 0, 0
	we.Epochs, we.MaxSteps, we.EvalEvery, we.EvalFraction, we.Seed, we.Intermediate, we.TargetTemperature = 5, 40, 7, 0.2, 4, 96, 0.7
	if !reflect.DeepEqual(o.EAGLE3, we) || !reflect.DeepEqual(o.Layers, []int{1, 3, 4}) || o.Format != "speculators" {
		t.Errorf("eagle3 options = %+v layers %v format %q, want %+v [1 3 4] speculators", o.EAGLE3, o.Layers, o.Format, we)
	}
}

func TestFlagsRefused(t *testing.T) {
	cases := []struct {
		f    Flags
		want string
	}{
		{Flags{Method: "hydra"}, "--method"},
		{Flags{Method: MethodMedusa, Given: map[string]string{"ttt-steps": "3"}}, "--ttt-steps is an EAGLE-3 setting"},
		{Flags{Method: MethodMedusa, Given: map[string]string{"format": "native"}}, "--format is an EAGLE-3 setting"},
		{Flags{Method: MethodEAGLE3, Given: map[string]string{"heads": "3"}}, "--heads is a Medusa setting"},
		{Flags{Method: MethodEAGLE3, Given: map[string]string{"dtype": "bf16"}}, "--dtype is a Medusa setting"},
		{Flags{Method: MethodEAGLE3, MaxLength: 2, Given: map[string]string{"max-length": ""}}, "--max-length must be >= 3"},
		{Flags{Method: MethodEAGLE3, Intermediate: 0, Given: map[string]string{"intermediate": ""}}, "--intermediate must be >= 1"},
		{Flags{Method: MethodMedusa, Given: map[string]string{"intermediate": "64"}}, "--intermediate is an EAGLE-3 setting"},
		{Flags{Method: MethodEAGLE3, TargetTemp: 0, Given: map[string]string{"target-temperature": ""}}, "--target-temperature must lie in (0, 100]"},
		{Flags{Method: MethodEAGLE3, TargetTemp: -1, Given: map[string]string{"target-temperature": ""}}, "--target-temperature must lie in (0, 100]"},
		{Flags{Method: MethodMedusa, Given: map[string]string{"target-temperature": "1"}}, "--target-temperature is an EAGLE-3 setting"},
		{Flags{Method: MethodMedusa, Layers: "1,2,3", Given: map[string]string{"layers": ""}}, "residual blocks per head"},
		{Flags{Method: MethodEAGLE3, Layers: "2,3", Given: map[string]string{"layers": ""}}, "got 2"},
		{Flags{Method: MethodEAGLE3, Layers: "a,b,c", Given: map[string]string{"layers": ""}}, "hidden_states indices"},
		{Flags{Method: MethodMedusa, Warmup: "0.02", Given: map[string]string{"warmup": ""}}, "optimiser steps"},
		{Flags{Method: MethodEAGLE3, Warmup: "100", Given: map[string]string{"warmup": ""}}, "fraction"},
		{Flags{Method: MethodEAGLE3, Warmup: "-0.1", Given: map[string]string{"warmup": ""}}, "fraction"},
		{Flags{Method: MethodEAGLE3, ValFraction: 0, Given: map[string]string{"val-fraction": ""}}, "(0,1)"},
		{Flags{Method: MethodEAGLE3, Format: "gguf", Given: map[string]string{"format": ""}}, "--format"},
		{Flags{Method: MethodMedusa, DType: "int8", Given: map[string]string{"dtype": ""}}, "--dtype"},
		{Flags{Method: MethodMedusa, Epochs: -1, Given: map[string]string{"epochs": ""}}, "0 to choose them from the data"},
		{Flags{Method: MethodMedusa, BatchTokens: -8, Given: map[string]string{"batch-tokens": ""}}, "0 to choose them from the data"},
	}
	for _, c := range cases {
		_, err := c.f.Options(nil)
		var fe *FlagError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want a FlagError mentioning %q", c.f, err, c.want)
		}
	}
}

// TestRegisterQuotesTrainerDefaults parses a command line through Register and
// checks that the help texts quote the trainers' own defaults.
func TestRegisterQuotesTrainerDefaults(t *testing.T) {
	var f Flags
	fs := pflag.NewFlagSet("train", pflag.ContinueOnError)
	f.Register(fs)
	if err := fs.Parse([]string{"--method", "eagle3", "--model", "m", "--data", "a,b", "--out", "o", "--eval-every", "5", "--warmup", "0"}); err != nil {
		t.Fatal(err)
	}
	f.Given = map[string]string{}
	fs.Visit(func(fl *pflag.Flag) { f.Given[fl.Name] = fl.Value.String() })
	o, err := f.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := eagle3.DefaultConfig()
	want.EvalEvery, want.WarmupFrac = 5, 0
	if !reflect.DeepEqual(o.EAGLE3, want) || !reflect.DeepEqual(o.Data, []string{"a", "b"}) {
		t.Errorf("parsed options %+v, want %+v", o.EAGLE3, want)
	}
	m, e := medusa.DefaultConfig(), eagle3.DefaultConfig()
	for name, text := range map[string]string{
		"lr":         fmt.Sprintf("medusa %v, eagle3 %v", m.LR, e.LR),
		"epochs":     fmt.Sprintf("medusa %s, eagle3 %v", medusaAuto(m.MaxEpochs, "enough epochs to see 1.5M positions, 2 to 40"), e.Epochs),
		"patience":   fmt.Sprintf("medusa %v, eagle3 %v", m.Patience, e.Patience),
		"clip-norm":  fmt.Sprintf("medusa %v, eagle3 %v", m.ClipNorm, e.ClipNorm),
		"warmup":     fmt.Sprintf("(default %g)", e.WarmupFrac),
		"max-length": fmt.Sprintf("(default %d)", e.MaxLength),
	} {
		if u := fs.Lookup(name).Usage; !strings.Contains(u, text) {
			t.Errorf("--%s help %q does not quote %q", name, u, text)
		}
	}
	if d := fs.Lookup("ttt-steps").DefValue; d != fmt.Sprint(e.Steps) {
		t.Errorf("--ttt-steps default %s, want %d", d, e.Steps)
	}
}
