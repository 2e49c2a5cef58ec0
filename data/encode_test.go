package data

import (
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/chat"
	"github.com/drafter-ai/drafter/pkg/tokenizer"
)

// TestEncode: raw text gets the post-processor's BOS; a conversation is
// rendered with the generation prompt and tokenized without special tokens
// (the template writes BOS itself, once); a conversation for a model
// without a chat template is refused naming the line.
func TestEncode(t *testing.T) {
	tok, err := tokenizer.LoadDir(testutil.Stories260k())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := Encode(Prompt{Text: "Once upon a time"}, tok, nil)
	if err != nil || !slices.Equal(raw, tok.Encode("Once upon a time", true)) || raw[0] != 1 {
		t.Fatalf("raw prompt: %v, %v", raw, err)
	}
	tmpl, err := chat.New(`{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %} Once{% endif %}`, chat.SpecialTokens{BOS: "<s>"})
	if err != nil {
		t.Fatal(err)
	}
	conv := Prompt{Line: 7, Messages: []chat.Message{{Role: "user", Content: "Lily saw a dog"}}}
	ids, err := Encode(conv, tok, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if want := tok.Encode("<s>Lily saw a dog Once", false); !slices.Equal(ids, want) || ids[0] != 1 || ids[1] == 1 {
		t.Fatalf("conversation: %v, want %v with one BOS", ids, want)
	}
	if _, err := Encode(conv, tok, nil); err == nil || !strings.Contains(err.Error(), "line 7") || !strings.Contains(err.Error(), "no chat template") {
		t.Fatalf("no template: %v", err)
	}
}
