package eagle3

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/loop"
)

// TestExportLoadReproducesTrainer exports a (perturbed) draft, reloads it with
// the inference-only drafter and checks that, fed the same ground-truth tokens,
// every chain step drafts the trainer's own argmax at every position, in both
// layouts.
func TestExportLoadReproducesTrainer(t *testing.T) { exportLoadReproducesTrainer(t, deagle3.Norms{}) }

// TestExportLoadReproducesTrainer31 is TestExportLoadReproducesTrainer for
// every EAGLE-3.1 switch combination: the drafting session's norms before
// fc and its post-norm feedback through the tree compute what the
// trainer's unroll does.
func TestExportLoadReproducesTrainer31(t *testing.T) {
	for _, n := range norms31() {
		t.Run(normsName(n), func(t *testing.T) { exportLoadReproducesTrainer(t, n) })
	}
}

func exportLoadReproducesTrainer(t *testing.T, norms deagle3.Norms) {
	g := tinyGeometry()
	g.Norms = norms
	tt := newTinyTarget(21, g)
	samples := tt.samples(22, 3, 6, 10)
	const steps = 4
	n, voc := buildTiny(t, g, tt, samples, steps, 1, false)
	r := rand.New(rand.NewPCG(9, 9))
	for i := range n.p.All {
		n.p.All[i] += float32(0.5 * r.NormFloat64())
	}
	n.writeParams()
	n.forward(false)
	// What an export does: read the trainer's weights back through the
	// device (that it reaches them only that way is TestTrainOnADeviceOfItsOwn's).
	n.layer.ReadWeights(n.dev)
	for _, format := range []string{deagle3.FormatNative, deagle3.FormatSpeculators} {
		dir := filepath.Join(t.TempDir(), format)
		if err := deagle3.Export(dir, g, n.p, voc, deagle3.ExportOptions{Format: format, DefaultLayers: true}); err != nil {
			t.Fatal(err)
		}
		d, err := deagle3.LoadDraft(dir, tensor.F32Matrix(tt.embed, tt.g.Vocab, tt.g.Hidden), cpu.New(nil))
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		var ids [1]int32
		var lp [1]float32
		for si, sp := range n.attn.Seqs {
			s := samples[si]
			h := g.Hidden
			for i := 0; i+1 < sp.N; i++ {
				sess := d.NewSession(16, 8)
				feats := make([]float32, 0, (i+1)*3*h)
				for j := 0; j <= i; j++ {
					for c := 0; c < 3; c++ {
						feats = append(feats, s.Features[c][j*h:(j+1)*h]...)
					}
				}
				if err := sess.Extend(feats, s.Tokens[1:i+2]); err != nil {
					t.Fatal(err)
				}
				cur := -1
				for k := 0; k < steps && i+1+k < sp.N; k++ {
					if k > 0 {
						nodes, err := sess.AddNodes([]int{cur}, []int32{s.Tokens[i+1+k]})
						if err != nil {
							t.Fatal(err)
						}
						cur = nodes[0]
					}
					sess.TopK(cur, 1, ids[:], lp[:])
					want := voc.IDs[n.act[k].pred[sp.Start+i]]
					if ids[0] != want {
						t.Fatalf("%s: sequence %d position %d step %d: drafter says %d, trainer %d", format, si, i, k, ids[0], want)
					}
					checked++
				}
			}
		}
		t.Logf("%s: %d (position, step) argmaxes agree", format, checked)
	}
}

func trainConfig() Config {
	c := DefaultConfig()
	c.DraftVocab, c.Steps, c.BatchTokens, c.MaxLength, c.Epochs, c.Patience, c.Seed, c.LogEvery = 12, 3, 64, 24, 6, 0, 3, 1
	c.Export = deagle3.ExportOptions{DefaultLayers: true}
	return c
}

func TestTrainLearnsAndExports(t *testing.T) {
	g := tinyGeometry()
	g.DraftVocab = 0
	tt := newTinyTarget(31, g)
	ds := memory(g.Hidden, tt.samples(32, 60, 8, 20))
	cfg := trainConfig()
	var evals []EvalMetrics
	cfg.Progress = func(p Progress) {
		if p.Eval != nil {
			evals = append(evals, *p.Eval)
		}
	}
	out := t.TempDir()
	res, err := train(context.Background(), cfg, tt, ds, out)
	if err != nil {
		t.Fatal(err)
	}
	first, last := evals[0], evals[len(evals)-1]
	t.Logf("held-out loss %.4f -> %.4f, acc %v -> %v, accept length %.3f", first.Loss, last.Loss, first.Accuracy, last.Accuracy, last.AcceptLen)
	if !(last.Loss < 0.8*first.Loss) || !(last.Accuracy[0] > first.Accuracy[0]) {
		t.Fatalf("training did not learn: loss %.4f -> %.4f, step-0 accuracy %.3f -> %.3f", first.Loss, last.Loss, first.Accuracy[0], last.Accuracy[0])
	}
	if _, err := deagle3.LoadDraft(res.ExportDir, tensor.F32Matrix(tt.embed, tt.g.Vocab, tt.g.Hidden), cpu.New(nil)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{loop.MetricsFile, loop.CheckpointFile, ProvenanceFile, "eagle3/config.json", "eagle3/model.safetensors"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTrainWiderDraft trains a draft whose MLP is wider than the target's and
// checks that the width reaches the export's config and its weights, and that
// the draft loads back with it.
func TestTrainWiderDraft(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(33, g)
	ds := memory(g.Hidden, tt.samples(34, 12, 8, 12))
	cfg := trainConfig()
	cfg.Epochs, cfg.Intermediate = 1, 3*g.Intermediate
	res, err := train(context.Background(), cfg, tt, ds, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(res.ExportDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Intermediate int `json:"intermediate_size"`
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.Intermediate != 3*g.Intermediate {
		t.Fatalf("config.json intermediate_size = %d (%v), want %d", c.Intermediate, err, 3*g.Intermediate)
	}
	d, err := deagle3.LoadDraft(res.ExportDir, tensor.F32Matrix(tt.embed, tt.g.Vocab, tt.g.Hidden), cpu.New(nil))
	if err != nil {
		t.Fatal(err)
	}
	if d.Geometry.Intermediate != 3*g.Intermediate {
		t.Fatalf("loaded draft has intermediate %d, want %d", d.Geometry.Intermediate, 3*g.Intermediate)
	}
	cfg.Intermediate = -1
	if _, err := train(context.Background(), cfg, tt, ds, t.TempDir()); err == nil || !strings.Contains(err.Error(), "MLP width") {
		t.Fatalf("Intermediate -1: err = %v, want a refusal naming the MLP width", err)
	}
}

// TestResumeBitIdentical interrupts a run in the middle of an epoch, resumes it
// and compares the exported weights byte for byte with an uninterrupted run.
func TestResumeBitIdentical(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(41, g)
	ds := memory(g.Hidden, tt.samples(42, 30, 8, 20))
	full := t.TempDir()
	cfg := trainConfig()
	cfg.Epochs = 3
	if _, err := train(context.Background(), cfg, tt, ds, full); err != nil {
		t.Fatal(err)
	}
	part := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cfg2 := cfg
	cfg2.Progress = func(p Progress) {
		if p.Step == 7 && p.Eval == nil {
			cancel()
		}
	}
	if _, err := train(ctx, cfg2, tt, ds, part); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run returned %v", err)
	}
	cfg3 := cfg
	cfg3.Resume = true
	if _, err := train(context.Background(), cfg3, tt, ds, part); err != nil {
		t.Fatal(err)
	}
	sameRun(t, full, part)
}

// metricsWithoutTimings reads metrics.jsonl with the wall-clock fields removed.
func metricsWithoutTimings(t *testing.T, path string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte{'\n'}) {
		m := map[string]any{}
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s: %v in %q", path, err, line)
		}
		for _, k := range []string{"elapsed_s", "tokens_per_s", "gflops"} {
			delete(m, k)
		}
		out = append(out, m)
	}
	return out
}

// sameRun checks that two output folders hold byte-identical exports and the
// same metrics log (timings aside).
func sameRun(t *testing.T, a, b string) {
	t.Helper()
	wa, _ := os.ReadFile(filepath.Join(a, ExportDir, "model.safetensors"))
	wb, _ := os.ReadFile(filepath.Join(b, ExportDir, "model.safetensors"))
	if len(wa) == 0 || !bytes.Equal(wa, wb) {
		t.Fatal("resumed run's weights differ from the uninterrupted run's")
	}
	ma, mb := metricsWithoutTimings(t, filepath.Join(a, loop.MetricsFile)), metricsWithoutTimings(t, filepath.Join(b, loop.MetricsFile))
	if !reflect.DeepEqual(ma, mb) {
		t.Fatalf("metrics.jsonl differs:\nuninterrupted %v\nresumed       %v", ma, mb)
	}
}

// TestResumeBeforeFirstEvaluation cancels during the first epoch, before any
// held-out evaluation (no best loss yet), and also writes a checkpoint every
// update from the first one; the resumed run must end byte-identical to an
// uninterrupted one, metrics.jsonl included.
func TestResumeBeforeFirstEvaluation(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(43, g)
	ds := memory(g.Hidden, tt.samples(44, 30, 8, 20))
	cfg := trainConfig()
	cfg.Epochs = 2
	full := t.TempDir()
	if _, err := train(context.Background(), cfg, tt, ds, full); err != nil {
		t.Fatal(err)
	}
	part := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cfg2 := cfg
	cfg2.CheckpointEvery = 1
	evals := 0
	cfg2.Progress = func(p Progress) {
		if p.Eval != nil {
			evals++
		}
		if p.Step == 2 {
			cancel()
		}
	}
	if _, err := train(ctx, cfg2, tt, ds, part); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run returned %v", err)
	}
	if evals != 0 {
		t.Fatalf("%d evaluations ran before the cancellation; the test needs none", evals)
	}
	cfg3 := cfg
	cfg3.Resume = true
	if _, err := train(context.Background(), cfg3, tt, ds, part); err != nil {
		t.Fatal(err)
	}
	sameRun(t, full, part)
}

// TestMaxStepsEvalEveryAndNoWarmup cuts a run short with MaxSteps, then
// resumes it to the end; evaluations run every EvalEvery updates, and with
// warm-up off the first update already uses the peak learning rate.
func TestMaxStepsEvalEveryAndNoWarmup(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(45, g)
	ds := memory(g.Hidden, tt.samples(46, 30, 8, 20))
	cfg := trainConfig()
	cfg.Epochs, cfg.EvalEvery, cfg.WarmupFrac = 2, 4, 0
	var evalSteps []int
	var firstLR float64
	cfg.Progress = func(p Progress) {
		if p.Eval != nil {
			evalSteps = append(evalSteps, p.Step)
		} else if p.Step == 1 {
			firstLR = p.LR
		}
	}
	full := t.TempDir()
	res, err := train(context.Background(), cfg, tt, ds, full)
	if err != nil {
		t.Fatal(err)
	}
	if firstLR != cfg.LR {
		t.Fatalf("first update's learning rate %g, want the peak %g with warm-up off", firstLR, cfg.LR)
	}
	for i, s := range evalSteps[:len(evalSteps)-1] {
		if s != 4*(i+1) {
			t.Fatalf("evaluations at steps %v, want every 4 (and one at the end)", evalSteps)
		}
	}
	if last := evalSteps[len(evalSteps)-1]; last != res.Steps || res.Stopped != "max-epochs" {
		t.Fatalf("last evaluation at step %d of %d, stopped by %q", last, res.Steps, res.Stopped)
	}
	cfg.Progress = nil
	part := t.TempDir()
	cut := cfg
	cut.MaxSteps = 6
	r1, err := train(context.Background(), cut, tt, ds, part)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Steps != 6 || r1.Stopped != "max-steps" || r1.Best == nil || r1.Best.Step != 4 {
		t.Fatalf("cut run: %d steps, stopped by %q, best %+v", r1.Steps, r1.Stopped, r1.Best)
	}
	cfg.Resume = true
	if _, err := train(context.Background(), cfg, tt, ds, part); err != nil {
		t.Fatal(err)
	}
	sameRun(t, full, part)
	var prov map[string]any
	b, _ := os.ReadFile(filepath.Join(part, ProvenanceFile))
	if err := json.Unmarshal(b, &prov); err != nil {
		t.Fatal(err)
	}
	if m, ok := prov["metrics"].(map[string]any); !ok || m["accept_length"] == nil || prov["method"] != "eagle3" || prov["format"] != deagle3.FormatNative {
		t.Fatalf("drafter.json: %s", b)
	}
}

// TestBatchSmallerThanSamples: the batch size does not bound the sample
// length. pack gives a sample longer than the batch a batch of its own and
// packs short ones together, and Train runs with --batch-tokens below
// --max-length (one sample per update).
func TestBatchSmallerThanSamples(t *testing.T) {
	lengths := []int{30, 5, 6, 2, 40, 4, 4}
	got := pack([]int{0, 1, 2, 3, 4, 5, 6}, lengths, 24, 12)
	want := [][]int{{0}, {1, 2}, {4}, {5, 6}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pack = %v, want %v (sample 3 is too short to train)", got, want)
	}
	g := tinyGeometry()
	g.DraftVocab = 0
	tt := newTinyTarget(41, g)
	ds := memory(g.Hidden, tt.samples(42, 12, 8, 20))
	cfg := trainConfig()
	cfg.BatchTokens, cfg.MaxLength, cfg.Epochs = 4, 24, 1
	res, err := train(context.Background(), cfg, tt, ds, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if train := 12 - 1; res.Steps != train {
		t.Fatalf("%d updates in one epoch of %d training samples, want one per sample", res.Steps, train)
	}
}

// train trains cfg for the tiny target tt on ds into out.
func train(ctx context.Context, cfg Config, tt *tinyTarget, ds dataset.Dataset, out string) (*Result, error) {
	return Train(ctx, cfg, tt.g, tt.embed, tt.head, ds, cpu.New(nil), &loop.Job{Out: out})
}

// sameArgs resumes with cfg a run whose train_args.json records saved as
// its trainer settings, and returns the refusal to resume, if any.
func sameArgs(t *testing.T, tt *tinyTarget, saved []byte, cfg Config) error {
	t.Helper()
	dir := t.TempDir()
	rec := fmt.Sprintf(`{"method":"eagle3","target_fingerprint":"","data":null,"trainer":%s}`, saved)
	if err := os.WriteFile(filepath.Join(dir, loop.ArgsFile), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Resume = true
	_, err := train(context.Background(), cfg, tt, memory(tt.g.Hidden, tt.samples(40, 4, 8, 12)), dir)
	if err != nil && !strings.Contains(err.Error(), "cannot resume") {
		t.Fatal(err)
	}
	return err
}

// TestSameArgsTargetWidth checks that a checkpoint saved without a draft
// width (as before it was a setting) resumes with the target's width given,
// and not with another.
func TestSameArgsTargetWidth(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(35, g)
	cfg := trainConfig()
	saved, err := json.Marshal(cfg) // Intermediate 0: not recorded
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(saved), "intermediate_size") {
		t.Fatalf("a zero width is recorded: %s", saved)
	}
	cfg.Intermediate = g.Intermediate
	if err := sameArgs(t, tt, saved, cfg); err != nil {
		t.Fatalf("the target's width given: %v", err)
	}
	cfg.Intermediate = 2 * g.Intermediate
	if err := sameArgs(t, tt, saved, cfg); err == nil {
		t.Fatal("twice the target's width resumed a checkpoint trained at the target's width")
	}
}

// TestSameArgsTargetTemperature checks that a checkpoint saved without a
// target temperature (the plain softmax, as before it was a setting) resumes
// with 1 given and not with another, and that a bad temperature is refused.
func TestSameArgsTargetTemperature(t *testing.T) {
	tt := newTinyTarget(39, tinyGeometry())
	cfg := trainConfig()
	saved, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(saved), "target_temperature") {
		t.Fatalf("an unset target temperature is recorded: %s", saved)
	}
	cfg.TargetTemperature = 1
	if err := sameArgs(t, tt, saved, cfg); err != nil {
		t.Fatalf("target temperature 1 given: %v", err)
	}
	cfg.TargetTemperature = GreedyTargetTemperature
	if err := sameArgs(t, tt, saved, cfg); err == nil {
		t.Fatal("a sharpened target resumed a checkpoint trained toward the plain softmax")
	}
	cfg.TargetTemperature = -1
	ds := memory(tt.g.Hidden, tt.samples(40, 4, 8, 12))
	if _, err := train(context.Background(), cfg, tt, ds, t.TempDir()); err == nil || !strings.Contains(err.Error(), "target temperature") {
		t.Fatalf("target temperature -1: err = %v", err)
	}
}

// TestTrainRefusesUnorderedLayers: feature layers out of order or repeated
// are refused before training, not after it at the export; nothing is
// written.
func TestTrainRefusesUnorderedLayers(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(35, g)
	ds := memory(g.Hidden, tt.samples(36, 4, 8, 12))
	for _, ids := range [][]int{{5, 3, 1}, {3, 3, 3}} {
		cfg := trainConfig()
		cfg.Export = deagle3.ExportOptions{LayerIDs: ids}
		out := filepath.Join(t.TempDir(), "out")
		_, err := train(context.Background(), cfg, tt, ds, out)
		if err == nil || !strings.Contains(err.Error(), "not strictly increasing") {
			t.Fatalf("layers %v: err = %v", ids, err)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Fatalf("layers %v: the refused run created %s (%v)", ids, out, err)
		}
	}
}

// TestTrainEAGLE31 trains with each EAGLE-3.1 switch combination: the run
// learns, drafter.json and the export's config say which variant it is and
// which switches, the export loads back with them, and a resume with other
// switches is refused.
func TestTrainEAGLE31(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(51, g)
	ds := memory(g.Hidden, tt.samples(52, 20, 8, 16))
	for _, n := range append([]deagle3.Norms{{}}, norms31()...) {
		t.Run(normsName(n), func(t *testing.T) {
			cfg := trainConfig()
			cfg.Epochs = 2
			cfg.FCNorm, cfg.NormBeforeFC, cfg.NormOutput = n.FCNorm, n.NormBeforeFC, n.NormOutput
			out := t.TempDir()
			res, err := train(context.Background(), cfg, tt, ds, out)
			if err != nil {
				t.Fatal(err)
			}
			if res.Geometry.Norms != n {
				t.Fatalf("trained norms %+v, want %+v", res.Geometry.Norms, n)
			}
			var prov map[string]any
			b, _ := os.ReadFile(filepath.Join(out, ProvenanceFile))
			if err := json.Unmarshal(b, &prov); err != nil {
				t.Fatal(err)
			}
			wantVariant := map[bool]string{false: "eagle3", true: "eagle3.1"}[n.Any()]
			if prov["variant"] != wantVariant || prov["fc_norm"] != n.FCNorm || prov["norm_before_fc"] != n.NormBeforeFC || prov["norm_output"] != n.NormOutput {
				t.Errorf("drafter.json: variant %v fc_norm %v norm_before_fc %v norm_output %v, want %s %+v",
					prov["variant"], prov["fc_norm"], prov["norm_before_fc"], prov["norm_output"], wantVariant, n)
			}
			d, err := deagle3.LoadDraft(res.ExportDir, tensor.F32Matrix(tt.embed, g.Vocab, g.Hidden), cpu.New(nil))
			if err != nil {
				t.Fatal(err)
			}
			if d.Geometry.Norms != n {
				t.Errorf("export loads with norms %+v, want %+v", d.Geometry.Norms, n)
			}
			// Resuming the finished run with another switch set is refused.
			other := cfg
			other.Resume, other.NormOutput = true, !n.NormOutput
			if _, err := train(context.Background(), other, tt, ds, out); err == nil || !strings.Contains(err.Error(), "norm_output") {
				t.Errorf("resume with norm_output %v: err = %v, want a refusal naming norm_output", other.NormOutput, err)
			}
		})
	}
	cfg := trainConfig()
	cfg.FCNorm, cfg.NormBeforeFC = true, true
	if _, err := train(context.Background(), cfg, tt, ds, t.TempDir()); err == nil || !strings.Contains(err.Error(), "mutually exclusive") {
		t.Fatalf("fc_norm with norm_before_fc: err = %v", err)
	}
}

// TestSameArgsNorms: a run recorded before the EAGLE-3.1 switches existed
// (plain EAGLE-3) resumes with them off, and not with one on.
func TestSameArgsNorms(t *testing.T) {
	tt := newTinyTarget(53, tinyGeometry())
	cfg := trainConfig()
	cfg.FCNorm, cfg.NormOutput = false, false // plain EAGLE-3
	saved, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"fc_norm", "norm_before_fc", "norm_output"} {
		if strings.Contains(string(saved), k) {
			t.Fatalf("a plain EAGLE-3 run records %s: %s", k, saved)
		}
	}
	if err := sameArgs(t, tt, saved, cfg); err != nil {
		t.Fatalf("plain EAGLE-3: %v", err)
	}
	cfg.FCNorm = true
	if err := sameArgs(t, tt, saved, cfg); err == nil || !strings.Contains(err.Error(), "fc_norm: was false, now true") {
		t.Fatalf("fc_norm resumed a plain EAGLE-3 run: %v", err)
	}
}

// TestAutoEpochs pins the data-derived epoch cap documented on AutoEpochs.
func TestAutoEpochs(t *testing.T) {
	for _, c := range []struct{ tokens, epochs int }{
		{0, 40}, {40_000, 40}, {212_500, 40}, {212_501, 40}, {400_000, 22}, {890_000, 10}, {4_249_999, 3}, {4_250_000, 2}, {1e9, 2},
	} {
		if e := AutoEpochs(c.tokens); e != c.epochs {
			t.Errorf("%d tokens: %d epochs, want %d", c.tokens, e, c.epochs)
		}
	}
}
