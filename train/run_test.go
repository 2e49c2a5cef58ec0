package train

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/spec"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/loop"
	"github.com/drafter-ai/drafter/train/medusa"
)

// modelDir is the bundled stories260k checkpoint (5 layers, hidden 64, vocab
// 512, tied embeddings), from train/.
// modelDir is the bundled model.
var modelDir = testutil.Stories260k()

// modelFingerprint is the fingerprint Run finds for modelDir.
func modelFingerprint(t *testing.T) string {
	t.Helper()
	tg, err := target.Open(modelDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	return tg.Fingerprint
}

// captured is one self-distilled sequence with the target's states at every
// position, by Hugging Face hidden_states index (model.Options.Taps numbering:
// index L is the state after the final norm).
type captured struct {
	tokens []int32
	mask   []bool
	states map[int][]float32
}

// distil runs stories260k: n prompts of BOS plus 2..4 random tokens, 24 greedy
// tokens each (the response), then a teacher-forced pass over the whole
// sequence recording hidden_states 1..L.
func distil(t *testing.T, n int) []captured {
	t.Helper()
	m, err := model.Load(modelDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	L := m.NumLayers()
	// hidden_states 1..L-1, then index L as the capture stores it (before the
	// final norm), then the final post-norm state (key finalKey).
	taps := make([]int, L+1)
	for i := range taps {
		taps[i] = i + 1
	}
	taps[L-1], taps[L] = model.PreNormLast, L
	rng := rand.New(rand.NewPCG(7, 7))
	out := make([]captured, n)
	for s := range out {
		prompt := []int{1}
		for j := 0; j < 2+s%3; j++ {
			prompt = append(prompt, 3+rng.IntN(m.VocabSize()-3))
		}
		const gen = 24
		seq, err := m.NewSequence(len(prompt) + gen)
		if err != nil {
			t.Fatal(err)
		}
		toks := append([]int(nil), prompt...)
		next := prompt
		for g := 0; g < gen; g++ {
			res, err := m.Forward([]model.Input{{Seq: seq, Tokens: next, Logits: model.LogitsLast}}, model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			lg := res.LogitsOf(0)
			best := 0
			for v := range lg {
				if lg[v] > lg[best] {
					best = v
				}
			}
			toks = append(toks, best)
			next = []int{best}
		}
		full, err := m.NewSequence(len(toks))
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Forward([]model.Input{{Seq: full, Tokens: toks, Logits: model.LogitsNone}}, model.Options{Taps: taps})
		if err != nil {
			t.Fatal(err)
		}
		c := captured{states: map[int][]float32{}}
		for i, id := range toks {
			c.tokens = append(c.tokens, int32(id))
			c.mask = append(c.mask, i >= len(prompt))
		}
		for ti, k := range taps {
			switch k {
			case model.PreNormLast:
				k = L
			case L:
				k = finalKey
			}
			c.states[k] = append([]float32(nil), res.HiddenOf(ti, 0)...)
		}
		out[s] = c
	}
	return out
}

// finalKey is the key of captured.states holding the final post-norm state.
const finalKey = -1

// writeCapture stores samples in dir with the capture writer: hidden_<k> for
// each of layers and final_norm when final, under fingerprint fp. Small shards
// make the reader cross shard boundaries.
func writeCapture(t *testing.T, dir, fp string, samples []captured, layers []int, final bool) {
	t.Helper()
	man := capture.Manifest{ModelFingerprint: fp, Layers: layers, FinalNorm: final, HiddenSize: 64, DType: capture.Float16,
		Seed: 7, Args: map[string]string{"layers": joinInts(layers)}}
	w, err := capture.Create(dir, man, capture.ShardOptions{MaxRows: 300})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range samples {
		var st [][]float32
		for _, k := range layers {
			st = append(st, c.states[k])
		}
		if final {
			st = append(st, c.states[finalKey])
		}
		if err := w.Write(capture.Sample{ID: int64(i), Tokens: c.tokens, LossMask: c.mask, States: st}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// The methods' names.
const (
	methodMedusa = string(dmedusa.Kind)
	methodEAGLE3 = string(deagle3.Kind)
)

func smallMedusa() medusa.Options {
	c := medusa.DefaultConfig()
	c.Heads, c.MaxEpochs, c.BatchTokens, c.HeldOut, c.LogEvery = 2, 3, 128, 0.2, 1
	return medusa.Options{Config: c}
}

func smallEAGLE3() eagle3.Options {
	c := eagle3.DefaultConfig()
	c.DraftVocab, c.Steps, c.BatchTokens, c.MaxLength, c.Epochs, c.EvalFraction, c.LogEvery = 96, 2, 256, 64, 2, 0.2, 1
	return eagle3.Options{Config: c}
}

// small returns smallMedusa or smallEAGLE3 by the method's name.
func small(method string) loop.Method {
	if method == methodEAGLE3 {
		return smallEAGLE3()
	}
	return smallMedusa()
}

// eagle3Layers returns smallEAGLE3 with the feature layers given.
func eagle3Layers(layers ...int) eagle3.Options {
	o := smallEAGLE3()
	o.Layers = layers
	return o
}

// scaleLR returns m with its learning rate multiplied by f.
func scaleLR(m loop.Method, f float64) loop.Method {
	switch o := m.(type) {
	case medusa.Options:
		o.Config.LR *= f
		return o
	case eagle3.Options:
		o.Config.LR *= f
		return o
	}
	panic(fmt.Sprintf("scaleLR: method %T", m))
}

func sha(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readProv(t *testing.T, path string) map[string]any {
	t.Helper()
	return testutil.ReadJSON(t, path)
}

// checkProvenance checks drafter.json against the target and the manifests on
// disk.
func checkProvenance(t *testing.T, out, method, fp string, dirs ...string) {
	t.Helper()
	p := readProv(t, filepath.Join(out, ProvenanceFile))
	if p["method"] != method {
		t.Errorf("drafter.json method = %v, want %s", p["method"], method)
	}
	if p["target_fingerprint"] != fp {
		t.Errorf("drafter.json target_fingerprint = %v, want %s", p["target_fingerprint"], fp)
	}
	man, _ := p["data_manifests"].(map[string]any)
	if len(man) != len(dirs) {
		t.Errorf("drafter.json data_manifests = %v, want %d entries", man, len(dirs))
	}
	for _, d := range dirs {
		mp := filepath.Join(d, capture.ManifestName)
		if got, want := man[mp], sha(t, mp); got != want {
			t.Errorf("drafter.json data_manifests[%s] = %v, want sha256 %s", mp, got, want)
		}
	}
	args, _ := p["args"].(map[string]any)
	if args == nil || args["settings"] == nil || args["model"] != modelDir {
		t.Errorf("drafter.json args = %v, want the settings and the model", p["args"])
	}
}

func TestMedusaEndToEnd(t *testing.T) {
	fp := modelFingerprint(t)
	samples := distil(t, 20)
	tmp := t.TempDir()
	d1, d2 := filepath.Join(tmp, "cap1"), filepath.Join(tmp, "cap2")
	writeCapture(t, d1, fp, samples[:12], []int{1, 3, 5}, true)
	writeCapture(t, d2, fp, samples[12:], []int{1, 3, 5}, true)
	out := filepath.Join(tmp, "out")
	var bar bytes.Buffer
	res, err := Run(context.Background(), Options{Method: smallMedusa(), Model: modelDir, Data: []string{d1, d2}, Out: out,
		Progress: &bar, Args: map[string]string{"method": "medusa"}})
	if err != nil {
		t.Fatal(err)
	}
	mres := res.Trainer.(*medusa.Result)
	if res.Steps == 0 || mres.Best == nil {
		t.Fatalf("result %+v: no steps or no held-out evaluation", res)
	}
	for _, f := range []string{"vllm/config.json", "vllm/model.safetensors", "medusa/config.json", "medusa/medusa_lm_head.safetensors",
		"metrics.jsonl", CheckpointFile, ArgsFile, ProvenanceFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing output: %v", err)
		}
	}
	checkProvenance(t, out, "medusa", fp, d1, d2)
	checkSums(t, out, ProvenanceFile, "medusa/config.json", "medusa/medusa_lm_head.safetensors", "vllm/config.json", "vllm/model.safetensors")
	if s := bar.String(); !strings.Contains(s, "loss") || !strings.Contains(s, "tok/s") || !strings.Contains(s, "eval step") {
		t.Errorf("progress output lacks loss, tok/s or eval lines: %q", s)
	}
	// drafter.json's tree is the calibrated tree of the best evaluation's
	// rank accuracies, DefaultTreeNodes paths, and is what eval would use.
	var prov struct {
		Tree spec.Choices `json:"tree"`
	}
	if b, err := os.ReadFile(filepath.Join(out, ProvenanceFile)); err != nil || json.Unmarshal(b, &prov) != nil {
		t.Fatalf("reading drafter.json: %v", err)
	}
	want, err := spec.CalibratedChoices(mres.Best.RankAccuracy, medusa.DefaultTreeNodes)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 10 || !reflect.DeepEqual(prov.Tree, want) {
		t.Errorf("drafter.json tree %v, want the calibrated %v", prov.Tree, want)
	}
	for h, acc := range mres.Best.RankAccuracy {
		sum := 0.0
		for _, a := range acc {
			sum += a
		}
		if len(acc) != medusa.RankBins || acc[0] != mres.Best.Top1[h] || sum > 1+1e-12 {
			t.Errorf("head %d rank accuracies %v: want %d ranks starting at top-1 %v, summing to at most 1", h, acc, medusa.RankBins, mres.Best.Top1[h])
		}
	}
	// The export reloads and is the returned (best) heads.
	h, err := dmedusa.LoadHeads(out)
	if err != nil {
		t.Fatal(err)
	}
	if h.Heads != 2 || h.Hidden != 64 || h.Vocab != 512 {
		t.Errorf("reloaded geometry %+v", h.Geometry)
	}
	for i, w := range mres.Heads.W[1][0] {
		if h.W[1][0][i] != w {
			t.Fatalf("reloaded head 1 weight %d = %v, trained %v", i, h.W[1][0][i], w)
		}
	}
	// A second run into the same folder without --resume is refused.
	_, err = Run(context.Background(), Options{Method: smallMedusa(), Model: modelDir, Data: []string{d1}, Out: out})
	if err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Errorf("training into a used --out: err = %v, want a refusal mentioning --resume", err)
	}
}

func TestEAGLE3EndToEnd(t *testing.T) {
	fp := modelFingerprint(t)
	samples := distil(t, 16)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "cap")
	writeCapture(t, dir, fp, samples, []int{1, 2, 3, 5}, true)

	// The engines' default feature layers (2, L/2, L-3: 2, 2, 2 for 5
	// layers), native layout: the export leaves them to the engines.
	out := filepath.Join(tmp, "out")
	var bar bytes.Buffer
	res, err := Run(context.Background(), Options{Method: eagle3Layers(2, 2, 2), Model: modelDir, Data: []string{dir}, Out: out, Progress: &bar})
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps == 0 {
		t.Fatal("no steps taken")
	}
	for _, f := range []string{"eagle3/config.json", "eagle3/model.safetensors", "metrics.jsonl", CheckpointFile, ProvenanceFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing output: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "eagle3", ProvenanceFile)); err == nil {
		t.Errorf("drafter.json written inside the export folder too; it belongs at the top of --out only")
	}
	checkProvenance(t, out, "eagle3", fp, dir)
	// The target's depth is recorded, for check-export's layer-id range check.
	if p := readProv(t, filepath.Join(out, ProvenanceFile)); p["target_num_hidden_layers"] != 5.0 {
		t.Errorf("drafter.json target_num_hidden_layers = %v, want stories260k's 5", p["target_num_hidden_layers"])
	}
	checkSums(t, out, ProvenanceFile, "eagle3/config.json", "eagle3/model.safetensors")
	cfg := readProv(t, filepath.Join(out, "eagle3", "config.json"))
	if _, ok := cfg["eagle_aux_hidden_state_layer_ids"]; ok {
		t.Errorf("the engines' default feature layers written into config.json: %v", cfg["eagle_aux_hidden_state_layer_ids"])
	}
	if !strings.Contains(bar.String(), "eval epoch") {
		t.Errorf("progress output lacks evaluation lines: %q", bar.String())
	}
	st, err := safetensors.Open(filepath.Join(out, "eagle3", "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, shape, err := st.Int64("d2t"); err != nil || shape[0] != 96 {
		t.Errorf("d2t: shape %v, err %v; want [96]", shape, err)
	}

	// drafter's default for this 5-layer target, 1, 3, 5, differs from the
	// engines': the ids are written.
	outd := filepath.Join(tmp, "outd")
	if _, err := Run(context.Background(), Options{Method: smallEAGLE3(), Model: modelDir, Data: []string{dir}, Out: outd}); err != nil {
		t.Fatal(err)
	}
	cfg = readProv(t, filepath.Join(outd, "eagle3", "config.json"))
	if ids, _ := json.Marshal(cfg["eagle_aux_hidden_state_layer_ids"]); string(ids) != "[1,3,5]" {
		t.Errorf("native config eagle_aux_hidden_state_layer_ids = %s, want drafter's default [1,3,5]", ids)
	}
	// and its draft MLP is as wide as the target's.
	if w, _ := cfg["intermediate_size"].(float64); w != 172 {
		t.Errorf("native config intermediate_size = %v, want the target's 172", cfg["intermediate_size"])
	}

	// --layers 1,2,3, --intermediate 344 and the speculators layout: the ids
	// and the width are written.
	wide := eagle3Layers(1, 2, 3)
	wide.Config.Intermediate = 344
	wide.Config.Export.Format = deagle3.FormatSpeculators
	out2 := filepath.Join(tmp, "out2")
	if _, err := Run(context.Background(), Options{Method: wide, Model: modelDir, Data: []string{dir}, Out: out2}); err != nil {
		t.Fatal(err)
	}
	cfg = readProv(t, filepath.Join(out2, "eagle3", "config.json"))
	if lc, _ := cfg["transformer_layer_config"].(map[string]any); lc == nil || lc["intermediate_size"] != 344.0 {
		t.Errorf("speculators transformer_layer_config = %v, want intermediate_size 344", cfg["transformer_layer_config"])
	}
	ids, _ := json.Marshal(cfg["eagle_aux_hidden_state_layer_ids"])
	if string(ids) != "[1,2,3]" {
		t.Errorf("speculators config eagle_aux_hidden_state_layer_ids = %s, want [1,2,3]", ids)
	}
	if p := readProv(t, filepath.Join(out2, ProvenanceFile)); p["format"] != "speculators" {
		t.Errorf("drafter.json format = %v", p["format"])
	}
}

func TestFingerprintMismatchRefused(t *testing.T) {
	fp := modelFingerprint(t)
	samples := distil(t, 3)
	tmp := t.TempDir()
	good, bad := filepath.Join(tmp, "good"), filepath.Join(tmp, "bad")
	other := strings.Repeat("ab", 32)
	writeCapture(t, good, fp, samples, []int{1, 3, 5}, true)
	writeCapture(t, bad, other, samples, []int{1, 3, 5}, true)
	for _, m := range []string{methodMedusa, methodEAGLE3} {
		_, err := Run(context.Background(), Options{Method: small(m), Model: modelDir, Data: []string{good, bad}, Out: filepath.Join(tmp, "out-"+m)})
		if err == nil {
			t.Fatalf("%s: data from another model accepted", m)
		}
		for _, want := range []string{bad, fp, other, "another model"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not mention %q", m, err, want)
			}
		}
		if _, err := os.Stat(filepath.Join(tmp, "out-"+m, ArgsFile)); err == nil {
			t.Errorf("%s: refused run still wrote %s", m, ArgsFile)
		}
	}
}

func TestMissingColumnsRefused(t *testing.T) {
	fp := modelFingerprint(t)
	samples := distil(t, 3)
	tmp := t.TempDir()
	noFinal, low := filepath.Join(tmp, "nofinal"), filepath.Join(tmp, "low")
	writeCapture(t, noFinal, fp, samples, []int{2}, false)
	writeCapture(t, low, fp, samples, []int{1, 3}, true)
	cases := []struct {
		name   string
		opt    Options
		wants  []string
		reject []string
	}{
		{"medusa without final_norm", Options{Method: smallMedusa(), Data: []string{noFinal}},
			[]string{noFinal, "final_norm", "medusa", "hidden_2"}, nil},
		{"eagle3 without final_norm", Options{Method: smallEAGLE3(), Data: []string{noFinal}},
			[]string{noFinal, "final_norm", "eagle3"}, nil},
		{"eagle3 default layers not captured", Options{Method: smallEAGLE3(), Data: []string{low}},
			[]string{low, "hidden_5", "index 5", "--layers 1,3", "default"}, nil},
		{"eagle3 --layers not captured", Options{Method: eagle3Layers(1, 3, 4), Data: []string{low}},
			[]string{low, "hidden_4", "index 4", "high", "--layers 1,3,4", "--layers 1,3 "}, nil},
		{"eagle3 layer out of range", Options{Method: eagle3Layers(0, 1, 3), Data: []string{low}},
			[]string{"index 0", "[1, 5]"}, nil},
	}
	for _, c := range cases {
		c.opt.Model, c.opt.Out = modelDir, filepath.Join(tmp, "out")
		_, err := Run(context.Background(), c.opt)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, w)
			}
		}
	}
	// The --layers override naming captured indices is accepted by the check.
	if _, err := CheckData([]string{low}, fp, 64, Needs{Method: "eagle3", FinalNorm: true, Layers: []int{1, 3, 3}, LayersFromFlag: true}); err != nil {
		t.Errorf("captured layers refused: %v", err)
	}
}

// TestResume interrupts a run before its first step, resumes it and compares
// the exports with an uninterrupted run's, byte for byte; then a resume with a
// changed learning rate is refused with the difference named.
func TestResume(t *testing.T) {
	fp := modelFingerprint(t)
	samples := distil(t, 12)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "cap")
	writeCapture(t, dir, fp, samples, []int{1, 3, 5}, true)
	for _, m := range []string{methodMedusa, methodEAGLE3} {
		t.Run(m, func(t *testing.T) {
			opt := func(out string) Options {
				return Options{Method: small(m), Model: modelDir, Data: []string{dir}, Out: filepath.Join(tmp, m+out)}
			}
			whole := opt("-whole")
			if _, err := Run(context.Background(), whole); err != nil {
				t.Fatal(err)
			}
			part := opt("-part")
			// Cancel at the first held-out evaluation: the trainer stops at its
			// next step with a checkpoint.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			part.Progress = &cancelOn{text: "eval ", cancel: cancel}
			_, err := Run(ctx, part)
			if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "--resume") {
				t.Fatalf("cancelled run: err = %v, want context.Canceled and a --resume hint", err)
			}
			if _, err := os.Stat(filepath.Join(part.Out, CheckpointFile)); err != nil {
				t.Fatalf("cancelled run left no checkpoint: %v", err)
			}
			part.Progress = nil
			changed := part
			changed.Resume = true
			changed.Method = scaleLR(changed.Method, 2)
			if _, err := Run(context.Background(), changed); err == nil || !strings.Contains(err.Error(), "lr: was") {
				t.Fatalf("resume with another lr: err = %v, want a refusal naming lr", err)
			}
			part.Resume = true
			if _, err := Run(context.Background(), part); err != nil {
				t.Fatal(err)
			}
			files := []string{"vllm/model.safetensors", "medusa/medusa_lm_head.safetensors"}
			if m == methodEAGLE3 {
				files = []string{"eagle3/model.safetensors"}
			}
			for _, f := range files {
				if a, b := sha(t, filepath.Join(whole.Out, f)), sha(t, filepath.Join(part.Out, f)); a != b {
					t.Errorf("%s differs between the uninterrupted and the resumed run", f)
				}
			}
		})
	}
}

// TestAdapters checks the capture adapter against the capture reader for both
// trainers' reads, that fields not asked for are left empty, that concurrent
// reads into separate buffers agree, and that reading a sample into warm
// buffers allocates nothing (the capture reader itself allocates nothing).
func TestAdapters(t *testing.T) {
	fp := modelFingerprint(t)
	samples := distil(t, 4)
	dir := filepath.Join(t.TempDir(), "cap")
	writeCapture(t, dir, fp, samples, []int{1, 2, 3}, true)
	ds, err := capture.OpenDataset(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	md, err := NewCaptureData(ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	ed, err := NewCaptureData(ds, []int{3, 1, 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewCaptureData(ds, []int{3, 7, 3}); err == nil || !strings.Contains(err.Error(), "hidden_7") {
		t.Errorf("missing feature column accepted: %v", err)
	}
	fin, _ := ds.ColumnIndex("final_norm")
	h1, _ := ds.ColumnIndex("hidden_1")
	h3, _ := ds.ColumnIndex("hidden_3")
	all := dataset.Final | dataset.Features
	var ms, es dataset.Sample
	for i := 0; i < ds.NumSamples(); i++ {
		if err := md.Sample(i, &ms, dataset.Final); err != nil {
			t.Fatal(err)
		}
		if err := dataset.Check(i, &ms, dataset.Final, 64, 512); err != nil {
			t.Fatal(err)
		}
		want := ds.State(i, fin, nil)
		if !slices.Equal(ms.Final, want) || !slices.Equal(ms.Tokens, samples[i].tokens) || slices.ContainsFunc(ms.Features, func(f []float32) bool { return len(f) != 0 }) {
			t.Fatalf("medusa sample %d differs from the capture", i)
		}
		if err := ed.Sample(i, &es, all); err != nil {
			t.Fatal(err)
		}
		if err := dataset.Check(i, &es, all, 64, 512); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(es.Features[0], ds.State(i, h3, nil)) || !slices.Equal(es.Features[1], ds.State(i, h1, nil)) ||
			!slices.Equal(es.Features[2], es.Features[0]) || !slices.Equal(es.Final, want) {
			t.Fatalf("eagle3 sample %d differs from the capture", i)
		}
		if &es.Features[2][0] == &es.Features[0][0] {
			t.Errorf("repeated feature layer shares memory with the first: the caller's buffers would alias")
		}
		if err := ed.Sample(i, &es, dataset.TokensOnly); err != nil || len(es.Final) != 0 || len(es.Features[1]) != 0 || !slices.Equal(es.Tokens, samples[i].tokens) {
			t.Fatalf("tokens-only read of sample %d: %v", i, err)
		}
	}
	if err := md.Sample(0, &ms, dataset.Features); err == nil {
		t.Error("features read through an adapter built without feature layers")
	}
	if err := ed.Sample(ds.NumSamples(), &es, all); err == nil {
		t.Error("out-of-range sample accepted")
	}
	// Concurrent reads into separate buffers see the same data.
	var wg sync.WaitGroup
	got := make([]dataset.Sample, ds.NumSamples())
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ed.Sample(i, &got[i], all); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i := range got {
		ed.Sample(i, &es, all)
		if !slices.Equal(got[i].Final, es.Final) || !slices.Equal(got[i].Features[1], es.Features[1]) {
			t.Fatalf("concurrent read of sample %d differs", i)
		}
	}
	big := 0 // the longest sample first, so the buffers have room for all
	for i := 0; i < ds.NumSamples(); i++ {
		if ds.SampleLen(i) > ds.SampleLen(big) {
			big = i
		}
	}
	md.Sample(big, &ms, dataset.Final)
	ed.Sample(big, &es, all)
	allocs := testing.AllocsPerRun(20, func() {
		for i := 0; i < ds.NumSamples(); i++ {
			md.Sample(i, &ms, dataset.Final)
			ed.Sample(i, &es, all)
			ed.Sample(i, &es, dataset.TokensOnly)
		}
	})
	if allocs != 0 {
		t.Errorf("reading samples through the adapter allocates %v times per pass", allocs)
	}
}

// cancelOn is a progress writer that cancels once text has been written.
type cancelOn struct {
	text   string
	cancel context.CancelFunc
	seen   bytes.Buffer
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.seen.Write(p)
	if strings.Contains(c.seen.String(), c.text) {
		c.cancel()
	}
	return len(p), nil
}

// TestCancelBeforeFirstStep stops a Medusa run before it trains anything: the
// checkpoint is still written and a resume completes the run.
func TestCancelBeforeFirstStep(t *testing.T) {
	fp := modelFingerprint(t)
	dir := filepath.Join(t.TempDir(), "cap")
	writeCapture(t, dir, fp, distil(t, 6), []int{1, 3, 5}, true)
	o := Options{Method: smallMedusa(), Model: modelDir, Data: []string{dir}, Out: filepath.Join(t.TempDir(), "out")}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, o); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	o.Resume = true
	if r, err := Run(context.Background(), o); err != nil || r.Steps == 0 {
		t.Fatalf("resume: %v, %+v", err, r)
	}
}

// TestVerifyData corrupts one byte of a shard: with or without --verify-data
// (which only ignores the verification cache), it is refused by name.
func TestVerifyData(t *testing.T) {
	fp := modelFingerprint(t)
	dir := filepath.Join(t.TempDir(), "cap")
	writeCapture(t, dir, fp, distil(t, 4), []int{1, 3, 5}, true)
	shard := filepath.Join(dir, capture.ShardFileName(0))
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40 // inside the state data
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Method: smallMedusa(), Model: modelDir, Data: []string{dir}, Out: filepath.Join(t.TempDir(), "out"), VerifyData: true}
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), capture.ShardFileName(0)) {
		t.Errorf("corrupt shard with VerifyData: err = %v, want an error naming %s", err, capture.ShardFileName(0))
	}
	o.VerifyData = false
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), capture.ShardFileName(0)) {
		t.Errorf("corrupt shard: err = %v, want an error naming %s", err, capture.ShardFileName(0))
	}
}

// TestResumeUnrecordedWidth checks that a run without --intermediate records
// the target's width, and resumes a run whose record holds no width (as every
// run before the flag): the target's width given explicitly resumes it, and
// another width is refused with both values named.
func TestResumeUnrecordedWidth(t *testing.T) {
	fp := modelFingerprint(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "cap")
	writeCapture(t, dir, fp, distil(t, 12), []int{1, 3, 5}, true)
	opt := Options{Method: smallEAGLE3(), Model: modelDir, Data: []string{dir}, Out: filepath.Join(tmp, "out")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := opt
	first.Progress = &cancelOn{text: "eval ", cancel: cancel}
	if _, err := Run(ctx, first); err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: err = %v", err)
	}
	args := filepath.Join(opt.Out, ArgsFile)
	m, err := readJSONMap(args)
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := m["trainer"].(map[string]any)
	if tr == nil || tr["intermediate_size"] != 172.0 {
		t.Fatalf("%s: trainer %v, want intermediate_size 172 recorded", ArgsFile, m["trainer"])
	}
	delete(tr, "intermediate_size") // as older builds wrote it
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(args, raw, 0o644); err != nil {
		t.Fatal(err)
	}

	opt.Resume = true
	wide := opt
	w := smallEAGLE3()
	w.Config.Intermediate = 344
	wide.Method = w
	if _, err := Run(context.Background(), wide); err == nil || !strings.Contains(err.Error(), "intermediate_size: was 172, now 344") {
		t.Fatalf("resume with another width: err = %v, want a refusal naming 172 and 344", err)
	}
	same := opt
	s := smallEAGLE3()
	s.Config.Intermediate = 172 // stories260k's own width
	same.Method = s
	if _, err := Run(context.Background(), same); err != nil {
		t.Fatalf("resume with the target's width given: %v", err)
	}
}

// TestTargetTemperatureFromData checks EAGLE-3's target temperature chosen
// from how the captures were made (see also train/eagle3's
// TestDataTargetTemperature), its record, and the resume of a run recorded
// before the setting existed (which trained toward the plain softmax).
func TestTargetTemperatureFromData(t *testing.T) {
	greedy := map[string]any{"temperature": 0.0, "decoding": "greedy"}
	fp := modelFingerprint(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "cap")
	writeCapture(t, dir, fp, distil(t, 12), []int{1, 3, 5}, true)
	man, err := capture.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	man.Generation = greedy // as drafter distill records greedy decoding
	if err := capture.WriteManifest(dir, man); err != nil {
		t.Fatal(err)
	}
	// A fresh run on greedy data records the greedy target temperature.
	started := func(o Options) map[string]any {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		o.Progress = &cancelOn{text: "eval ", cancel: cancel}
		if _, err := Run(ctx, o); err == nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled run: err = %v", err)
		}
		m, err := readJSONMap(filepath.Join(o.Out, ArgsFile))
		if err != nil {
			t.Fatal(err)
		}
		tr, _ := m["trainer"].(map[string]any)
		if tr == nil {
			t.Fatalf("%s has no trainer settings: %v", ArgsFile, m)
		}
		return m
	}
	opt := Options{Method: smallEAGLE3(), Model: modelDir, Data: []string{dir}, Out: filepath.Join(tmp, "new")}
	if tr := started(opt)["trainer"].(map[string]any); tr["target_temperature"] != eagle3.GreedyTargetTemperature {
		t.Fatalf("trainer settings %v, want target_temperature %g recorded for greedy data", tr, eagle3.GreedyTargetTemperature)
	}

	// A run of an older build trained toward the plain softmax and recorded
	// no target temperature: the new default must not resume it, 1 must.
	opt.Out = filepath.Join(tmp, "old")
	old := opt
	one := smallEAGLE3()
	one.Config.TargetTemperature = 1
	old.Method = one
	m := started(old)
	delete(m["trainer"].(map[string]any), "target_temperature")
	raw, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(opt.Out, ArgsFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	opt.Resume = true
	if _, err := Run(context.Background(), opt); err == nil || !strings.Contains(err.Error(), "target_temperature: was 1, now 0.5") {
		t.Fatalf("resuming an old run with the new default: err = %v, want a refusal naming 1 and 0.5", err)
	}
	plain := opt
	plain.Method = one
	if _, err := Run(context.Background(), plain); err != nil {
		t.Fatalf("resuming an old run with --target-temperature 1: %v", err)
	}
}

// otherMethod is a drafter method Run has never heard of: it reads three
// feature layers, records what Run hands it (and its first sample) and
// writes a drafter.json.
type otherMethod struct {
	got    **loop.Setup
	sample *dataset.Sample
}

func (otherMethod) Kind() drafters.Kind { return "other" }

func (otherMethod) Columns(c *checkpoint.Config) (loop.Columns, error) {
	return loop.Columns{FeatureLayers: []int{1, 3, c.NumLayers}}, nil
}

func (m otherMethod) Train(ctx context.Context, s *loop.Setup) (*loop.Outcome, error) {
	*m.got = s
	if err := s.Data.Sample(0, m.sample, dataset.Final|dataset.Features); err != nil {
		return nil, err
	}
	if _, _, err := s.OutputLayers(false); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.Job.Out, 0o755); err != nil {
		return nil, err
	}
	prov, err := json.Marshal(map[string]any{"method": "other", "args": s.Job.Provenance.Args})
	if err != nil {
		return nil, err
	}
	return &loop.Outcome{Steps: 1, Epochs: 1, Stopped: "max-epochs", Exports: []string{s.Job.Out}},
		os.WriteFile(filepath.Join(s.Job.Out, ProvenanceFile), prov, 0o644)
}

// TestRunAnyMethod: Run trains any loop.Method it is given, asking it which
// columns it reads (a missing one is refused before it trains) and handing
// it the target, the checked captures, their data with those columns and
// the settings record.
func TestRunAnyMethod(t *testing.T) {
	fp := modelFingerprint(t)
	tmp := t.TempDir()
	dir, low := filepath.Join(tmp, "cap"), filepath.Join(tmp, "low")
	samples := distil(t, 3)
	writeCapture(t, dir, fp, samples, []int{1, 3, 5}, true)
	writeCapture(t, low, fp, samples, []int{1, 3}, true)
	var got *loop.Setup
	var s dataset.Sample
	m := otherMethod{got: &got, sample: &s}
	if _, err := Run(context.Background(), Options{Method: m, Model: modelDir, Data: []string{low}, Out: filepath.Join(tmp, "refused")}); err == nil ||
		!strings.Contains(err.Error(), "hidden_5") || got != nil {
		t.Fatalf("data without the method's column: err %v, method trained: %v", err, got != nil)
	}
	res, err := Run(context.Background(), Options{Method: m, Model: modelDir, Data: []string{dir}, Out: filepath.Join(tmp, "out")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Method != "other" || res.Steps != 1 || res.Provenance["method"] != "other" || got == nil {
		t.Fatalf("result %+v", res)
	}
	if !slices.Equal(s.Tokens, samples[0].tokens) || len(s.Features[2]) != 64*len(s.Tokens) {
		t.Fatalf("the method's first sample has tokens %v and %d values of its high feature, want %v and 64 per token", s.Tokens, len(s.Features[2]), samples[0].tokens)
	}
	if len(got.Captures) != 1 || got.Captures[0].Dir != dir || got.Job.Settings.TargetFingerprint != fp || got.Target.Fingerprint != fp {
		t.Fatalf("the method was handed captures %+v, settings %+v", got.Captures, got.Job.Settings)
	}
}
