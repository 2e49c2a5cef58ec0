package eagle3

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

func TestBuildVocab(t *testing.T) {
	//            id: 0  1  2  3  4  5  6  7
	counts := []int64{5, 0, 9, 5, 1, 0, 9, 0}
	v, err := BuildVocab(counts, 4)
	if err != nil {
		t.Fatal(err)
	}
	// Most frequent: 2 and 6 (9), then 0 and 3 (5, tie broken by lower id: both fit).
	if want := []int32{0, 2, 3, 6}; !reflect.DeepEqual(v.IDs, want) {
		t.Fatalf("ids %v, want %v", v.IDs, want)
	}
	if want := []int64{0, 1, 1, 3}; !reflect.DeepEqual(v.D2T, want) {
		t.Fatalf("d2t %v, want %v", v.D2T, want)
	}
	for i, id := range v.IDs {
		if int64(i)+v.D2T[i] != int64(id) || !v.T2D[id] || v.Index[id] != int32(i) {
			t.Fatalf("mapping of draft %d / target %d inconsistent", i, id)
		}
	}
	if n := countTrue(v.T2D); n != 4 {
		t.Fatalf("t2d has %d set, want 4", n)
	}
	// Tie at the cut: count 5 for ids 0 and 3, only one slot left -> id 0.
	v, _ = BuildVocab(counts, 3)
	if want := []int32{0, 2, 6}; !reflect.DeepEqual(v.IDs, want) {
		t.Fatalf("tie: ids %v, want %v", v.IDs, want)
	}
	// Padding: 5 ids seen, 7 wanted -> the two lowest unseen ids (1, 5).
	v, _ = BuildVocab(counts, 7)
	if want := []int32{0, 1, 2, 3, 4, 5, 6}; !reflect.DeepEqual(v.IDs, want) || v.Seen != 5 {
		t.Fatalf("padding: ids %v seen %d, want %v seen 5", v.IDs, v.Seen, want)
	}
	// N above V is capped.
	v, _ = BuildVocab(counts, 100)
	if len(v.IDs) != 8 {
		t.Fatalf("capped vocabulary has %d ids, want 8", len(v.IDs))
	}
	back, err := VocabFromD2T(v.D2T, 8)
	if err != nil || !reflect.DeepEqual(back.IDs, v.IDs) {
		t.Fatalf("VocabFromD2T: %v %v", back, err)
	}
	if _, err := VocabFromD2T([]int64{0, -1}, 8); err == nil {
		t.Fatal("non-ascending d2t accepted")
	}
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

// TestExportLoadReproducesTrainer exports a (perturbed) draft, reloads it with
// the inference-only drafter and checks that, fed the same ground-truth tokens,
// every chain step drafts the trainer's own argmax at every position, in both
// layouts.
func TestExportLoadReproducesTrainer(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(21, g)
	samples := tt.samples(22, 3, 6, 10)
	const steps = 4
	n, voc := buildTiny(t, g, tt, samples, steps, 1, false)
	r := rand.New(rand.NewPCG(9, 9))
	for i := range n.p.All {
		n.p.All[i] += float32(0.5 * r.NormFloat64())
	}
	n.forward(false)
	for _, format := range []string{FormatNative, FormatSpeculators} {
		dir := filepath.Join(t.TempDir(), format)
		if err := Export(dir, g, n.p, voc, ExportOptions{Format: format, DefaultLayers: true}); err != nil {
			t.Fatal(err)
		}
		d, err := LoadDraft(dir, tt.embed, tensor.CPU())
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		var ids [1]int32
		var lp [1]float32
		for si, sp := range n.seqs {
			s := samples[si]
			h := g.Hidden
			for i := 0; i+1 < sp.n; i++ {
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
				for k := 0; k < steps && i+1+k < sp.n; k++ {
					if k > 0 {
						nodes, err := sess.AddNodes([]int{cur}, []int32{s.Tokens[i+1+k]})
						if err != nil {
							t.Fatal(err)
						}
						cur = nodes[0]
					}
					sess.TopK(cur, 1, ids[:], lp[:])
					want := voc.IDs[n.act[k].pred[sp.start+i]]
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

func TestExportLayout(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(1, g)
	counts := make([]int64, g.Vocab)
	for i := range counts {
		counts[i] = int64(i % 5)
	}
	voc, _ := BuildVocab(counts, g.DraftVocab)
	p := newParams(g)
	initParams(p, g, 1, tt.head, voc)
	dir := t.TempDir()
	err := Export(dir, g, p, voc, ExportOptions{LayerIDs: []int{2, 4, 9}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	want := map[string][]int{
		"fc.weight": {8, 24}, "midlayer.hidden_norm.weight": {8}, "midlayer.input_layernorm.weight": {8},
		"midlayer.self_attn.q_proj.weight": {8, 16}, "midlayer.self_attn.k_proj.weight": {4, 16},
		"midlayer.self_attn.v_proj.weight": {4, 16}, "midlayer.self_attn.o_proj.weight": {8, 8},
		"midlayer.post_attention_layernorm.weight": {8}, "midlayer.mlp.gate_proj.weight": {12, 8},
		"midlayer.mlp.up_proj.weight": {12, 8}, "midlayer.mlp.down_proj.weight": {8, 12}, "norm.weight": {8},
		"lm_head.weight": {10, 8}, "d2t": {10}, "t2d": {16},
	}
	if len(set.Names()) != len(want) {
		t.Fatalf("tensors %v, want exactly %d", set.Names(), len(want))
	}
	for name, shape := range want {
		info, ok := set.Info(name)
		if !ok || !reflect.DeepEqual(info.Shape, shape) {
			t.Fatalf("%s: %+v, want shape %v", name, info, shape)
		}
		wantType := safetensors.F32
		switch name {
		case "d2t":
			wantType = safetensors.I64
		case "t2d":
			wantType = safetensors.BOOL
		}
		if info.DType != wantType {
			t.Fatalf("%s has dtype %s, want %s", name, info.DType, wantType)
		}
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg["architectures"], []any{"LlamaForCausalLMEagle3"}) || cfg["tie_word_embeddings"] != false ||
		cfg["draft_vocab_size"] != 10.0 || cfg["vocab_size"] != 16.0 || cfg["num_hidden_layers"] != 1.0 {
		t.Fatalf("native config: %v", cfg)
	}
	if !reflect.DeepEqual(cfg["eagle_config"], map[string]any{"eagle_aux_hidden_state_layer_ids": []any{1.0, 3.0, 8.0}}) ||
		!reflect.DeepEqual(cfg["eagle_aux_hidden_state_layer_ids"], []any{2.0, 4.0, 9.0}) {
		t.Fatalf("layer ids written as %v / %v", cfg["eagle_config"], cfg["eagle_aux_hidden_state_layer_ids"])
	}
	if _, err := os.Stat(filepath.Join(dir, "drafter.json")); err == nil {
		t.Fatal("Export wrote drafter.json into the export folder; Train writes it at the top of its output folder")
	}
	// Speculators layout with default layers: no ids, norm_before_residual false.
	dir2 := t.TempDir()
	if err := Export(dir2, g, p, voc, ExportOptions{Format: FormatSpeculators, DefaultLayers: true, TargetName: "x"}); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(dir2, "config.json"))
	cfg = nil
	json.Unmarshal(b, &cfg)
	if v, ok := cfg["norm_before_residual"]; !ok || v != false {
		t.Fatalf("speculators config lacks norm_before_residual false: %s", b)
	}
	if _, ok := cfg["eagle_aux_hidden_state_layer_ids"]; ok {
		t.Fatal("default layers written into the speculators config")
	}
	if !bytes.Contains(b, []byte(`"speculators_model_type": "eagle3"`)) {
		t.Fatalf("speculators config: %s", b)
	}
	set2, err := safetensors.OpenDir(dir2)
	if err != nil {
		t.Fatal(err)
	}
	defer set2.Close()
	if _, ok := set2.Info("layers.0.self_attn.q_proj.weight"); !ok {
		t.Fatalf("speculators tensors: %v", set2.Names())
	}
}

func trainConfig(tt *tinyTarget) Config {
	c := DefaultConfig()
	c.Target = &Target{Geometry: tt.g, Embed: tt.embed, LMHead: tt.head}
	c.DraftVocab, c.Steps, c.BatchTokens, c.MaxLength, c.Epochs, c.Patience, c.Seed, c.LogEvery = 12, 3, 64, 24, 6, 0, 3, 1
	c.Export = ExportOptions{DefaultLayers: true}
	return c
}

func TestTrainLearnsAndExports(t *testing.T) {
	g := tinyGeometry()
	g.DraftVocab = 0
	tt := newTinyTarget(31, g)
	ds := memory(g.Hidden, tt.samples(32, 60, 8, 20))
	cfg := trainConfig(tt)
	var evals []EvalMetrics
	cfg.Progress = func(p Progress) {
		if p.Eval != nil {
			evals = append(evals, *p.Eval)
		}
	}
	out := t.TempDir()
	res, err := Train(context.Background(), cfg, ds, tensor.CPU(), out)
	if err != nil {
		t.Fatal(err)
	}
	first, last := evals[0], evals[len(evals)-1]
	t.Logf("held-out loss %.4f -> %.4f, acc %v -> %v, accept length %.3f", first.Loss, last.Loss, first.Accuracy, last.Accuracy, last.AcceptLen)
	if !(last.Loss < 0.8*first.Loss) || !(last.Accuracy[0] > first.Accuracy[0]) {
		t.Fatalf("training did not learn: loss %.4f -> %.4f, step-0 accuracy %.3f -> %.3f", first.Loss, last.Loss, first.Accuracy[0], last.Accuracy[0])
	}
	if _, err := LoadDraft(res.ExportDir, tt.embed, tensor.CPU()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{MetricsFile, CheckpointFile, ProvenanceFile, "eagle3/config.json", "eagle3/model.safetensors"} {
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
	cfg := trainConfig(tt)
	cfg.Epochs, cfg.Intermediate = 1, 3*g.Intermediate
	res, err := Train(context.Background(), cfg, ds, tensor.CPU(), t.TempDir())
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
	d, err := LoadDraft(res.ExportDir, tt.embed, tensor.CPU())
	if err != nil {
		t.Fatal(err)
	}
	if d.Geometry.Intermediate != 3*g.Intermediate {
		t.Fatalf("loaded draft has intermediate %d, want %d", d.Geometry.Intermediate, 3*g.Intermediate)
	}
	cfg.Intermediate = -1
	if _, err := Train(context.Background(), cfg, ds, tensor.CPU(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "MLP width") {
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
	cfg := trainConfig(tt)
	cfg.Epochs = 3
	if _, err := Train(context.Background(), cfg, ds, tensor.CPU(), full); err != nil {
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
	if _, err := Train(ctx, cfg2, ds, tensor.CPU(), part); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run returned %v", err)
	}
	cfg3 := cfg
	cfg3.Resume = true
	if _, err := Train(context.Background(), cfg3, ds, tensor.CPU(), part); err != nil {
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
	ma, mb := metricsWithoutTimings(t, filepath.Join(a, MetricsFile)), metricsWithoutTimings(t, filepath.Join(b, MetricsFile))
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
	cfg := trainConfig(tt)
	cfg.Epochs = 2
	full := t.TempDir()
	if _, err := Train(context.Background(), cfg, ds, tensor.CPU(), full); err != nil {
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
	if _, err := Train(ctx, cfg2, ds, tensor.CPU(), part); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run returned %v", err)
	}
	if evals != 0 {
		t.Fatalf("%d evaluations ran before the cancellation; the test needs none", evals)
	}
	cfg3 := cfg
	cfg3.Resume = true
	if _, err := Train(context.Background(), cfg3, ds, tensor.CPU(), part); err != nil {
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
	cfg := trainConfig(tt)
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
	res, err := Train(context.Background(), cfg, ds, tensor.CPU(), full)
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
	r1, err := Train(context.Background(), cut, ds, tensor.CPU(), part)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Steps != 6 || r1.Stopped != "max-steps" || r1.Best == nil || r1.Best.Step != 4 {
		t.Fatalf("cut run: %d steps, stopped by %q, best %+v", r1.Steps, r1.Stopped, r1.Best)
	}
	cfg.Resume = true
	if _, err := Train(context.Background(), cfg, ds, tensor.CPU(), part); err != nil {
		t.Fatal(err)
	}
	sameRun(t, full, part)
	var prov map[string]any
	b, _ := os.ReadFile(filepath.Join(part, ProvenanceFile))
	if err := json.Unmarshal(b, &prov); err != nil {
		t.Fatal(err)
	}
	if m, ok := prov["metrics"].(map[string]any); !ok || m["accept_length"] == nil || prov["method"] != "eagle3" || prov["format"] != FormatNative {
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
	cfg := trainConfig(tt)
	cfg.BatchTokens, cfg.MaxLength, cfg.Epochs = 4, 24, 1
	res, err := Train(context.Background(), cfg, ds, tensor.CPU(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if train := 12 - 1; res.Steps != train {
		t.Fatalf("%d updates in one epoch of %d training samples, want one per sample", res.Steps, train)
	}
}

// TestSameArgsTargetWidth checks that a checkpoint saved without a draft
// width (as before it was a setting) resumes with the target's width given,
// and not with another.
func TestSameArgsTargetWidth(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(35, g)
	cfg := trainConfig(tt)
	saved, err := json.Marshal(cfg) // Intermediate 0: not recorded
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(saved), "intermediate_size") {
		t.Fatalf("a zero width is recorded: %s", saved)
	}
	cfg.Intermediate = g.Intermediate
	if err := sameArgs(saved, cfg); err != nil {
		t.Fatalf("the target's width given: %v", err)
	}
	cfg.Intermediate = 2 * g.Intermediate
	if err := sameArgs(saved, cfg); err == nil {
		t.Fatal("twice the target's width resumed a checkpoint trained at the target's width")
	}
}

// TestSameArgsTargetTemperature checks that a checkpoint saved without a
// target temperature (the plain softmax, as before it was a setting) resumes
// with 1 given and not with another, and that a bad temperature is refused.
func TestSameArgsTargetTemperature(t *testing.T) {
	tt := newTinyTarget(39, tinyGeometry())
	cfg := trainConfig(tt)
	saved, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(saved), "target_temperature") {
		t.Fatalf("an unset target temperature is recorded: %s", saved)
	}
	cfg.TargetTemperature = 1
	if err := sameArgs(saved, cfg); err != nil {
		t.Fatalf("target temperature 1 given: %v", err)
	}
	cfg.TargetTemperature = GreedyTargetTemperature
	if err := sameArgs(saved, cfg); err == nil {
		t.Fatal("a sharpened target resumed a checkpoint trained toward the plain softmax")
	}
	cfg.TargetTemperature = -1
	ds := memory(tt.g.Hidden, tt.samples(40, 4, 8, 12))
	if _, err := Train(context.Background(), cfg, ds, tensor.CPU(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "target temperature") {
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
		cfg := trainConfig(tt)
		cfg.Export = ExportOptions{LayerIDs: ids}
		out := filepath.Join(t.TempDir(), "out")
		_, err := Train(context.Background(), cfg, ds, tensor.CPU(), out)
		if err == nil || !strings.Contains(err.Error(), "not strictly increasing") {
			t.Fatalf("layers %v: err = %v", ids, err)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Fatalf("layers %v: the refused run created %s (%v)", ids, out, err)
		}
	}
}

// TestExportRefuses: a draft with a NaN or infinite weight, and feature
// layers out of order, repeated or naming the embedding output, are not
// exported; nothing is written.
func TestExportRefuses(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(1, g)
	counts := make([]int64, g.Vocab)
	voc, _ := BuildVocab(counts, g.DraftVocab)
	for _, c := range []struct {
		set    func(p *Params)
		layers []int
		want   []string
	}{
		{func(p *Params) { p.Gate[17] = float32(math.NaN()) }, []int{1, 2, 3}, []string{"non-finite", `mlp.gate_proj.weight" (F32 [12, 8]) holds NaN at element 17 (index [2, 1])`}},
		{func(p *Params) { p.FC[0] = float32(math.Inf(1)) }, []int{1, 2, 3}, []string{"non-finite", `"fc.weight" (F32 [8, 24]) holds +Inf at element 0`}},
		{func(*Params) {}, []int{5, 3, 1}, []string{"feature layers [5 3 1]: not strictly increasing", "ascending layer order"}},
		{func(*Params) {}, []int{3, 3, 3}, []string{"feature layers [3 3 3]: not strictly increasing"}},
		{func(*Params) {}, []int{0, 3, 4}, []string{"layer 0 is not a decoder layer's output"}},
	} {
		for _, format := range []string{FormatNative, FormatSpeculators} {
			p := newParams(g)
			initParams(p, g, 1, tt.head, voc)
			c.set(p)
			dir := filepath.Join(t.TempDir(), "eagle3")
			err := Export(dir, g, p, voc, ExportOptions{Format: format, LayerIDs: c.layers})
			if err == nil {
				t.Fatalf("%s %v: exported", format, c.want)
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q lacks %q", format, err, w)
				}
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s: the refused export created %s (%v)", format, dir, err)
			}
		}
	}
}
