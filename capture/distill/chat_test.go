package distill

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/target"
)

// chatModel copies stories260k into a folder whose tokenizer_config.json has
// a small chat template, so that chat prompts and assistant spans are tested.
func chatModel(t testing.TB) *target.Target {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "special_tokens_map.json"} {
		b, err := os.ReadFile(filepath.Join(testutil.Stories260k(), f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, f, string(b))
	}
	cfg := map[string]any{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
		"chat_template": "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"}
	b, _ := json.Marshal(cfg)
	writeFile(t, dir, "tokenizer_config.json", string(b))
	tg, err := target.Load(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

// chatPromptFile writes the first four story prompts as one-turn chats.
func chatPromptFile(t testing.TB, dir string) string {
	var b strings.Builder
	for _, p := range storyPrompts[:4] {
		j, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": p}}})
		b.Write(j)
		b.WriteByte('\n')
	}
	return writeFile(t, dir, "chat.jsonl", b.String())
}

// TestChatDistillThenCapture distils chat prompts, then replays the responses
// through Capture: the teacher-forced shards must hold the same tokens as the
// distilled ones up to the end-of-turn token, with the loss mask on the
// assistant turn.
func TestChatDistillThenCapture(t *testing.T) {
	tg := chatModel(t)
	dir := t.TempDir()
	opt := baseOptions(chatPromptFile(t, dir), filepath.Join(dir, "d"))
	opt.SamplesPerPrompt = 1
	opt.Sampling.Temperature = f64p(0)
	if _, err := Run(context.Background(), tg, opt); err != nil {
		t.Fatal(err)
	}
	resps := readResponses(t, opt.Out)
	var conv strings.Builder
	for _, r := range resps {
		if len(r.Messages) != 2 || r.Messages[1].Role != "assistant" {
			t.Fatalf("response %d messages %+v", r.ID, r.Messages)
		}
		j, _ := json.Marshal(map[string]any{"messages": r.Messages})
		conv.Write(j)
		conv.WriteByte('\n')
	}
	// A raw pair too: the mask covers the response and the appended eos.
	conv.WriteString(`{"prompt": "Once upon a time", "response": " there was a cat."}` + "\n")
	copt := CaptureOptions{Conversations: writeFile(t, dir, "conv.jsonl", conv.String()), Out: filepath.Join(dir, "c"),
		Batch: 2, DType: capture.Float32}
	if _, err := Capture(context.Background(), tg, copt); err != nil {
		t.Fatal(err)
	}
	got := readCapture(t, copt.Out)
	dist := readCapture(t, opt.Out)
	for i, r := range resps {
		c, d := got[int64(i)], dist[r.ID]
		masked := 0
		for _, v := range c.mask {
			if v {
				masked++
			}
		}
		if r.FinishReason == "eos" {
			// The distilled sequence is exactly the teacher-forced one.
			if len(c.tokens) != len(d.tokens) {
				t.Fatalf("sample %d: capture has %d tokens, distill %d", i, len(c.tokens), len(d.tokens))
			}
			for k := range c.tokens {
				if c.tokens[k] != d.tokens[k] || c.mask[k] != d.mask[k] {
					t.Fatalf("sample %d position %d: capture token %d mask %v, distill %d %v", i, k, c.tokens[k], c.mask[k], d.tokens[k], d.mask[k])
				}
			}
		}
		if masked == 0 {
			t.Fatalf("sample %d: empty loss mask", i)
		}
	}
	raw := got[int64(len(resps))]
	want := append(tg.Tok.Encode("Once upon a time there was a cat.", true), tg.Stop[0])
	np := len(tg.Tok.Encode("Once upon a time", true))
	if len(raw.tokens) != len(want) {
		t.Fatalf("raw pair: %v, want %v", raw.tokens, want)
	}
	for k := range want {
		if int(raw.tokens[k]) != want[k] || raw.mask[k] != (k >= np) {
			t.Fatalf("raw pair position %d: token %d mask %v; want %d %v", k, raw.tokens[k], raw.mask[k], want[k], k >= np)
		}
	}
}

// TestCancelIsClean: a cancelled run stops with a resumable directory whose
// responses match its manifest, and the resumed result equals an
// uninterrupted run.
func TestCancelIsClean(t *testing.T) {
	tg := loadStories(t)
	dir := t.TempDir()
	prompts := promptFile(t, dir)
	mk := func(out string) Options {
		o := baseOptions(prompts, filepath.Join(dir, out))
		o.Batch, o.ShardRows, o.SamplesPerPrompt = 2, 80, 4
		return o
	}
	if _, err := Run(context.Background(), tg, mk("ref")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for ctx.Err() == nil {
			if _, err := os.Stat(filepath.Join(dir, "cut", capture.ShardFileName(1))); err == nil {
				cancel()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, err := Run(ctx, tg, mk("cut"))
	cancel()
	if err == nil {
		t.Skip("the run finished before it could be cancelled")
	}
	if !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("cancel: %v", err)
	}
	man, err := capture.ReadManifest(filepath.Join(dir, "cut"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(readResponses(t, filepath.Join(dir, "cut"))); int64(n) != man.Totals.Samples {
		t.Fatalf("after cancel: %d responses, manifest lists %d samples", n, man.Totals.Samples)
	}
	if _, err := Run(context.Background(), tg, mk("cut")); err != nil {
		t.Fatal(err)
	}
	compareDirs(t, filepath.Join(dir, "ref"), filepath.Join(dir, "cut"))
}
