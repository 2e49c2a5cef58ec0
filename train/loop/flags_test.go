package loop

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// parse declares with declare on a fresh pflag set, parses args and returns
// the set's Changed.
func parse(t *testing.T, declare func(FlagSet), args ...string) func(string) bool {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	declare(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs.Changed
}

// testGiven registers Given over defaults shaped like Medusa's (batch 0 =
// from the data, held-out fraction in [0,1)).
func testGiven(fs FlagSet, to Given) func(func(string) bool) error {
	return RegisterGiven(fs, to, GivenRules{
		Metric: "loss", EpochsDefault: "from the data",
		Batch: "tokens per step", BatchWant: "0 or more tokens", BatchOK: func(n int) bool { return n >= 0 },
		ValFraction: "held out", ValWant: "a fraction in [0,1)", ValOK: func(v float64) bool { return v >= 0 && v < 1 },
	})
}

// TestFlagsGiven: a flag left out keeps the trainer default (even an
// out-of-range one such as "from the data"), a flag given sets its setting,
// a given value out of range is a *FlagError naming the flag, and the help
// quotes the defaults.
func TestFlagsGiven(t *testing.T) {
	type cfg struct {
		lr, minLR, wd, clip, val                   float64
		epochs, steps, pat, eval, batch, ckpt, log int
		seed                                       uint64
	}
	fresh := func() (*cfg, Given) {
		c := &cfg{lr: 0.01, minLR: 0.1, clip: 1, val: 0.05, pat: 10, log: 10, seed: 1, epochs: 0, batch: 0}
		return c, Given{LR: &c.lr, MinLRRatio: &c.minLR, WeightDecay: &c.wd, ClipNorm: &c.clip, ValFraction: &c.val,
			Epochs: &c.epochs, MaxSteps: &c.steps, Patience: &c.pat, EvalEvery: &c.eval, BatchTokens: &c.batch,
			CheckpointEvery: &c.ckpt, LogEvery: &c.log, Seed: &c.seed}
	}
	c, to := fresh()
	var apply func(func(string) bool) error
	changed := parse(t, func(fs FlagSet) { apply = testGiven(fs, to) })
	if err := apply(changed); err != nil {
		t.Fatal(err)
	}
	if want, _ := fresh(); *c != *want {
		t.Errorf("no flags given: %+v, want the defaults %+v", *c, *want)
	}

	c, to = fresh()
	changed = parse(t, func(fs FlagSet) { apply = testGiven(fs, to) },
		"--lr", "3e-3", "--val-fraction", "0", "--epochs", "9", "--batch-tokens", "512", "--seed", "0", "--patience", "0")
	if err := apply(changed); err != nil {
		t.Fatal(err)
	}
	if c.lr != 3e-3 || c.val != 0 || c.epochs != 9 || c.batch != 512 || c.seed != 0 || c.pat != 0 || c.clip != 1 || c.log != 10 {
		t.Errorf("given flags: %+v", *c)
	}

	for _, tc := range []struct {
		args []string
		flag string
		want string
	}{
		{[]string{"--lr", "0"}, "lr", "--lr 0: want a learning rate above 0"},
		{[]string{"--min-lr-ratio", "2"}, "min-lr-ratio", "--min-lr-ratio 2: want a fraction of --lr in [0,1]"},
		{[]string{"--epochs", "-1"}, "epochs", "--epochs -1: want an epoch cap of 1 or more, or 0 to choose it from the data"},
		{[]string{"--batch-tokens", "-8"}, "batch-tokens", "--batch-tokens -8: want 0 or more tokens"},
		{[]string{"--val-fraction", "1"}, "val-fraction", "--val-fraction 1: want a fraction in [0,1)"},
		{[]string{"--log-every", "-1"}, "log-every", "--log-every -1: want 0 (no training lines)"},
	} {
		_, to := fresh()
		changed := parse(t, func(fs FlagSet) { apply = testGiven(fs, to) }, tc.args...)
		err := apply(changed)
		var fe *FlagError
		if !errors.As(err, &fe) || fe.Flag != tc.flag || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a *FlagError for --%s: %s", tc.args, err, tc.flag, tc.want)
		}
	}

	fs := pflag.NewFlagSet("help", pflag.ContinueOnError)
	_, to = fresh()
	testGiven(fs, to)
	for flag, text := range map[string]string{"lr": "(default 0.01)", "epochs": "(default from the data)", "seed": "(default 1)"} {
		if u := fs.Lookup(flag).Usage; !strings.Contains(u, text) {
			t.Errorf("--%s help %q does not quote %q", flag, u, text)
		}
	}
}

// TestFlagsLoss: the loss is recorded canonically, η only with
// lk_hybrid, the trainer default kept without either flag, and a bad loss
// is an error naming the flag.
func TestFlagsLoss(t *testing.T) {
	for _, tc := range []struct {
		args []string
		loss string
		eta  float64
		err  string
	}{
		{nil, "", 0, ""},
		{[]string{"--loss", "lk_hybrid"}, "lk_hybrid", 3, ""},
		{[]string{"--loss", `{"tv": 1}`}, "tv", 0, ""},
		{[]string{"--loss", "mse"}, "", 0, `--loss "mse"`},
		{[]string{"--lk-eta", "2"}, "", 0, "--lk-eta 2: only lk_hybrid weighs λ by η"},
	} {
		var loss string
		var eta float64
		var apply func(func(string) bool) error
		changed := parse(t, func(fs FlagSet) { apply = RegisterLoss(fs, "against the tokens", &loss, &eta) }, tc.args...)
		err := apply(changed)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || loss != tc.loss || eta != tc.eta {
			t.Errorf("%v: loss %q η %g (%v), want %q %g", tc.args, loss, eta, err, tc.loss, tc.eta)
		}
	}
}

// TestFlagsParseLayers: a list that does not read is a *FlagError with Syntax,
// which drafter train --method reports in the method's words.
func TestFlagsParseLayers(t *testing.T) {
	got, err := ParseLayers("layers", "1, 3,5")
	if err != nil || len(got) != 3 || got[0] != 1 || got[1] != 3 || got[2] != 5 {
		t.Errorf("ParseLayers(1, 3,5) = %v, %v", got, err)
	}
	_, err = ParseLayers("layers", "a,b")
	var fe *FlagError
	if !errors.As(err, &fe) || !fe.Syntax || fe.Flag != "layers" {
		t.Errorf("ParseLayers(a,b): %v, want a *FlagError with Syntax", err)
	}
	if err := CheckGiven(func(string) bool { return false }, Rule{Flag: "x", Bad: true}); err != nil {
		t.Errorf("CheckGiven refused a flag left out: %v", err)
	}
}
