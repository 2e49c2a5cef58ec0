package data

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/chat"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadPromptsValidFormats(t *testing.T) {
	p := writeFile(t, "p.jsonl", "\xef\xbb\xbf"+`{"prompt": "Once upon a time", "id": 7}
{"id": "a", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}

{"conversations": [{"from": "human", "value": "Q1"}, {"from": "gpt", "value": "A1"}, {"from": "human", "value": "Q2"}], "source": "x"}`+"\r\n"+
		`{"messages": [{"role": "developer", "content": "sys"}, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "name": "bob", "lang": {"z": 1, "a": 2}}]}
{"conversations": [{"role": "user", "content": "role style"}]}
`)
	ps, skipped, err := ReadPrompts(p, ReadOptions{})
	if err != nil || skipped != 0 {
		t.Fatalf("err %v skipped %d", err, skipped)
	}
	if len(ps) != 5 {
		t.Fatalf("got %d prompts", len(ps))
	}
	if ps[0].Text != "Once upon a time" || ps[0].ID != "7" || ps[0].Line != 1 || ps[0].IsChat() {
		t.Errorf("prompt 0: %+v", ps[0])
	}
	// The trailing assistant turn is dropped: the model regenerates it.
	if m := ps[1].Messages; ps[1].ID != "a" || len(m) != 2 || m[0].Role != "system" || m[1].Content != "Hi" || ps[1].Line != 2 || ps[1].Index != 1 {
		t.Errorf("prompt 1: %+v", ps[1])
	}
	if m := ps[2].Messages; ps[2].Line != 4 || len(m) != 3 || m[1].Role != "assistant" || m[1].Content != "A1" || m[2].Role != "user" {
		t.Errorf("prompt 2 (ShareGPT, CRLF): %+v", ps[2])
	}
	m := ps[3].Messages
	if len(m) != 2 || m[0].Role != "system" || m[1].Content != "ab" || m[1].Name != "bob" ||
		len(m[1].Extra) != 1 || m[1].Extra[0].Key != "lang" || string(m[1].Extra[0].Value) != `{"z": 1, "a": 2}` {
		t.Errorf("prompt 3: %+v", ps[3])
	}
	if m := ps[4].Messages; len(m) != 1 || m[0].Role != "user" || m[0].Content != "role style" {
		t.Errorf("prompt 4: %+v", ps[4])
	}
	for i, p := range ps {
		if p.Index != i {
			t.Errorf("prompt %d has Index %d", i, p.Index)
		}
	}
}

func TestReadPromptsTxt(t *testing.T) {
	p := writeFile(t, "p.txt", "Once upon a time\n\n  \nOne day, a dog\r\nlast line without newline")
	ps, _, err := ReadPrompts(p, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		text string
		line int
	}{{"Once upon a time", 1}, {"One day, a dog", 4}, {"last line without newline", 5}}
	if len(ps) != len(want) {
		t.Fatalf("got %d prompts: %+v", len(ps), ps)
	}
	for i, w := range want {
		if ps[i].Text != w.text || ps[i].Line != w.line || ps[i].IsChat() {
			t.Errorf("prompt %d: %+v, want %q at line %d", i, ps[i], w.text, w.line)
		}
	}
}

// Each malformed line is reported with file:line and what was expected.
func TestReadPromptsMalformed(t *testing.T) {
	cases := []struct{ name, line, want string }{
		{"invalid json", `{"prompt": "a"`, "invalid JSON"},
		{"not an object", `["a"]`, "expected a JSON object"},
		{"no known key", `{"text": "a"}`, `expected {"prompt": "..."}, {"messages": [...]} or {"conversations": [...]}; found keys: "text"`},
		{"two keys", `{"prompt": "a", "messages": []}`, `has both "prompt" and "messages"`},
		{"empty prompt", `{"prompt": "  "}`, `"prompt": empty`},
		{"prompt not string", `{"prompt": 3}`, `"prompt": expected a string, got a number`},
		{"messages not list", `{"messages": {"role": "user"}}`, `"messages": expected a list of messages, got an object`},
		{"empty messages", `{"messages": []}`, `"messages": empty list`},
		{"unknown role", `{"messages": [{"role": "bot", "content": "x"}]}`, `messages[0]: unknown role "bot"; expected system, user, assistant or tool`},
		{"role not string", `{"messages": [{"role": 1, "content": "x"}]}`, `messages[0]: "role": expected a string, got a number`},
		{"content type", `{"messages": [{"role": "user", "content": 5}]}`, `messages[0]: "content": expected a string, got a number`},
		{"image part", `{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, `only {"type": "text", "text": ...} parts are supported`},
		{"missing content", `{"messages": [{"role": "user"}]}`, `messages[0]: missing "content"`},
		{"empty user", `{"messages": [{"role": "user", "content": ""}]}`, `messages[0]: user turn with empty content`},
		{"message not object", `{"messages": ["hi"]}`, `messages[0]: expected an object, got a string`},
		{"no user turn", `{"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}`, `"messages": the conversation has no user turn`},
		{"sharegpt unknown from", `{"conversations": [{"from": "robot", "value": "x"}]}`, `conversations[0]: unknown "from" "robot"`},
		{"sharegpt value type", `{"conversations": [{"from": "human", "value": ["x"]}]}`, `conversations[0]: "value": expected a string, got a list`},
		{"sharegpt no value", `{"conversations": [{"from": "human"}]}`, `conversations[0]: missing "value"`},
		{"bad id", `{"prompt": "a", "id": [1]}`, `"id": expected a string or a number, got a list`},
		{"tool calls on user", `{"messages": [{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}]}`, `"tool_calls" on a user turn`},
		{"bad tool calls", `{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [{"type": "function"}]}, {"role": "user", "content": "y"}]}`, `"tool_calls"[0]: expected "function"`},
		{"tools not list", `{"tools": {"a": 1}, "messages": [{"role": "user", "content": "x"}]}`, `"tools": expected a list of tool definitions, got an object`},
		{"tools on prompt", `{"tools": [{"a": 1}], "prompt": "x"}`, `"tools" needs "messages"`},
		{"null content", `{"messages": [{"role": "user", "content": null}]}`, `"content" is null`},
	}
	for _, c := range cases {
		// The bad record sits on line 3, after a valid line and a blank one.
		p := writeFile(t, "bad.jsonl", "{\"prompt\": \"ok\"}\n\n"+c.line+"\n{\"prompt\": \"ok2\"}\n")
		_, _, err := ReadPrompts(p, ReadOptions{})
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		prefix := "data: " + p + ":3: "
		if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %q\nwant prefix %q containing %q", c.name, err, prefix, c.want)
		}
		ps, skipped, err := ReadPrompts(p, ReadOptions{SkipInvalid: true})
		if err != nil || skipped != 1 || len(ps) != 2 || ps[1].Text != "ok2" || ps[1].Line != 4 || ps[1].Index != 1 {
			t.Errorf("%s with SkipInvalid: %v, skipped %d, %+v", c.name, err, skipped, ps)
		}
	}
}

func TestSkipInvalidCountsAndLongLines(t *testing.T) {
	long := `{"prompt": "` + strings.Repeat("x", 5000) + `"}`
	p := writeFile(t, "m.jsonl", strings.Join([]string{
		`{"prompt": "a"}`, `nope`, long, `{"messages": 1}`, `{"prompt": "b"}`, `{}`,
	}, "\n"))
	ps, skipped, err := ReadPrompts(p, ReadOptions{SkipInvalid: true, MaxLineBytes: 1000})
	if err != nil || skipped != 4 || len(ps) != 2 || ps[1].Line != 5 {
		t.Fatalf("err %v skipped %d prompts %+v", err, skipped, ps)
	}
	if _, _, err := ReadPrompts(p, ReadOptions{MaxLineBytes: 1000}); err == nil || !strings.Contains(err.Error(), ":2: ") {
		t.Errorf("first error should be line 2: %v", err)
	}
	// With the limit raised the long line is a valid prompt.
	ps, skipped, err = ReadPrompts(p, ReadOptions{SkipInvalid: true})
	if err != nil || skipped != 3 || len(ps) != 3 || len(ps[1].Text) != 5000 {
		t.Fatalf("err %v skipped %d n %d", err, skipped, len(ps))
	}
	p2 := writeFile(t, "l.jsonl", `{"prompt": "a"}`+"\n"+long+"\n")
	if _, _, err := ReadPrompts(p2, ReadOptions{MaxLineBytes: 1000}); err == nil || !strings.Contains(err.Error(), "l.jsonl:2: line longer than 1000 bytes") {
		t.Errorf("long line: %v", err)
	}
	// The limit is exact: 20 bytes pass, 21 do not, with or without "\r\n".
	for _, end := range []string{"", "\n", "\r\n"} {
		sep := "\r\n"
		if end == "\n" {
			sep = "\n"
		}
		p3 := writeFile(t, "e.txt", strings.Repeat("y", 20)+sep+strings.Repeat("z", 21)+end)
		ps, skipped, err := ReadPrompts(p3, ReadOptions{SkipInvalid: true, MaxLineBytes: 20})
		if err != nil || skipped != 1 || len(ps) != 1 || len(ps[0].Text) != 20 {
			t.Errorf("limit with %q: %v skipped %d %+v", end, err, skipped, ps)
		}
	}
	if _, _, err := ReadPrompts(filepath.Join(t.TempDir(), "missing.jsonl"), ReadOptions{}); err == nil {
		t.Error("missing file: no error")
	}
}

func TestReadConversations(t *testing.T) {
	p := writeFile(t, "c.jsonl", `{"prompt": "Once", "response": " upon a time."}
{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
{"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}, {"from": "human", "value": "more"}]}
{"messages": [{"role": "user", "content": "w?"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": {"c": "P"}}}]}, {"role": "tool", "content": "sun", "tool_call_id": "1"}, {"role": "assistant", "content": "Sunny."}]}
`)
	cs, skipped, err := ReadConversations(p, ReadOptions{})
	if err != nil || skipped != 0 || len(cs) != 4 {
		t.Fatalf("err %v skipped %d n %d", err, skipped, len(cs))
	}
	if cs[0].IsChat() || cs[0].Prompt != "Once" || cs[0].Response != " upon a time." {
		t.Errorf("pair: %+v", cs[0])
	}
	if len(cs[1].Messages) != 2 || cs[1].Messages[1].Role != "assistant" {
		t.Errorf("messages: %+v", cs[1])
	}
	if len(cs[2].Messages) != 4 || cs[2].Messages[2].Content != "A" || cs[2].Line != 3 {
		t.Errorf("sharegpt: %+v", cs[2])
	}
	if tc := cs[3].Messages[1].ToolCalls; len(tc) != 1 || tc[0].Function.Name != "f" || string(tc[0].Function.Arguments) != `{"c": "P"}` || cs[3].Messages[2].ToolCallID != "1" {
		t.Errorf("tool calls: %+v", cs[3])
	}

	for _, c := range []struct{ name, line, want string }{
		{"prompt only", `{"prompt": "a"}`, `"prompt" needs a "response"`},
		{"empty response", `{"prompt": "a", "response": ""}`, `"response": empty`},
		{"no assistant", `{"messages": [{"role": "user", "content": "Hi"}]}`, `no assistant turn`},
		{"empty assistant", `{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " "}]}`, `assistant turn with empty content`},
	} {
		p := writeFile(t, "bad.jsonl", "\n"+c.line+"\n")
		_, _, err := ReadConversations(p, ReadOptions{})
		if err == nil || !strings.HasPrefix(err.Error(), "data: "+p+":2: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
		if cs, skipped, err := ReadConversations(p, ReadOptions{SkipInvalid: true}); err != nil || skipped != 1 || len(cs) != 0 {
			t.Errorf("%s skip: %v %d %d", c.name, err, skipped, len(cs))
		}
	}
	if _, _, err := ReadConversations(writeFile(t, "c.txt", "a\n"), ReadOptions{}); err == nil {
		t.Error(".txt conversations: no error")
	}
}

func TestPromptHash(t *testing.T) {
	content := "{\"prompt\": \"a\"}\n"
	p := writeFile(t, "h.jsonl", content)
	got, err := PromptHash(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(content))
	if got != hex.EncodeToString(sum[:]) {
		t.Errorf("hash %s", got)
	}
}

func TestRender(t *testing.T) {
	tmpl, err := chat.New(`{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}`, chat.SpecialTokens{BOS: "<s>", EOS: "</s>"})
	if err != nil {
		t.Fatal(err)
	}
	raw := Prompt{Text: "Once upon a time"}
	conv := Prompt{Line: 9, Messages: []chat.Message{{Role: "user", Content: "Hi"}}}
	if s, err := Render(raw, tmpl); err != nil || s != "Once upon a time" {
		t.Errorf("raw with template: %q %v", s, err)
	}
	if s, err := Render(raw, nil); err != nil || s != "Once upon a time" {
		t.Errorf("raw without template: %q %v", s, err)
	}
	if s, err := Render(conv, tmpl); err != nil || s != "<s><user>Hi</s><assistant>" {
		t.Errorf("chat: %q %v", s, err)
	}
	// A record's tools reach the template, key order kept; options win.
	toolTmpl, err := chat.New(`{% for t in tools %}{{ t | tojson }};{% endfor %}{{ messages[0].content }}`, chat.SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, "tools.jsonl", `{"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "messages": [{"role": "user", "content": "Hi"}]}`+"\n")
	ps, _, err := ReadPrompts(p, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Render(ps[0], toolTmpl); err != nil || s != `{"type": "function", "function": {"name": "f", "parameters": {}}};Hi` {
		t.Errorf("tools: %q %v", s, err)
	}
	if s, err := RenderWith(ps[0], toolTmpl, chat.Options{Tools: []any{json.RawMessage(`{"b": 2}`)}}); err != nil || s != `{"b": 2};Hi` {
		t.Errorf("tools from options: %q %v", s, err)
	}
	if _, err := Render(conv, nil); err == nil || !strings.Contains(err.Error(), "line 9") || !strings.Contains(err.Error(), `use {"prompt": ...} lines`) {
		t.Errorf("chat without template: %v", err)
	}

	text, spans, err := RenderConversation(Conversation{Prompt: "Once", Response: " upon"}, nil, chat.Options{})
	if err != nil || text != "Once upon" || len(spans) != 1 || text[spans[0][0]:spans[0][1]] != " upon" {
		t.Errorf("pair: %q %v %v", text, spans, err)
	}
	c := Conversation{Messages: []chat.Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Yo"}}}
	text, spans, err = RenderConversation(c, tmpl, chat.Options{})
	if err != nil || text != "<s><user>Hi</s><assistant>Yo</s>" || len(spans) != 1 || text[spans[0][0]:spans[0][1]] != "Yo</s>" {
		t.Errorf("chat conversation: %q %v %v", text, spans, err)
	}
	if _, _, err := RenderConversation(c, nil, chat.Options{}); err == nil {
		t.Error("chat conversation without template: no error")
	}
}

// A --chat file that is not JSON at all is called that, not "null" (its
// first letter, n, is where a JSON null would start).
func TestReadMessagesFileNotJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chat.json")
	if err := os.WriteFile(path, []byte("not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadMessagesFile(path, ReadOptions{})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "expected a list of messages, got text that is not valid JSON") {
		t.Fatalf("ReadMessagesFile of a non-JSON file: %v", err)
	}
}
