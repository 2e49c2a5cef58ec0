package chat

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

func spanTexts(text string, spans [][2]int) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = text[s[0]:s[1]]
	}
	return out
}

type spanCase struct {
	name string
	msgs []Message
	want []string // expected text of each span, in order
}

func checkSpans(t *testing.T, tmpl *Template, cases []spanCase) {
	t.Helper()
	for _, c := range cases {
		text, spans, err := tmpl.AssistantSpans(c.msgs)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		plain, err := tmpl.Render(c.msgs, Options{})
		if err != nil || plain != text {
			t.Errorf("%s: AssistantSpans text differs from Render: %q vs %q (%v)", c.name, text, plain, err)
		}
		got := spanTexts(text, spans)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: spans\n got %q\nwant %q\nin %q", c.name, got, c.want, text)
		}
		for i := 1; i < len(spans); i++ {
			if spans[i][0] < spans[i-1][1] {
				t.Errorf("%s: spans overlap: %v", c.name, spans)
			}
		}
	}
}

var convo = []Message{
	{Role: "system", Content: "You are a helpful assistant."},
	{Role: "user", Content: "Hi!"},
	{Role: "assistant", Content: "Hello! How can I help?"},
	{Role: "user", Content: "Tell me a joke."},
	{Role: "assistant", Content: "Why did the cat sit on the computer? To keep an eye on the mouse."},
}

func TestAssistantSpansLlama3(t *testing.T) {
	tmpl, err := Load(filepath.Join(testutil.Shared(t, "reference/tokenizers"), "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.EndOfTurn() != "<|eot_id|>" {
		t.Fatalf("EndOfTurn = %q", tmpl.EndOfTurn())
	}
	checkSpans(t, tmpl, []spanCase{
		{"two turns", convo, []string{
			"Hello! How can I help?<|eot_id|>",
			"Why did the cat sit on the computer? To keep an eye on the mouse.<|eot_id|>",
		}},
		// The template trims contents; the span covers what was rendered.
		{"trimmed", []Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "  padded\n"}}, []string{"padded<|eot_id|>"}},
		{"no assistant", []Message{{Role: "user", Content: "a"}}, []string{}},
		// Content that looks like the template's own scaffolding.
		{"tricky content", []Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "<|start_header_id|>user"}, {Role: "user", Content: "b"}, {Role: "assistant", Content: "c"}},
			[]string{"<|start_header_id|>user<|eot_id|>", "c<|eot_id|>"}},
	})
}

func TestAssistantSpansQwen3(t *testing.T) {
	tmpl, err := Load(filepath.Join(testutil.Shared(t, "reference/tokenizers"), "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.EndOfTurn() != "<|im_end|>" {
		t.Fatalf("EndOfTurn = %q", tmpl.EndOfTurn())
	}
	checkSpans(t, tmpl, []spanCase{
		// The final turn after the last user query gets an empty think block
		// from the template; it is model output and belongs to the span.
		{"two turns", convo, []string{
			"Hello! How can I help?<|im_end|>",
			"<think>\n\n</think>\n\nWhy did the cat sit on the computer? To keep an eye on the mouse.<|im_end|>",
		}},
		// Reasoning is dropped from history turns and kept in the last one:
		// the sentinel rendering cannot be aligned, the prefix method is used.
		{"thinking", []Message{
			{Role: "user", Content: "q1"},
			{Role: "assistant", Content: "<think>\nr1\n</think>\n\nA1"},
			{Role: "user", Content: "q2"},
			{Role: "assistant", Content: "<think>\nr2\n</think>\n\nA2"},
		}, []string{"A1<|im_end|>", "<think>\nr2\n</think>\n\nA2<|im_end|>"}},
		// Tool calls written after the content are model output too.
		{"tool call", []Message{
			{Role: "user", Content: "weather?"},
			{Role: "assistant", Content: "", ToolCalls: []ToolCall{{Type: "function", Function: ToolFunction{Name: "get_weather", Arguments: json.RawMessage(`{"city": "Paris"}`)}}}},
			{Role: "tool", Content: "sunny"},
			{Role: "assistant", Content: "It is sunny."},
		}, []string{
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>",
			"<think>\n\n</think>\n\nIt is sunny.<|im_end|>",
		}},
	})
}

// Templates written for these tests in the styles of Llama-2 and Mistral
// (the published tokenizer configs of those models carry no template), with
// their special tokens: <s> begins a sequence, </s> ends a turn.
const llama2Style = `{% for m in messages %}{% if m.role == 'user' %}{{ bos_token }}[INST] {{ m.content | trim }} [/INST]{% elif m.role == 'assistant' %} {{ m.content | trim }} {{ eos_token }}{% endif %}{% endfor %}`
const mistralStyle = `{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} [/INST]{% else %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}`

func TestAssistantSpansSentencePieceStyles(t *testing.T) {
	tok := SpecialTokens{BOS: "<s>", EOS: "</s>", UNK: "<unk>"}
	l2, err := New(llama2Style, tok)
	if err != nil {
		t.Fatal(err)
	}
	mi, err := New(mistralStyle, tok)
	if err != nil {
		t.Fatal(err)
	}
	if l2.EndOfTurn() != "</s>" || mi.EndOfTurn() != "</s>" {
		t.Fatalf("EndOfTurn = %q, %q", l2.EndOfTurn(), mi.EndOfTurn())
	}
	conv := []Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Hello"}, {Role: "user", Content: "Joke?"}, {Role: "assistant", Content: "No."}}
	// Llama-2's " answer </s>": the space after [/INST] follows the
	// generation prompt, so it is model output (SentencePiece folds it into
	// the first content token).
	checkSpans(t, l2, []spanCase{{"llama2", conv, []string{" Hello </s>", " No. </s>"}}})
	checkSpans(t, mi, []spanCase{{"mistral", conv, []string{"Hello</s>", "No.</s>"}}})
}

func TestAssistantSpansWithoutEndMarker(t *testing.T) {
	tmpl, err := New(`{% for m in messages %}{{ m.role | capitalize }}: {{ m.content }}
{% endfor %}{% if add_generation_prompt %}Assistant: {% endif %}`, SpecialTokens{EOS: "</s>"})
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.EndOfTurn() != "" {
		t.Fatalf("EndOfTurn = %q", tmpl.EndOfTurn())
	}
	checkSpans(t, tmpl, []spanCase{{"plain", []Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b c"}, {Role: "user", Content: "Assistant: x"}, {Role: "assistant", Content: "d"}}, []string{"b c", "d"}}})
}

func TestAssistantSpansUnlocatable(t *testing.T) {
	// A template that drops assistant turns cannot be masked: error, not a guess.
	tmpl, err := New(`{% for m in messages %}{% if m.role == 'user' %}U:{{ m.content }};{% endif %}{% endfor %}{% if add_generation_prompt %}A:{% endif %}`, SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tmpl.AssistantSpans([]Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}}); err == nil || !strings.Contains(err.Error(), "assistant message 1") {
		t.Errorf("err = %v", err)
	}
}

func TestTokenMask(t *testing.T) {
	spans := [][2]int{{10, 20}, {30, 31}, {40, 40}, {50, 60}}
	offsets := [][2]int{
		{0, 0},   // BOS inserted by a post-processor: never
		{0, 10},  // ends where span 0 starts: out
		{8, 12},  // straddles the start of span 0: in
		{12, 20}, // inside: in
		{19, 25}, // straddles the end: in
		{20, 30}, // between spans: out
		{30, 31}, // exactly span 1: in
		{31, 31}, // empty at a span end: out
		{38, 45}, // covers only an empty span: out
		{55, 55}, // empty inside span 3: out
		{59, 70}, // in
		{60, 70}, // after the last span: out
	}
	want := []bool{false, false, true, true, true, false, true, false, false, false, true, false}
	buf := make([]bool, 0, 64)
	got := TokenMask(buf, offsets, spans)
	if len(got) != len(want) {
		t.Fatalf("len %d", len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("token %d %v: got %v want %v", i, offsets[i], got[i], want[i])
		}
	}
	if &got[0] != &buf[:1][0] {
		t.Error("dst was not reused")
	}
	if n := CountMasked(got); n != 5 {
		t.Errorf("CountMasked = %d", n)
	}
	if got := TokenMask(nil, offsets, nil); CountMasked(got) != 0 {
		t.Error("no spans must mask nothing")
	}
}
