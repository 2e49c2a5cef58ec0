package target

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestLevels: Open reads no tokenizer and builds no model, OpenWithTokenizer
// adds the tokenizer, Load the stop ids and the model and releases the
// files; all three find the same fingerprint.
func TestLevels(t *testing.T) {
	o, err := Open(testutil.Stories260k(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.Weights == nil || o.Model != nil || o.Tok != nil || o.Stop != nil || o.Fingerprint == "" {
		t.Fatalf("Open: weights %v, model %v, tokenizer %v, stop %v, fingerprint %q", o.Weights != nil, o.Model != nil, o.Tok != nil, o.Stop, o.Fingerprint)
	}
	w, err := OpenWithTokenizer(testutil.Stories260k(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Tok == nil || w.Model != nil || w.Weights == nil {
		t.Fatalf("OpenWithTokenizer: tokenizer %v, model %v, weights %v", w.Tok != nil, w.Model != nil, w.Weights != nil)
	}
	l, err := Load(testutil.Stories260k(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Model == nil || l.Tok == nil || l.Weights != nil || !slices.Equal(l.Stop, []int{2}) {
		t.Fatalf("Load: model %v, tokenizer %v, weights still mapped %v, stop %v", l.Model != nil, l.Tok != nil, l.Weights != nil, l.Stop)
	}
	if o.Fingerprint != w.Fingerprint || o.Fingerprint != l.Fingerprint || o.TokenizerHash == "" || o.TokenizerHash != l.TokenizerHash {
		t.Fatalf("fingerprints differ: %s %s %s", o.Fingerprint, w.Fingerprint, l.Fingerprint)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := l.OutputLayers(false); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("OutputLayers after Close: %v", err)
	}
	if l.Name() != testutil.Stories260k() || l.Config == nil {
		t.Fatal("the configs must stay readable after Close")
	}
}

// TestOutputLayers: the embedding and lm_head read from the files without
// building the model are the model's own, for a tied and an untied model.
func TestOutputLayers(t *testing.T) {
	// The untied variant has an lm_head of its own; it is in the shared
	// reference data only.
	for _, dir := range []string{testutil.Stories260k(), testutil.SharedPath("models/stories260k-untied")} {
		if _, err := os.Stat(dir); err != nil {
			t.Skip("shared reference data not found: ", dir)
		}
		o, err := Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		embed, head, err := o.OutputLayers(true)
		if err != nil {
			t.Fatal(err)
		}
		none, head2, err := o.OutputLayers(false)
		if err != nil || none != nil || !slices.Equal(head, head2) {
			t.Fatalf("%s: without the embedding: %v, embed %v", dir, err, none != nil)
		}
		l, err := Load(dir, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if !slices.Equal(embed, l.Model.Embed.F32) || !slices.Equal(head, l.Model.LMHead.F32) {
			t.Fatalf("%s: the files' output layers differ from the model's", dir)
		}
		tied := o.Config.TieWordEmbeddings
		if tied != (&embed[0] == &head[0]) {
			t.Fatalf("%s: tied %v, but lm_head shares the embedding: %v", dir, tied, &embed[0] == &head[0])
		}
		fromModel, headFromModel, err := l.OutputLayers(true)
		if err != nil || &fromModel[0] != &l.Model.Embed.F32[0] || &headFromModel[0] != &l.Model.LMHead.F32[0] {
			t.Fatalf("%s: a loaded target's output layers are not the model's: %v", dir, err)
		}
	}
}

// TestStopIDs: generation_config.json's eos list wins over config.json's;
// a model with neither can be opened (train and inspect need no stop id) but
// not loaded to generate.
func TestStopIDs(t *testing.T) {
	dir := testutil.CopyDir(t, testutil.Stories260k())
	write(t, filepath.Join(dir, "generation_config.json"), `{"bos_token_id": 1, "eos_token_id": [3, 2, 3]}`)
	l, err := Load(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if !slices.Equal(l.Stop, []int{3, 2}) {
		t.Fatalf("stop ids %v, want [3 2]", l.Stop)
	}

	none := testutil.CopyDir(t, testutil.Stories260k())
	os.Remove(filepath.Join(none, "generation_config.json"))
	cfg, err := os.ReadFile(filepath.Join(none, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(none, "config.json"), strings.Replace(string(cfg), `"eos_token_id": 2`, `"eos_token_id": null`, 1))
	w, err := OpenWithTokenizer(none, nil)
	if err != nil {
		t.Fatalf("a model without eos_token_id must open: %v", err)
	}
	w.Close()
	if _, err := Load(none, nil, nil); err == nil || !strings.Contains(err.Error(), "no eos_token_id") {
		t.Fatalf("Load without eos ids: %v", err)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mappedNow reports whether the process maps the file path (Linux:
// /proc/self/maps), and whether it could tell.
func mappedNow(t *testing.T, path string) (mapped, known bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return false, false
	}
	return strings.Contains(string(b), path), true
}

// TestLoadBF16: a bf16 checkpoint's model reads its weights from the files,
// which it keeps mapped until Close (a float32 checkpoint's are released
// as soon as the model holds its copy); OutputLayers gives its embedding and
// lm_head widened to float32, the values the files hold.
func TestLoadBF16(t *testing.T) {
	dir := testutil.CopyDir(t, testutil.Stories260k())
	testmodel.Convert(t, dir, safetensors.BF16)
	file, err := filepath.EvalSymlinks(filepath.Join(dir, safetensors.SingleFile))
	if err != nil {
		t.Fatal(err)
	}
	l, err := Load(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Weights != nil || l.Model.Embed.DType != tensor.BF16 || l.Model.Memory().Mapped == 0 {
		t.Fatalf("Load: weights still the target's %v, embedding %s, mapped %d", l.Weights != nil, l.Model.Embed.DType, l.Model.Memory().Mapped)
	}
	if mapped, known := mappedNow(t, file); known && !mapped {
		t.Fatalf("the model does not map %s", file)
	}
	embed, head, err := l.OutputLayers(true)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	want, _, err := o.Weights.Float32("model.embed_tokens.weight")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(embed, want) || &head[0] != &embed[0] {
		t.Fatal("a bf16 target's output layers are not its embedding widened (tied: one slice)")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	o.Close()
	if mapped, known := mappedNow(t, file); known && mapped {
		t.Fatalf("%s is still mapped after Close", file)
	}

	// Sharded: each shard's matrices read in place from its own mapping,
	// the same logits bit for bit (products are computed row by row the
	// same way whichever matrices the files let the model fuse).
	sharded := testutil.CopyDir(t, dir)
	testmodel.Reshard(t, sharded, 3)
	whole, err := Load(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	parts, err := Load(sharded, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer parts.Close()
	if parts.Model.Memory().Mapped != whole.Model.Memory().Mapped {
		t.Fatalf("sharded: %d bytes read in place, unsharded %d", parts.Model.Memory().Mapped, whole.Model.Memory().Mapped)
	}
	prompt := []int{1, 403, 407, 261, 378}
	a, b := testmodel.Greedy(t, whole.Model, prompt, 20), testmodel.Greedy(t, parts.Model, prompt, 20)
	ha := testmodel.States(t, whole.Model, a, []int{whole.Model.NumLayers()})
	hb := testmodel.States(t, parts.Model, a, []int{whole.Model.NumLayers()})
	if !slices.Equal(a, b) || !slices.Equal(ha[0], hb[0]) {
		t.Fatal("the sharded bf16 checkpoint computes otherwise than the single file")
	}

	f32, err := Load(testutil.Stories260k(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f32.Close()
	f32file, _ := filepath.Abs(filepath.Join(testutil.Stories260k(), safetensors.SingleFile))
	if mapped, known := mappedNow(t, f32file); known && mapped {
		t.Fatalf("a float32 model still maps %s", f32file)
	}
}
