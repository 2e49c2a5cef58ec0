package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/internal/testutil"
)

type refCase struct {
	Messages            []map[string]any `json:"messages"`
	AddGenerationPrompt bool             `json:"add_generation_prompt"`
	Rendered            string           `json:"rendered"`
}

func TestRenderMatchesReference(t *testing.T) {
	dir := testutil.Shared(t, "reference/tokenizers")
	raw, err := os.ReadFile(filepath.Join(dir, "chat_template_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Models map[string][]refCase `json:"models"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Models) == 0 {
		t.Fatal("no reference cases")
	}
	n := 0
	for model, cases := range ref.Models {
		tmpl, err := Load(filepath.Join(dir, model))
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		if tmpl == nil {
			t.Fatalf("%s: reference has renderings but Load found no template", model)
		}
		for i, c := range cases {
			msgs := make([]Message, len(c.Messages))
			for j, m := range c.Messages {
				msgs[j] = Message{Role: m["role"].(string), Content: m["content"].(string)}
			}
			got, err := tmpl.Render(msgs, Options{AddGenerationPrompt: c.AddGenerationPrompt})
			if err != nil {
				t.Fatalf("%s case %d: %v", model, i, err)
			}
			if got != c.Rendered {
				t.Errorf("%s case %d:\n got %q\nwant %q", model, i, got, c.Rendered)
			}
			n++
		}
	}
	t.Logf("%d reference renderings matched", n)
}

func TestLoadNoTemplate(t *testing.T) {
	for _, dir := range []string{
		filepath.Join("..", "..", "models", "stories260k"),
		t.TempDir(), // no tokenizer_config.json at all
	} {
		tmpl, err := Load(dir)
		if err != nil || tmpl != nil {
			t.Errorf("Load(%s) = %v, %v; want nil, nil", dir, tmpl, err)
		}
	}
	// The reference Mistral and Llama-2 configs carry no template either.
	ref := testutil.Shared(t, "reference/tokenizers")
	for _, m := range []string{"mistral", "llama2"} {
		tmpl, err := Load(filepath.Join(ref, m))
		if err != nil || tmpl != nil {
			t.Errorf("Load(%s) = %v, %v; want nil, nil", m, tmpl, err)
		}
	}
}

func writeConfig(t *testing.T, cfg string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadNamedTemplatesAndAddedTokens(t *testing.T) {
	dir := writeConfig(t, `{
	  "bos_token": {"content": "<s>", "lstrip": false, "special": true},
	  "eos_token": "</s>",
	  "pad_token": null,
	  "chat_template": [
	    {"name": "default", "template": "D{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ eos_token }}{{ pad_token is defined }}"},
	    {"name": "tool_use", "template": "T{% for x in tools %}{{ x | tojson }}{% endfor %}"},
	    {"name": "rag", "template": "R{{ documents is none }}{{ tools is none }}"}
	  ]}`)
	tmpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "user", Content: "hi"}}
	check := func(opt Options, want string) {
		t.Helper()
		got, err := tmpl.Render(msgs, opt)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("got %q want %q", got, want)
		}
	}
	check(Options{}, "D<s>[user:hi]</s>False")
	// Tools keep their key order when given as raw JSON; the tool_use
	// template is picked automatically.
	check(Options{Tools: []any{json.RawMessage(`{"type": "function", "b": 1, "a": [1.5, "x<y"]}`)}},
		`T{"type": "function", "b": 1, "a": [1.5, "x<y"]}`)
	check(Options{Name: "rag"}, "RTrueTrue")
	if _, err := tmpl.Render(msgs, Options{Name: "nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown template name: err = %v", err)
	}
	if got := tmpl.Names(); strings.Join(got, ",") != "default,rag,tool_use" {
		t.Errorf("Names() = %v", got)
	}
}

func TestLoadErrors(t *testing.T) {
	for name, cfg := range map[string]string{
		"bad json":      `{"chat_template": `,
		"bad template":  `{"chat_template": "{% for m in messages %}"}`,
		"bad list":      `{"chat_template": [{"name": "default"}]}`,
		"bad token":     `{"chat_template": "x", "eos_token": 3}`,
		"template type": `{"chat_template": 7}`,
	} {
		if _, err := Load(writeConfig(t, cfg)); err == nil {
			t.Errorf("%s: no error", name)
		} else if !strings.Contains(err.Error(), "tokenizer_config.json") {
			t.Errorf("%s: error does not name the file: %v", name, err)
		}
	}
}

func TestChatTemplateJinjaFileWins(t *testing.T) {
	dir := writeConfig(t, `{"chat_template": "config", "eos_token": "</s>"}`)
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("file{{ eos_token }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(nil, Options{})
	if err != nil || got != "file</s>" {
		t.Errorf("got %q, %v", got, err)
	}
}

func TestMessageFieldsAndHelpers(t *testing.T) {
	tmpl, err := New(`{% for m in messages %}{{ m | tojson }}|{% for c in m.tool_calls or [] %}{{ c.function.arguments is string }}{% endfor %}{{ "\n" }}{% endfor %}{{ strftime_now("%d %b %Y|%-d|%j") }}`, SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{
		{Role: "assistant", Content: "", ToolCalls: []ToolCall{
			{ID: "c1", Type: "function", Function: ToolFunction{Name: "f", Arguments: json.RawMessage(`{"z": 1, "a": 2}`)}},
			{Function: ToolFunction{Name: "g", Arguments: json.RawMessage(`"{\"q\": 1}"`)}},
		}},
		{Role: "tool", Content: "42", ToolCallID: "c1", Name: "f", Extra: []Field{{Key: "zz", Value: json.RawMessage(`{"y": null, "b": true}`)}}},
	}
	got, err := tmpl.Render(msgs, Options{Now: time.Date(2025, 3, 7, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": 2}}}, {"function": {"name": "g", "arguments": "{\"q\": 1}"}}]}|FalseTrue
{"role": "tool", "content": "42", "name": "f", "tool_call_id": "c1", "zz": {"y": null, "b": true}}|
07 Mar 2025|7|066`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestRaiseException(t *testing.T) {
	tmpl, err := New(`{% if messages[0].role != 'user' %}{{ raise_exception('first message must be user') }}{% endif %}ok`, SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render([]Message{{Role: "assistant", Content: "x"}}, Options{})
	if err == nil || !strings.HasSuffix(err.Error(), ": the chat template rejected the conversation: first message must be user") {
		t.Errorf("err = %v", err)
	}
}
