package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// TestModelFlagMistakes: flag values that only the model can refuse are still
// command-line mistakes (exit 2), in the user's words.
func TestModelFlagMistakes(t *testing.T) {
	tmp := t.TempDir()
	conv := filepath.Join(tmp, "c.json")
	if err := os.WriteFile(conv, []byte(`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	prompts := filepath.Join(tmp, "p.jsonl")
	if err := os.WriteFile(prompts, []byte(`{"prompt": "Once upon a time"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args   []string
		want   string
		reject []string
	}{
		{[]string{"generate", "--model", testutil.Stories260k(), "--prompt", "hi", "--chat"}, "--chat: " + testutil.Stories260k() + " has no chat template", []string{"line 0", "{\"prompt\""}},
		{[]string{"tokenize", "--model", testutil.Stories260k(), "--chat", conv}, "--chat: " + testutil.Stories260k() + " has no chat template", []string{"inspect:"}},
		{[]string{"generate", "--model", testutil.Stories260k(), "--prompt", "hi", "--max-new-tokens", "5000"}, "--max-new-tokens 5000 leaves no room for a prompt", nil},
		{[]string{"distill", "--model", testutil.Stories260k(), "--prompts", prompts, "--out", filepath.Join(tmp, "d"), "--max-new-tokens", "2048"}, "--max-new-tokens 2048 leaves no room", []string{"generate:"}},
		{[]string{"distill", "--model", testutil.Stories260k(), "--prompts", prompts, "--out", filepath.Join(tmp, "d"), "--layers", "2,9"}, "--layers: layer 9 is not a hidden_states index of a 5-layer model (0..5)", []string{"distill:"}},
		{[]string{"capture", "--model", testutil.Stories260k(), "--conversations", prompts, "--out", filepath.Join(tmp, "c"), "--layers", "6"}, "--layers: layer 6", []string{"distill:"}},
	} {
		r := runCLI(t, nil, c.args...)
		if r.code != exitUsage || !strings.Contains(r.msg, c.want) {
			t.Errorf("drafter %s: exit %d (%s); want %d and %q", strings.Join(c.args, " "), r.code, r.msg, exitUsage, c.want)
		}
		for _, bad := range c.reject {
			if strings.Contains(r.msg, bad) {
				t.Errorf("drafter %s: message %q mentions %q", strings.Join(c.args, " "), r.msg, bad)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(tmp, "d")); err == nil {
		t.Error("distill created --out before refusing its flags")
	}
}

// TestCapturePromptsOnly: a prompts-only file given to capture is refused in
// the user's words (drafter distill), not by an internal function's name.
func TestCapturePromptsOnly(t *testing.T) {
	tmp := t.TempDir()
	f := filepath.Join(tmp, "chats.jsonl")
	if err := os.WriteFile(f, []byte(`{"messages": [{"role": "user", "content": "hi"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, nil, "capture", "--model", testutil.Stories260k(), "--conversations", f, "--out", filepath.Join(tmp, "out"), "--quiet")
	if r.code != exitError || !strings.Contains(r.msg, "no assistant turn") || !strings.Contains(r.msg, "drafter distill") || strings.Contains(r.msg, "ReadPrompts") {
		t.Errorf("capture of prompts only: exit %d: %s", r.code, r.msg)
	}
}

// TestSummaryJSON: distill and capture --json print the run's summary as one
// JSON object on stdout; the progress stays on stderr.
func TestSummaryJSON(t *testing.T) {
	tmp := t.TempDir()
	prompts := filepath.Join(tmp, "p.jsonl")
	pairs := filepath.Join(tmp, "pairs.jsonl")
	if err := os.WriteFile(prompts, []byte("{\"prompt\": \"Once upon a time\"}\n{\"prompt\": \"The cat\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pairs, []byte(`{"prompt": "Once upon a time", "response": " there was a cat."}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args  []string
		count string
		n     float64
	}{
		{[]string{"distill", "--model", testutil.Stories260k(), "--prompts", prompts, "--out", filepath.Join(tmp, "d"), "--max-new-tokens", "8", "--samples-per-prompt", "2", "--json"}, "prompts", 2},
		{[]string{"capture", "--model", testutil.Stories260k(), "--conversations", pairs, "--out", filepath.Join(tmp, "c"), "--json"}, "conversations", 1},
	} {
		r := runCLI(t, nil, c.args...)
		if r.code != exitOK {
			t.Fatalf("drafter %s: exit %d: %s", strings.Join(c.args, " "), r.code, r.msg)
		}
		var s map[string]any
		dec := json.NewDecoder(strings.NewReader(r.out))
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("%s --json: stdout is not a JSON object: %v\n%s", c.args[0], err, r.out)
		}
		if dec.More() {
			t.Errorf("%s --json: more than one JSON value on stdout:\n%s", c.args[0], r.out)
		}
		m, _ := s["manifest"].(map[string]any)
		samples := c.n
		if c.args[0] == "distill" {
			samples *= 2
		}
		if s["command"] != c.args[0] || s[c.count] != c.n || s["samples"] != samples || m == nil || m["complete"] != true {
			t.Errorf("%s --json summary: %v", c.args[0], s)
		}
		if !strings.Contains(r.stderr, c.args[0]+":") {
			t.Errorf("%s --json: no progress or summary on stderr: %q", c.args[0], r.stderr)
		}
	}
}

// TestTokenizeChatHelp: --chat takes a file holding the conversation, and its
// help says so (it said "JSON list of messages", and a conversation passed
// inline was then reported as a missing file, exit 1); JSON given in place
// of the file name is a command-line mistake that says what to do.
func TestTokenizeChatHelp(t *testing.T) {
	r := runCLI(t, nil, "tokenize", "--help")
	if r.code != exitOK {
		t.Fatalf("tokenize --help: exit %d: %s", r.code, r.msg)
	}
	var line string
	for _, l := range strings.Split(r.out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "--chat") {
			line = l
		}
	}
	for _, want := range []string{"--chat FILE", "a file", "not the JSON itself"} {
		if !strings.Contains(line, want) {
			t.Errorf("tokenize --help's --chat line %q does not say %q", line, want)
		}
	}
	if strings.Contains(line, "--chat string") {
		t.Errorf("tokenize --help's --chat line %q calls the value a string", line)
	}
	inline := `[{"role": "user", "content": "hi"}]`
	r = runCLI(t, nil, "tokenize", "--model", testutil.Stories260k(), "--chat", inline)
	if r.code != exitUsage || !strings.Contains(r.msg, "--chat takes the name of a file holding the conversation") {
		t.Errorf("tokenize --chat with inline JSON: exit %d (%s); want %d and the file it takes", r.code, r.msg, exitUsage)
	}
}
