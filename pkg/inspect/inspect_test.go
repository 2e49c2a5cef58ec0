package inspect

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/chat"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

func TestInspectStories260k(t *testing.T) {
	r, err := Inspect(testutil.Stories260k(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Geometry from the bundled config.json; parameters counted by hand:
	// embed 512*64 + 5 layers * (2*64 norms + q 64*64 + k,v 2*32*64 + o 64*64 + mlp 3*64*172) + norm 64.
	want := int64(512*64 + 5*(2*64+64*64+2*32*64+64*64+3*64*172) + 64)
	if r.Parameters != want {
		t.Errorf("parameters %d, want %d", r.Parameters, want)
	}
	if r.Layers != 5 || r.HiddenSize != 64 || r.VocabSize != 512 || !r.TieWordEmbeddings || r.ChatTemplate {
		t.Errorf("unexpected report %+v", r)
	}
	if r.EAGLE3Layers != [3]int{1, 3, 5} {
		t.Errorf("eagle3 layers %v, want [1 3 5] for L=5 (the engines' 2, L/2, L-3 repeats layer 2)", r.EAGLE3Layers)
	}
	if r.TokenizerFamily != "sentencepiece" || r.DTypes["F32"] == 0 || len(r.Fingerprint) != 64 {
		t.Errorf("tokenizer %q dtypes %v fingerprint %q", r.TokenizerFamily, r.DTypes, r.Fingerprint)
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"llama", "fingerprint:", r.Fingerprint, "none (raw text prompts)"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, buf.String())
		}
	}
	// Every weight as float32: the file's bytes less its header.
	if r.WeightBytes["f32"] != 4*want || len(r.WeightBytes) != 1 || r.WeightsMapped != 0 || line(buf.String(), "weights:") != "weights:           1.04 MB f32" {
		t.Errorf("weights %v (mapped %d), text %q", r.WeightBytes, r.WeightsMapped, line(buf.String(), "weights:"))
	}
}

// TestInspectBF16: the model converted to bf16 shows its matrices held as
// bf16, read in place from the file, and its norms as float32.
func TestInspectBF16(t *testing.T) {
	dir := testutil.CopyDir(t, testutil.Stories260k())
	testmodel.Convert(t, dir, safetensors.BF16)
	r, err := Inspect(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The embedding (tied lm_head) and 5 layers' projections; 11 norms of 64.
	mats := int64(512*64 + 5*(64*64+2*32*64+64*64+3*64*172))
	if r.WeightBytes["bf16"] != 2*mats || r.WeightBytes["f32"] != 4*11*64 || r.WeightsMapped != 2*mats || r.DTypes["BF16"] != 47 {
		t.Fatalf("weights %v (mapped %d), dtypes %v", r.WeightBytes, r.WeightsMapped, r.DTypes)
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if got := line(buf.String(), "weights:"); got != "weights:           518.66 kB bf16 (mapped), 2.82 kB f32" {
		t.Errorf("text %q", got)
	}
}

// TestInspectBodyFineTune: a copy of the model whose decoder weights (all but
// the norms) are scaled by 0.9 shows another fingerprint, and the report says
// how it was obtained: hashed the first time, from the cache the next.
func TestInspectBodyFineTune(t *testing.T) {
	orig := testutil.Stories260k()
	tuned := testutil.CopyDir(t, orig)
	testmodel.ScaleBody(t, tuned, 0.9)
	cache := filecache.New(t.TempDir())
	a, err := Inspect(orig, cache)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Inspect(tuned, cache)
	if err != nil {
		t.Fatal(err)
	}
	if a.Fingerprint == b.Fingerprint {
		t.Fatalf("the body-tuned copy shows the original's fingerprint %s", a.Fingerprint)
	}
	var text bytes.Buffer
	b.WriteText(&text)
	if !strings.Contains(text.String(), b.Fingerprint) || !strings.Contains(line(text.String(), "fingerprinted:"), "hashed 47 tensors") ||
		!strings.Contains(text.String(), "GB/s") {
		t.Errorf("text report:\n%s", text.String())
	}
	again, err := Inspect(tuned, cache)
	if err != nil {
		t.Fatal(err)
	}
	text.Reset()
	again.WriteText(&text)
	if again.Fingerprint != b.Fingerprint || !strings.Contains(line(text.String(), "fingerprinted:"), "from cache") {
		t.Errorf("second inspect:\n%s", text.String())
	}
	js, _ := json.Marshal(again)
	var back struct {
		Fingerprint    string `json:"fingerprint"`
		Fingerprinting struct {
			TensorBytes int64  `json:"tensor_bytes"`
			HashedBytes *int64 `json:"hashed_bytes"`
			FromCache   bool   `json:"from_cache"`
		} `json:"fingerprinting"`
	}
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	f := back.Fingerprinting
	if back.Fingerprint != b.Fingerprint || !f.FromCache || f.HashedBytes == nil || *f.HashedBytes != 0 || f.TensorBytes != again.Fingerprinting.TensorBytes || f.TensorBytes == 0 {
		t.Errorf("--json: %s", js)
	}
}

// line returns the line of text that starts with prefix.
func line(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func TestInspectMissingModel(t *testing.T) {
	_, err := Inspect(t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "config.json is missing") {
		t.Fatalf("err = %v, want a missing config.json error", err)
	}
}

func TestTokenizeChatSpansDecodeToAssistantContent(t *testing.T) {
	tok, tmpl, err := Tokenizer(testutil.Shared(t, "reference/tokenizers/qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	msgs := []chat.Message{{Role: "user", Content: "Hi there"}, {Role: "assistant", Content: "Hello! How can I help?"}}
	out, err := TokenizeChat(tok, tmpl, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.AssistantSpans) != 1 {
		t.Fatalf("spans %v, want one", out.AssistantSpans)
	}
	s := out.AssistantSpans[0]
	got := tok.Decode(out.IDs[s[0]:s[1]], false)
	if !strings.Contains(got, "Hello! How can I help?") || !strings.HasSuffix(got, "<|im_end|>") || strings.Contains(got, "assistant\n") {
		t.Fatalf("assistant span decodes to %q", got)
	}
}

// TestInspectSlidingWindowContext: a Mistral whose sliding_window is below
// max_position_embeddings runs the whole context, and shows its window on
// every layer.
func TestInspectSlidingWindowContext(t *testing.T) {
	dir := testutil.CopyDir(t, testutil.Stories260k())
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer(`"LlamaForCausalLM"`, `"MistralForCausalLM"`,
		`"model_type": "llama",`, `"model_type": "mistral", "sliding_window": 64,`).Replace(string(b))
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Inspect(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.ModelType != "mistral" || r.MaxPositions != 2048 || r.Context != 2048 || r.SlidingWindow != 64 || len(r.SlidingLayers) != r.Layers {
		t.Fatalf("model_type %s, max_position_embeddings %d, context %d, window %d on %v; want mistral, 2048, 2048, 64 on every layer",
			r.ModelType, r.MaxPositions, r.Context, r.SlidingWindow, r.SlidingLayers)
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "context:           2048\n") || !strings.Contains(buf.String(), "; sliding window 64 on every layer") {
		t.Fatalf("text report:\n%s", buf.String())
	}
}
