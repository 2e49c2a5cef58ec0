package dflash_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/capture/distill"
	"github.com/drafter-ai/drafter/eval"
	"github.com/drafter-ai/drafter/internal/testutil"
	ddflash "github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/train"
	"github.com/drafter-ai/drafter/train/dflash"
)

// readPrompts returns the first n prompts of a repository prompt file.
func readPrompts(t *testing.T, name string, n int) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "data", "prompts", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n")[:n] {
		var r struct{ Prompt string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Prompt)
	}
	return out
}

func writePrompts(t *testing.T, dir string, prompts []string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range prompts {
		j, _ := json.Marshal(map[string]string{"prompt": p})
		b.Write(j)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTrainAndEvalStories260k distils greedy continuations of the bundled
// model at the DFlash default layers, trains a DFlash drafter on them with
// train.Run, loads the export back through the method (both layouts) and
// decodes the held-out eval prompts speculatively at temperature 0: every
// prompt must give the tokens plain decoding gives, and the drafter must
// accept more than one token per verification on average.
func TestTrainAndEvalStories260k(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a drafter (about a minute)")
	}
	dir := testutil.Stories260k()
	tg, err := target.Load(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	o := dflash.DefaultOptions()
	// Two layers and 64 anchors keep the run short.
	o.Epochs, o.Seed, o.LogEvery, o.DraftLayers, o.Anchors = 4, 1, 0, 2, 64
	cols, err := o.Columns(tg.Config)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	capDir := filepath.Join(tmp, "cap")
	n := 96
	if _, err := distill.Run(context.Background(), tg, distill.Options{Prompts: writePrompts(t, tmp, readPrompts(t, "stories-train.jsonl", 200)),
		Out: capDir, SamplesPerPrompt: 1, Seed: 3, Batch: 16, Layers: cols.FeatureLayers,
		Sampling: generate.Overrides{MaxNewTokens: &n, Temperature: new(float64)}, DType: capture.Float32}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "out")
	res, err := train.Run(context.Background(), train.Options{Method: o, Model: dir, Data: []string{capDir}, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Trainer.(*dflash.Result)
	if r.Best != nil {
		t.Logf("held-out: loss %.4f, simulated acceptance %.3f, slot accuracy %v", r.Best.Loss, r.Best.AcceptLen, r.Best.Accuracy)
	}
	prompts, err := eval.LoadPrompts(tg, filepath.Join("..", "..", "data", "prompts", "stories-eval.jsonl"), 20)
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(tmp, "speculators")
	if err := ddflash.Export(spec, r.Draft, ddflash.ExportOptions{Format: ddflash.FormatSpeculators}); err != nil {
		t.Fatal(err)
	}
	// Found as drafter eval finds them: the train output folder (its
	// drafter.json checked against the export) and a bare speculators
	// export, through every method's Detect.
	for _, c := range []struct{ dir, layout string }{{out, ddflash.FormatNative}, {spec, ddflash.FormatSpeculators}} {
		info, err := eval.Detect(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		if info.Kind != ddflash.Kind || info.Layout != c.layout {
			t.Fatalf("eval.Detect(%s) found %s in the %s layout", c.dir, info.Kind, info.Layout)
		}
		d, err := eval.LoadDrafter(info, tg.Model)
		if err != nil {
			t.Fatal(err)
		}
		layout := info.Layout
		rep, err := eval.Run(context.Background(), tg.Model, d, prompts,
			eval.Config{Mode: eval.ModeChain, MaxNewTokens: 64, EOS: tg.Stop})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Lossless.Checked || len(rep.Lossless.Mismatches) > 0 {
			t.Errorf("%s: speculative decoding differs from plain decoding: %+v", layout, rep.Lossless)
		}
		t.Logf("%s: T=0 chain of %d: mean acceptance length %.3f over %d prompts", layout, o.BlockSize-1, rep.MeanAcceptLength, len(prompts))
		if rep.MeanAcceptLength < 1.5 {
			t.Errorf("%s: mean acceptance length %.3f: the trained drafter barely drafts", layout, rep.MeanAcceptLength)
		}
		if layout != ddflash.FormatNative {
			continue
		}
		// Sampled: drafts drawn from each slot's distribution, verified by
		// speculative sampling with those rows (no token-for-token check
		// applies; the run must complete and accept drafts).
		rep, err = eval.Run(context.Background(), tg.Model, d, prompts,
			eval.Config{Mode: eval.ModeChain, MaxNewTokens: 64, EOS: tg.Stop, Sampling: sample.Params{Temperature: 1}, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: T=1 chain of %d: mean acceptance length %.3f (%s)", layout, o.BlockSize-1, rep.MeanAcceptLength, rep.Acceptance)
		if rep.MeanAcceptLength <= 1 {
			t.Errorf("%s at T=1: mean acceptance length %.3f", layout, rep.MeanAcceptLength)
		}
	}
}
