package chat

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// randomContent draws a content string from pieces that stress the span
// search: whitespace the templates trim, the templates' own markers and
// multi-byte UTF-8.
func randomContent(state *uint64) string {
	pieces := []string{"a", "Hello", " ", "\n", "\t", "world.", "<|eot_id|>", "<|im_end|>", "<|start_header_id|>", "<", "|", "é", "猫", "assistant", "\n\n"}
	next := func() uint64 { // xorshift64
		*state ^= *state << 13
		*state ^= *state >> 7
		*state ^= *state << 17
		return *state
	}
	n := 1 + int(next()%8)
	var b strings.Builder
	for range n {
		b.WriteString(pieces[next()%uint64(len(pieces))])
	}
	if strings.TrimSpace(b.String()) == "" {
		b.WriteString("x")
	}
	return b.String()
}

// For random multi-turn conversations, each span is exactly what the
// template renders for the content (derived here from the template's rules,
// not from the implementation) plus the end-of-turn marker.
func TestAssistantSpansRandomConversations(t *testing.T) {
	dir := testutil.Shared(t, "reference/tokenizers")
	llama3, err := Load(filepath.Join(dir, "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	qwen3, err := Load(filepath.Join(dir, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	state := uint64(0x9e3779b97f4a7c15)
	for iter := 0; iter < 200; iter++ {
		turns := 1 + iter%3
		var msgs []Message
		if iter%2 == 0 {
			msgs = append(msgs, Message{Role: "system", Content: "sys " + randomContent(&state)})
		}
		var contents []string
		for k := 0; k < turns; k++ {
			msgs = append(msgs, Message{Role: "user", Content: "u" + randomContent(&state)})
			c := randomContent(&state)
			contents = append(contents, c)
			msgs = append(msgs, Message{Role: "assistant", Content: c})
		}
		// Llama-3 trims every content.
		text, spans, err := llama3.AssistantSpans(msgs)
		if err != nil {
			t.Fatalf("llama3 iter %d: %v", iter, err)
		}
		for k, c := range contents {
			want := strings.TrimSpace(c) + "<|eot_id|>"
			if k >= len(spans) || text[spans[k][0]:spans[k][1]] != want {
				t.Fatalf("llama3 iter %d turn %d: spans %v of %q, want %q", iter, k, spans, text, want)
			}
		}
		// Qwen3 keeps history contents as they are; the final turn (after the
		// last user query) gets an empty think block and loses leading
		// newlines.
		text, spans, err = qwen3.AssistantSpans(msgs)
		if err != nil {
			t.Fatalf("qwen3 iter %d: %v", iter, err)
		}
		for k, c := range contents {
			want := c + "<|im_end|>"
			if k == len(contents)-1 {
				want = "<think>\n\n</think>\n\n" + strings.TrimLeft(c, "\n") + "<|im_end|>"
			}
			if k >= len(spans) || text[spans[k][0]:spans[k][1]] != want {
				t.Fatalf("qwen3 iter %d turn %d: spans %v of %q, want %q", iter, k, spans, text, want)
			}
		}
	}
}
