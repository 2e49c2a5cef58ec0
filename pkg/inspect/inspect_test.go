package inspect

import (
	"bytes"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/chat"
)

func TestInspectStories260k(t *testing.T) {
	r, err := Inspect("../../models/stories260k", nil)
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
}

func TestInspectMissingModel(t *testing.T) {
	_, err := Inspect(t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "config.json is missing") {
		t.Fatalf("err = %v, want a missing config.json error", err)
	}
}

func TestTokenizeChatSpansDecodeToAssistantContent(t *testing.T) {
	tok, tmpl, err := Tokenizer("../../../shared/reference/tokenizers/qwen3")
	if err != nil {
		t.Skipf("shared reference tokenizers not available: %v", err)
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
