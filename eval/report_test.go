package eval

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/spec"
	"github.com/drafter-ai/drafter/pkg/target"
)

func TestGateCheck(t *testing.T) {
	rep := &Report{MeanAcceptLength: 2.4}
	old := &Report{MeanAcceptLength: 2.6}
	cases := []struct {
		g    Gate
		fail string
	}{
		{Gate{}, ""},
		{Gate{MinAcceptance: 2.4}, ""},
		{Gate{MinAcceptance: 2.5}, "below --min-acceptance 2.500"},
		{Gate{Baseline: old, MaxDrop: 0.25}, ""},
		{Gate{Baseline: old, MaxDrop: 0.1}, "dropped below the baseline report's 2.600"},
		{Gate{Baseline: old, MaxDrop: 0.1, Relative: true}, ""},
		{Gate{Baseline: old, MaxDrop: 0.05, Relative: true}, "--max-drop 5%"},
		{Gate{MinAcceptance: 3, Baseline: old, MaxDrop: 0}, "; "},
	}
	for i, c := range cases {
		err := c.g.Check(rep)
		var ge *GateError
		switch {
		case c.fail == "" && err != nil:
			t.Errorf("case %d: %v", i, err)
		case c.fail != "" && (!errors.As(err, &ge) || !strings.Contains(err.Error(), c.fail)):
			t.Errorf("case %d: got %v, want a GateError saying %q", i, err, c.fail)
		}
	}
}

// TestConfigErrors: settings that do not fit the drafter are ConfigErrors.
func TestConfigErrors(t *testing.T) {
	m := loadTarget(t)
	ps := testPrompts(t, evalPrompts, 1)
	med, eag := randomMedusa(t, m, 2, 1), randomEagle(t, m, 50, 1)
	cases := []struct {
		d   *Drafter
		cfg Config
	}{
		{med, Config{Mode: "beam"}},
		{med, Config{Mode: ModeChain, Depth: 3}},
		{med, Config{Mode: ModeTree, Depth: 2}},
		{med, Config{Mode: ModeTree, Tree: [][]int{{0}, {0, 0}, {0, 0, 0}}}},
		{med, Config{Mode: ModeTree, TopK: 4}},
		{eag, Config{Mode: ModeTree, Tree: [][]int{{0}}}},
		{eag, Config{Mode: ModeChain, TotalTokens: 10}},
		{med, Config{Typical: &spec.TypicalParams{Epsilon: 0.09, Alpha: 0.3}}},
	}
	for i, c := range cases {
		_, err := Run(context.Background(), m, c.d, ps, c.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("case %d (%+v): got %v, want a ConfigError", i, c.cfg, err)
		}
	}
}

// TestEvaluate runs the command's library path end to end on an exported
// drafter: report file, plots, gate and stale refusal.
func TestEvaluate(t *testing.T) {
	m := loadTarget(t)
	gt := loadGen(t)
	dir := t.TempDir()
	if err := dmedusa.Export(dir, medusaHeads(randomMedusa(t, m, 3, 4)), dmedusa.ExportInfo{TargetFingerprint: gt.Fingerprint}); err != nil {
		t.Fatal(err)
	}
	n := 24
	opt := Options{ModelDir: testutil.Stories260k(), DrafterDir: dir, PromptsPath: evalPrompts, Limit: 3,
		Sampling: generate.Overrides{MaxNewTokens: &n}, Config: Config{Mode: ModeChain},
		ReportPath: filepath.Join(dir, "report.json"), PlotDir: filepath.Join(dir, "plots")}
	var out bytes.Buffer
	rep, err := Evaluate(context.Background(), opt, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", out.String())
	for _, want := range []string{"mean acceptance length", "Medusa head", "speed-up", "yes: 3/3 prompts identical"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report text lacks %q:\n%s", want, out.String())
		}
	}
	back, err := ReadReport(opt.ReportPath)
	if err != nil {
		t.Fatal(err)
	}
	if back.MeanAcceptLength != rep.MeanAcceptLength || back.ModelFingerprint != gt.Fingerprint || back.Prompts != 3 {
		t.Fatalf("report round trip: %+v", back)
	}
	for _, f := range []string{PlotAcceptLength, PlotAcceptDepth} {
		fh, err := os.Open(filepath.Join(opt.PlotDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(fh); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		fh.Close()
	}

	// Gate: the same run against its own report passes with no drop allowed
	// (decoding is deterministic), and fails a bar above its acceptance.
	opt.ReportPath, opt.PlotDir = "", ""
	opt.BaselinePath, opt.Gate = filepath.Join(dir, "report.json"), Gate{MaxDrop: 0}
	if _, err := Evaluate(context.Background(), opt, &out); err != nil {
		t.Fatalf("gate against its own report: %v", err)
	}
	opt.Gate.MinAcceptance = rep.MeanAcceptLength + 0.01
	var ge *GateError
	if _, err := Evaluate(context.Background(), opt, &out); !errors.As(err, &ge) {
		t.Fatalf("gate above the acceptance: %v", err)
	}

	// Stale: another fingerprint in drafter.json.
	writeProvenance(t, dir, "not-this-model")
	opt.Gate, opt.BaselinePath = Gate{}, ""
	var se *StaleError
	if _, err := Evaluate(context.Background(), opt, &out); !errors.As(err, &se) {
		t.Fatalf("stale drafter: %v", err)
	}
	opt.AllowMismatch = true
	var log bytes.Buffer
	opt.Log = &log
	if _, err := Evaluate(context.Background(), opt, &out); err != nil || !strings.Contains(log.String(), "stale") {
		t.Fatalf("--allow-mismatch: %v, log %q", err, log.String())
	}
}

// TestStaleAfterBodyFineTune: a drafter trained for the bundled model is
// refused for a copy whose decoder weights (all but the norms) were scaled by
// 0.9, the usual fine-tune that leaves the embedding alone, and the error
// names both fingerprints.
func TestStaleAfterBodyFineTune(t *testing.T) {
	gt := loadGen(t)
	dir := t.TempDir()
	if err := dmedusa.Export(dir, medusaHeads(randomMedusa(t, gt.Model, 2, 4)), dmedusa.ExportInfo{TargetFingerprint: gt.Fingerprint}); err != nil {
		t.Fatal(err)
	}
	tuned := testutil.CopyDir(t, testutil.Stories260k())
	testmodel.ScaleBody(t, tuned, 0.9)
	tg, err := target.Load(tuned, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tuneFP := tg.Fingerprint
	tg.Close()
	n := 8
	opt := Options{ModelDir: tuned, DrafterDir: dir, PromptsPath: evalPrompts, Limit: 1,
		Sampling: generate.Overrides{MaxNewTokens: &n}, Config: Config{Mode: ModeChain}}
	_, err = Evaluate(context.Background(), opt, new(bytes.Buffer))
	var se *StaleError
	if !errors.As(err, &se) {
		t.Fatalf("eval of the original's drafter on the body-tuned copy: %v, want a stale-drafter error", err)
	}
	for _, want := range []string{"stale", gt.Fingerprint, tuneFP, tuned, "--allow-mismatch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
