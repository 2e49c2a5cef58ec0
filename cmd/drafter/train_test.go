package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/internal/testutil"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/train"
	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/medusa"
)

// trainOpts parses a drafter train command line without running it and
// returns the options it would train with.
func trainOpts(t *testing.T, args ...string) *trainOptions {
	t.Helper()
	var got *trainOptions
	r := runCLI(t, func(o any) error { got = o.(*trainOptions); return nil }, args...)
	if r.code != exitOK || got == nil {
		t.Fatalf("drafter %s: exit %d: %s", strings.Join(args, " "), r.code, r.msg)
	}
	return got
}

func TestTrainDefaults(t *testing.T) {
	// Flags left out keep the trainer defaults, in every spelling.
	for _, args := range [][]string{byMedusa, medusaArgs} {
		o := trainOpts(t, args...).Run
		if m := methodOf[medusa.Options](t, o); !reflect.DeepEqual(m.Config, medusa.DefaultConfig()) || o.Method.Kind() != dmedusa.Kind {
			t.Errorf("%v: medusa config %+v, want DefaultConfig %+v", args, m.Config, medusa.DefaultConfig())
		}
		if o.Progress == nil {
			t.Errorf("%v: progress writer dropped without --quiet", args)
		}
	}
	for _, args := range [][]string{byEAGLE3, eagle3Args} {
		o := trainOpts(t, with(args, "--quiet")...).Run
		if e := methodOf[eagle3.Options](t, o); !reflect.DeepEqual(e.Config, eagle3.DefaultConfig()) || e.Layers != nil || e.Config.Export.Format != "" || o.Progress != nil || o.Method.Kind() != deagle3.Kind {
			t.Errorf("%v: eagle3 options %+v, want DefaultConfig %+v and no progress", args, o, eagle3.DefaultConfig())
		}
	}
	// --batch-tokens does not bound --max-length: a longer sample trains as
	// a batch of its own.
	e := eagle3.DefaultConfig()
	o := methodOf[eagle3.Options](t, trainOpts(t, with(byEAGLE3, "--batch-tokens", "64", "--max-length", "4096")...).Run).Config
	if o.MaxLength != 4096 || o.BatchTokens != 64 {
		t.Errorf("--batch-tokens 64 --max-length 4096: max length %d, batch %d; want 4096, 64", o.MaxLength, o.BatchTokens)
	}
	o = methodOf[eagle3.Options](t, trainOpts(t, with(eagle3Args, "--batch-tokens", "64")...).Run).Config
	if o.MaxLength != e.MaxLength || o.BatchTokens != 64 {
		t.Errorf("--batch-tokens 64: max length %d, batch %d; want %d, 64", o.MaxLength, o.BatchTokens, e.MaxLength)
	}
}

// TestTrainMapping: every flag lands in its trainer setting, and the two
// spellings of the same settings give the same options.
func TestTrainMapping(t *testing.T) {
	common := []string{"--lr", "3e-3", "--weight-decay", "0.1", "--epochs", "9", "--max-steps", "50", "--patience", "0", "--batch-tokens", "512",
		"--val-fraction", "0.1", "--eval-every", "25", "--checkpoint-every", "10", "--seed", "0"}
	medusaFlags := append([]string{"--heads", "3", "--shared-lm-head", "--head-decay", "1", "--dtype", "bf16"}, common...)
	byMethod := trainOpts(t, append(with(byMedusa, "--layers", "2", "--warmup", "17"), medusaFlags...)...).Run
	sub := trainOpts(t, append(with(medusaArgs, "--blocks", "2", "--warmup-steps", "17"), medusaFlags...)...).Run
	want := medusa.DefaultConfig()
	want.Heads, want.Layers, want.SharedLMHead, want.Decay, want.LR, want.WeightDecay, want.WarmupSteps = 3, 2, true, 1, 3e-3, 0.1, 17
	want.MaxEpochs, want.MaxSteps, want.Patience, want.BatchTokens, want.HeldOut, want.EvalEvery, want.CheckpointEvery, want.Seed = 9, 50, 0, 512, 0.1, 25, 10, 0
	want.DType = safetensors.BF16
	if m := methodOf[medusa.Options](t, byMethod); !reflect.DeepEqual(m.Config, want) {
		t.Errorf("medusa config = %+v, want %+v", m.Config, want)
	}
	sameSettings(t, byMethod, sub)

	eagle3Flags := []string{"--layers", "1, 3,4", "--ttt-steps", "3", "--ttt-decay", "0.5", "--draft-vocab", "100", "--intermediate", "96",
		"--target-temperature", "0.7", "--max-length", "64", "--format", "speculators", "--lr", "1e-3", "--warmup", "0", "--clip-norm", "0",
		"--patience", "0", "--epochs", "5", "--max-steps", "40", "--eval-every", "7", "--val-fraction", "0.2", "--seed", "4"}
	byMethod = trainOpts(t, append(byEAGLE3, eagle3Flags...)...).Run
	sub = trainOpts(t, append(eagle3Args, eagle3Flags...)...).Run
	we := eagle3.DefaultConfig()
	we.Steps, we.StepDecay, we.DraftVocab, we.MaxLength, we.LR, we.WarmupFrac, we.ClipNorm, we.Patience = 3, 0.5, 100, 64, 1e-3, 0, 0, 0
	we.Epochs, we.MaxSteps, we.EvalEvery, we.EvalFraction, we.Seed, we.Intermediate, we.TargetTemperature = 5, 40, 7, 0.2, 4, 96, 0.7
	we.Export.Format = "speculators"
	if e := methodOf[eagle3.Options](t, byMethod); !reflect.DeepEqual(e.Config, we) || !reflect.DeepEqual(e.Layers, []int{1, 3, 4}) {
		t.Errorf("eagle3 options = %+v layers %v, want %+v [1 3 4]", e.Config, e.Layers, we)
	}
	sameSettings(t, byMethod, sub)
}

// methodOf returns the options of method M that o trains with.
func methodOf[M any](t *testing.T, o train.Options) M {
	t.Helper()
	m, ok := o.Method.(M)
	if !ok {
		t.Fatalf("method %T, want %T", o.Method, m)
	}
	return m
}

// sameSettings fails unless a and b train the same drafter: they may differ
// only in the arguments recorded as typed.
func sameSettings(t *testing.T, a, b train.Options) {
	t.Helper()
	a.Args, b.Args = nil, nil
	a.Progress, b.Progress = nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the two spellings differ:\n%+v\n%+v", a, b)
	}
}

// TestTrainHelpQuotesTrainerDefaults: the help texts quote the trainers' own
// defaults, for both methods under --method and for each subcommand.
func TestTrainHelpQuotesTrainerDefaults(t *testing.T) {
	m, e := medusa.DefaultConfig(), eagle3.DefaultConfig()
	lookup := func(path ...string) *cobra.Command {
		c, _, err := newRootCmd(nil).Find(path)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, c := range []struct {
		cmd  *cobra.Command
		flag string
		text string
	}{
		{lookup("train"), "lr", fmt.Sprintf("medusa %v, eagle3 %v", m.LR, e.LR)},
		{lookup("train"), "epochs", fmt.Sprintf("medusa from the data: enough epochs to see %gM positions, 2 to 40, eagle3 from the data: enough epochs to see %gM tokens, 2 to 40", float64(medusa.AutoPositions)/1e6, float64(eagle3.AutoTokens)/1e6)},
		{lookup("train"), "patience", fmt.Sprintf("medusa %v, eagle3 %v", m.Patience, e.Patience)},
		{lookup("train"), "clip-norm", fmt.Sprintf("medusa %v, eagle3 %v", m.ClipNorm, e.ClipNorm)},
		{lookup("train"), "warmup", fmt.Sprintf("(default %g)", e.WarmupFrac)},
		{lookup("train"), "max-length", fmt.Sprintf("(default %d)", e.MaxLength)},
		{lookup("train", "medusa"), "lr", fmt.Sprintf("(default %v)", m.LR)},
		{lookup("train", "medusa"), "warmup-steps", "2% of the scheduled steps"},
		{lookup("train", "eagle3"), "lr", fmt.Sprintf("(default %v)", e.LR)},
		{lookup("train", "eagle3"), "patience", fmt.Sprintf("(default %v)", e.Patience)},
	} {
		if u := c.cmd.Flags().Lookup(c.flag).Usage; !strings.Contains(u, c.text) {
			t.Errorf("%s --%s help %q does not quote %q", c.cmd.CommandPath(), c.flag, u, c.text)
		}
	}
	for path, def := range map[string]string{"train ttt-steps": fmt.Sprint(e.Steps), "train eagle3 ttt-steps": fmt.Sprint(e.Steps),
		"train medusa blocks": fmt.Sprint(m.Layers), "train medusa heads": fmt.Sprint(m.Heads), "train eagle3 warmup": fmt.Sprint(e.WarmupFrac)} {
		f := strings.Fields(path)
		if d := lookup(f[:len(f)-1]...).Flags().Lookup(f[len(f)-1]).DefValue; d != def {
			t.Errorf("%s default %s, want %s", path, d, def)
		}
	}
	var help bytes.Buffer
	c := lookup("train")
	c.SetOut(&help)
	c.Help()
	if !strings.Contains(help.String(), "the subcommands are preferred") {
		t.Errorf("drafter train --help does not point to the subcommands:\n%s", help.String())
	}
}

// distillCapture runs drafter distill on a few prompts into a new folder and
// returns it.
func distillCapture(t *testing.T, prompts int, extra ...string) string {
	t.Helper()
	tmp := t.TempDir()
	p := trainPrompts(t, tmp, prompts)
	out := filepath.Join(tmp, "capture")
	args := append([]string{"distill", "--model", testutil.Stories260k(), "--prompts", p, "--out", out, "--max-new-tokens", "24", "--quiet"}, extra...)
	if r := runCLI(t, nil, args...); r.code != exitOK {
		t.Fatalf("distill: exit %d: %s", r.code, r.msg)
	}
	return out
}

// TestTrainSpellingsShareArgsFile trains with both spellings of the same
// settings and compares the train_args.json a resume checks, byte for byte;
// then each spelling resumes the other's run.
func TestTrainSpellingsShareArgsFile(t *testing.T) {
	data := distillCapture(t, 8)
	tmp := t.TempDir()
	for _, c := range []struct {
		method            string
		byMethod, subArgs []string
	}{
		{"medusa", []string{"--layers", "1", "--warmup", "3", "--heads", "2"}, []string{"--blocks", "1", "--warmup-steps", "3", "--heads", "2"}},
		{"eagle3", []string{"--layers", "1,3,5", "--warmup", "0.1", "--draft-vocab", "64"}, []string{"--layers", "1,3,5", "--warmup", "0.1", "--draft-vocab", "64"}},
	} {
		outA, outB := filepath.Join(tmp, c.method+"-by-method"), filepath.Join(tmp, c.method+"-sub")
		base := []string{"--model", testutil.Stories260k(), "--data", data, "--max-steps", "2", "--quiet"}
		a := append(append([]string{"train", "--method", c.method, "--out", outA}, base...), c.byMethod...)
		b := append(append([]string{"train", c.method, "--out", outB}, base...), c.subArgs...)
		for _, args := range [][]string{a, b} {
			if r := runCLI(t, nil, args...); r.code != exitOK {
				t.Fatalf("drafter %s: exit %d: %s", strings.Join(args, " "), r.code, r.msg)
			}
		}
		ja, err := os.ReadFile(filepath.Join(outA, train.ArgsFile))
		if err != nil {
			t.Fatal(err)
		}
		jb, err := os.ReadFile(filepath.Join(outB, train.ArgsFile))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ja, jb) {
			t.Errorf("%s: train_args.json differs between the spellings:\n%s\n%s", c.method, ja, jb)
		}
		// Each spelling resumes the other's run: the settings are the same.
		a[4], b[3] = outB, outA
		for _, args := range [][]string{a, b} {
			if r := runCLI(t, nil, append(args, "--resume")...); r.code != exitOK {
				t.Errorf("drafter %s --resume: exit %d: %s", strings.Join(args, " "), r.code, r.msg)
			}
		}
		// A different setting is still refused on resume.
		if r := runCLI(t, nil, append(b, "--resume", "--lr", "0.5")...); r.code != exitError || !strings.Contains(r.msg, "different settings") {
			t.Errorf("%s: resume with another --lr: exit %d: %s", c.method, r.code, r.msg)
		}
	}
}

// TestTrainLayersBeyondDepth: --layers past the model's depth is found once
// the model is read, and is still a command-line mistake.
func TestTrainLayersBeyondDepth(t *testing.T) {
	data := distillCapture(t, 2)
	for _, args := range [][]string{
		{"train", "eagle3", "--layers", "1,3,9"},
		{"train", "--method", "eagle3", "--layers", "1,3,9"},
	} {
		args = append(args, "--model", testutil.Stories260k(), "--data", data, "--out", filepath.Join(t.TempDir(), "out"), "--quiet")
		r := runCLI(t, nil, args...)
		if r.code != exitUsage || !strings.Contains(r.msg, "index 9") || !strings.Contains(r.msg, "outside [1, 5]") {
			t.Errorf("drafter %s: exit %d: %s; want %d and the index outside [1, 5]", strings.Join(args, " "), r.code, r.msg, exitUsage)
		}
	}
}

// TestTrainIncompleteCapture: an interrupted capture is refused with the way
// to finish it: rerun the command that made it (distill has no --resume).
func TestTrainIncompleteCapture(t *testing.T) {
	data := distillCapture(t, 2)
	p := filepath.Join(data, "manifest.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"complete": true`)) {
		t.Fatal("manifest.json holds no \"complete\": true")
	}
	// As an interrupted distill leaves it: complete false, with its checksum.
	m, err := capture.ReadManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	m.Complete = false
	if err := capture.WriteManifest(data, m); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, nil, "train", "medusa", "--model", testutil.Stories260k(), "--data", data, "--out", filepath.Join(t.TempDir(), "out"), "--quiet")
	if r.code != exitError || !strings.Contains(r.msg, "incomplete") || !strings.Contains(r.msg, "rerun the same drafter distill command") || strings.Contains(r.msg, "--resume") {
		t.Errorf("train on an incomplete capture: exit %d: %s", r.code, r.msg)
	}
}

// TestTrainResumeWithoutCheckpoint: --resume into a folder without a
// checkpoint exits 1 naming the missing file, and trains nothing (it used to
// start from step 0 and overwrite the exports). The flag is valid; the
// folder's state is what is wrong, as with a folder that already holds a run.
func TestTrainResumeWithoutCheckpoint(t *testing.T) {
	data := distillCapture(t, 2)
	out := filepath.Join(t.TempDir(), "out")
	r := runCLI(t, nil, "train", "medusa", "--model", testutil.Stories260k(), "--data", data, "--out", out, "--max-steps", "2", "--quiet", "--resume")
	ckpt := filepath.Join(out, train.CheckpointFile)
	if r.code != exitError || !strings.Contains(r.msg, ckpt+" does not exist") {
		t.Fatalf("train --resume without a checkpoint: exit %d: %s", r.code, r.msg)
	}
	if _, err := os.Stat(filepath.Join(out, train.ProvenanceFile)); err == nil {
		t.Error("the refused resume exported a drafter")
	}
}

// TestTrainEAGLE31Flags: --variant, --fc-norm, --norm-before-fc and
// --norm-output reach the EAGLE-3 trainer's configuration in both
// spellings, default to EAGLE-3.1 (fc_norm and norm_output), exclude one
// another where the recipes do, and are refused for Medusa.
func TestTrainEAGLE31Flags(t *testing.T) {
	for _, c := range []struct {
		flags []string
		want  [3]bool
	}{
		{nil, [3]bool{true, false, true}},
		{[]string{"--variant", "eagle3.1"}, [3]bool{true, false, true}},
		{[]string{"--variant", "eagle3"}, [3]bool{}},
		{[]string{"--fc-norm", "--norm-output"}, [3]bool{true, false, true}},
		{[]string{"--norm-before-fc"}, [3]bool{false, true, true}},
		{[]string{"--variant", "eagle3", "--norm-before-fc"}, [3]bool{false, true, false}},
		{[]string{"--norm-output=true", "--fc-norm=false"}, [3]bool{false, false, true}},
		{[]string{"--variant", "eagle3", "--norm-output"}, [3]bool{false, false, true}},
	} {
		a := trainOpts(t, append(append([]string{}, eagle3Args...), c.flags...)...).Run
		b := trainOpts(t, append(append([]string{}, byEAGLE3...), c.flags...)...).Run
		cfg := methodOf[eagle3.Options](t, a).Config
		if got := [3]bool{cfg.FCNorm, cfg.NormBeforeFC, cfg.NormOutput}; got != c.want {
			t.Errorf("%v: fc_norm, norm_before_fc, norm_output = %v, want %v", c.flags, got, c.want)
		}
		sameSettings(t, a, b)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{with(eagle3Args, "--fc-norm", "--norm-before-fc"), "--fc-norm and --norm-before-fc exclude each other"},
		{with(byEAGLE3, "--fc-norm", "--norm-before-fc"), "--fc-norm and --norm-before-fc exclude each other"},
		{with(eagle3Args, "--variant", "eagle3.2"), `--variant "eagle3.2": want eagle3.1 or eagle3`},
		{with(byMedusa, "--variant", "eagle3"), "--variant is an EAGLE-3 setting"},
		{with(byMedusa, "--norm-output"), "--norm-output is an EAGLE-3 setting"},
		{with(medusaArgs, "--fc-norm"), "unknown flag: --fc-norm"},
	} {
		r := runCLI(t, func(any) error { return nil }, c.args...)
		if r.code != exitUsage || !strings.Contains(r.msg, c.want) {
			t.Errorf("drafter %s: exit %d (%s); want %d and a message with %q", strings.Join(c.args, " "), r.code, r.msg, exitUsage, c.want)
		}
	}
}
