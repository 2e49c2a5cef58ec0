package data

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/tokenizer"
)

// TestInvalidUTF8OneRule: bytes that are not UTF-8 are read the same way from
// a .txt and from a .jsonl prompt file: each becomes U+FFFD, as JSON
// decoding reads them, so both give the same text and the same ids, and the
// prompt recorded as JSON (responses.jsonl) reproduces the ids captured from
// it. Each replacement is reported, naming the file and the line; valid
// lines are read unchanged and without a word.
func TestInvalidUTF8OneRule(t *testing.T) {
	tok, err := tokenizer.LoadDir(testutil.Stories260k())
	if err != nil {
		t.Fatal(err)
	}
	bad := "Once upon a caf\xe9 time \xe2\x82 the \xff\xfe end" // Latin-1 é, a cut 3-byte sequence, two stray bytes
	txt := writeFile(t, "p.txt", "A fine line\n"+bad+"\n")
	jsonl := writeFile(t, "p.jsonl", `{"prompt": "A fine line"}`+"\n"+`{"prompt": "`+bad+`"}`+"\n")

	var texts []string
	var ids [][]int
	for _, path := range []string{txt, jsonl} {
		var warn bytes.Buffer
		ps, _, err := ReadPrompts(path, ReadOptions{Warn: &warn})
		if err != nil || len(ps) != 2 {
			t.Fatalf("%s: %d prompts, %v", path, len(ps), err)
		}
		if ps[0].Text != "A fine line" {
			t.Errorf("%s: valid line read as %q", path, ps[0].Text)
		}
		p := ps[1]
		if !utf8.ValidString(p.Text) || strings.Count(p.Text, "\uFFFD") != 5 {
			t.Errorf("%s: %q: want valid UTF-8 with one U+FFFD per invalid byte (5)", path, p.Text)
		}
		got, err := Encode(p, tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The prompt as a run records it, read back, gives the same ids.
		rec, _ := json.Marshal(p.Text)
		var back string
		if err := json.Unmarshal(rec, &back); err != nil || !slices.Equal(tok.Encode(back, true), got) {
			t.Errorf("%s: the recorded prompt %s does not reproduce the captured ids", path, rec)
		}
		w := warn.String()
		for _, want := range []string{path + ":2:", "5 bytes", "not UTF-8", "U+FFFD"} {
			if !strings.Contains(w, want) {
				t.Errorf("%s: warning %q does not say %q", path, w, want)
			}
		}
		if strings.Contains(w, path+":1:") || strings.Count(w, "\n") != 1 {
			t.Errorf("%s: warnings %q: want one, for line 2 only", path, w)
		}
		texts, ids = append(texts, p.Text), append(ids, got)
	}
	if texts[0] != texts[1] || !slices.Equal(ids[0], ids[1]) {
		t.Errorf(".txt and .jsonl read the same bytes differently:\n%q %v\n%q %v", texts[0], ids[0], texts[1], ids[1])
	}

	// Conversations (capture) follow the same rule, and say so.
	conv := writeFile(t, "c.jsonl", "{\"prompt\": \"Hi \xff\", \"response\": \" there\"}\n")
	var warn bytes.Buffer
	cs, _, err := ReadConversations(conv, ReadOptions{Warn: &warn})
	if err != nil || len(cs) != 1 || cs[0].Prompt != "Hi \uFFFD" || !strings.Contains(warn.String(), conv+":1:") {
		t.Errorf("conversation: %+v, %v, warning %q", cs, err, warn.String())
	}

	// So does tokenize --chat's file, naming the line of the first.
	msgs := writeFile(t, "m.json", "[\n{\"role\": \"user\", \"content\": \"caf\xe9\"}\n]\n")
	warn.Reset()
	ms, err := ReadMessagesFile(msgs, ReadOptions{Warn: &warn})
	if err != nil || len(ms) != 1 || ms[0].Content != "caf\uFFFD" || !strings.Contains(warn.String(), msgs+":2: 1 byte is not UTF-8") {
		t.Errorf("messages file: %+v, %v, warning %q", ms, err, warn.String())
	}
}
