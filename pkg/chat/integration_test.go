package chat_test

import (
	"path/filepath"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/chat"
	"github.com/drafter-ai/drafter/pkg/tokenizer"
)

// With the real tokenizers, the tokens TokenMask selects are exactly the
// assistant turns: each run of masked tokens covers its span byte for byte
// and decodes to the content plus the end-of-turn token.
func TestTokenMaskWithRealTokenizers(t *testing.T) {
	ref := testutil.Shared(t, "reference/tokenizers")
	msgs := []chat.Message{
		{Role: "system", Content: "You are a helpful assistant."},
		{Role: "user", Content: "Hi!"},
		{Role: "assistant", Content: "Hello! How can I help? 😊"},
		{Role: "user", Content: "Tell me a joke about café cats."},
		{Role: "assistant", Content: "Why did the cat sit on the computer?\n\nTo keep an eye on the mouse."},
	}
	for _, model := range []string{"llama3", "qwen3"} {
		dir := filepath.Join(ref, model)
		tmpl, err := chat.Load(dir)
		if err != nil || tmpl == nil {
			t.Fatalf("%s: template %v %v", model, tmpl, err)
		}
		tok, err := tokenizer.LoadDir(dir)
		if err != nil {
			t.Fatalf("%s: tokenizer: %v", model, err)
		}
		text, spans, err := tmpl.AssistantSpans(msgs)
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		ids, offs := tok.EncodeOffsets(text, false)
		mask := chat.TokenMask(nil, offs, spans)
		// Group masked tokens into runs.
		var runs [][]int
		var runOffs [][2]int
		for i := range ids {
			if !mask[i] {
				continue
			}
			if i == 0 || !mask[i-1] {
				runs = append(runs, nil)
				runOffs = append(runOffs, [2]int{offs[i][0], offs[i][1]})
			}
			runs[len(runs)-1] = append(runs[len(runs)-1], ids[i])
			runOffs[len(runOffs)-1][1] = offs[i][1]
		}
		if len(runs) != len(spans) {
			t.Fatalf("%s: %d masked runs for %d spans", model, len(runs), len(spans))
		}
		for k, s := range spans {
			want := text[s[0]:s[1]]
			if runOffs[k] != s {
				t.Errorf("%s span %d: masked tokens cover %v, span is %v (%q)", model, k, runOffs[k], s, want)
			}
			if got := tok.Decode(runs[k], false); got != want {
				t.Errorf("%s span %d: masked tokens decode to %q, want %q", model, k, got, want)
			}
			last := runs[k][len(runs[k])-1]
			if id, ok := tok.TokenID(tmpl.EndOfTurn()); !ok || last != id {
				t.Errorf("%s span %d: last masked token %d is not the end-of-turn %q", model, k, last, tmpl.EndOfTurn())
			}
		}
	}
}
