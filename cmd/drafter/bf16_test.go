package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// TestBF16EndToEnd runs every stage on the bundled model converted to a
// bf16 checkpoint (weights read in place from the mapped file): inspect
// shows them as bf16, distill and capture make captures, Medusa and EAGLE-3
// train a few steps on them and eval runs each drafter against the bf16
// target, exiting 0: the speculative output equalled greedy decoding.
func TestBF16EndToEnd(t *testing.T) {
	model := testutil.CopyDir(t, testutil.Stories260k())
	testmodel.Convert(t, model, safetensors.BF16)
	tmp := t.TempDir()
	run := func(args ...string) cliResult {
		t.Helper()
		r := runCLI(t, nil, args...)
		if r.code != exitOK {
			t.Fatalf("drafter %s: exit %d: %s", strings.Join(args, " "), r.code, r.msg)
		}
		return r
	}
	if r := run("inspect", "--model", model); !strings.Contains(r.out, "bf16 (mapped)") || !strings.Contains(r.out, "BF16 x47") {
		t.Fatalf("inspect of the bf16 model:\n%s", r.out)
	}

	prompts := trainPrompts(t, tmp, 6)
	pairs := filepath.Join(tmp, "pairs.jsonl")
	if err := os.WriteFile(pairs, []byte(`{"prompt": "Once upon a time", "response": " there was a little cat. The cat was happy."}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	distilled, captured := filepath.Join(tmp, "distill"), filepath.Join(tmp, "capture")
	run("distill", "--model", model, "--prompts", prompts, "--out", distilled, "--max-new-tokens", "24", "--quiet")
	run("capture", "--model", model, "--conversations", pairs, "--out", captured, "--quiet")

	for _, c := range []struct {
		method string
		extra  []string
	}{
		{"medusa", []string{"--heads", "2", "--blocks", "1"}},
		{"eagle3", []string{"--layers", "1,3,5", "--draft-vocab", "64", "--target-temperature", "0.5"}},
	} {
		out := filepath.Join(tmp, c.method)
		run(append([]string{"train", c.method, "--model", model, "--data", distilled + "," + captured, "--out", out, "--max-steps", "3", "--quiet"}, c.extra...)...)
		run("eval", "--model", model, "--drafter", out, "--prompts", "../../data/prompts/stories-eval.jsonl", "--limit", "2",
			"--max-new-tokens", "16", "--mode", "chain", "--quiet")
	}
}
