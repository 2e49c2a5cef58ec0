package exportcheck

import (
	"slices"
	"strings"
	"testing"
)

// The DSpark-only rules, on the fixtures of dflash_test.go.

func TestConfidenceHeadWidth(t *testing.T) {
	// [1, H+r] is the head of confidence_head_with_markov true; written
	// without the flag, vLLM builds [1, H] and the load fails on the shape,
	// and SGLang refuses a confidence head without the Markov input.
	dir := blockExport(t, t.TempDir(), dsparkNativeL, func(cfg map[string]any, _ map[string][]int) { cfg["confidence_head_with_markov"] = false })
	r := check(t, dir)
	caught(t, r, VLLM, "confidence_head.proj.weight", "shape [1, 11]", "[1, 8]", "confidence_head_with_markov false")
	caught(t, r, SGLang, "enable_confidence_head", "confidence_head_with_markov false", "refuses")
	// The flag on, the tensor of the hidden-only head.
	dir = blockExport(t, t.TempDir(), dsparkNativeL, func(_ map[string]any, ts map[string][]int) { ts["confidence_head.proj.weight"] = []int{1, tH} })
	r = check(t, dir)
	for _, e := range []Engine{VLLM, SGLang} {
		caught(t, r, e, "confidence_head.proj.weight", "shape [1, 8]", "[1, 11]", "markov_rank 3")
	}
	// The head trained but not switched on: both engines drop it.
	dir = blockExport(t, t.TempDir(), dsparkNativeL, func(cfg map[string]any, _ map[string][]int) {
		delete(cfg, "enable_confidence_head")
		delete(cfg, "confidence_head_with_markov")
	})
	r = check(t, dir)
	caught(t, r, VLLM, "enable_confidence_head", "absent", "drops the file's confidence_head.*")
	caught(t, r, SGLang, "confidence_head.proj.weight", "does not build", "drops the tensor")
	// Switched on, not shipped: vLLM drops the head, SGLang refuses.
	dir = blockExport(t, t.TempDir(), dsparkNativeL, func(_ map[string]any, ts map[string][]int) {
		delete(ts, "confidence_head.proj.weight")
		delete(ts, "confidence_head.proj.bias")
	})
	r = check(t, dir)
	caught(t, r, VLLM, "confidence_head.proj.weight", "missing with enable_confidence_head true", "drops the confidence head")
	caught(t, r, SGLang, "confidence_head.proj.weight", "missing", "refuses a checkpoint")
}

func TestMarkovHead(t *testing.T) {
	// Rank in the config other than the tensors'.
	dir := blockExport(t, t.TempDir(), dsparkNativeL, func(cfg map[string]any, _ map[string][]int) { cfg["markov_rank"] = 4 })
	r := check(t, dir)
	for _, e := range []Engine{VLLM, SGLang} {
		caught(t, r, e, "markov_head.markov_w1.weight", "shape [16, 3]", "[16, 4]", "markov_rank 4")
	}
	// drafter.json records the rank trained.
	withProvenance(t, dir, dsparkNativeL, nil)
	caught(t, check(t, dir), VLLM, "markov_rank", "vLLM runs markov_rank 4", "records 3")
	// Rank 0 (DeepSpec's Markov-free baseline) with the head's tensors.
	dir = blockExport(t, t.TempDir(), dsparkNativeL, func(cfg map[string]any, _ map[string][]int) {
		cfg["markov_rank"], cfg["enable_confidence_head"] = 0, false
		delete(cfg, "confidence_head_with_markov")
	})
	r = check(t, dir)
	caught(t, r, VLLM, "markov_rank", "0")
	caught(t, r, SGLang, "markov_head.markov_w1.weight", "does not build", "drops the tensor")
	// A head type vLLM does not implement.
	dir = blockExport(t, t.TempDir(), dsparkNativeL, func(cfg map[string]any, _ map[string][]int) { cfg["markov_head_type"] = "gated" })
	caught(t, check(t, dir), VLLM, "markov_head_type", "only the vanilla")
	// Absent rank: vLLM fails to build the head.
	dir = blockExport(t, t.TempDir(), dsparkNativeL, func(cfg map[string]any, _ map[string][]int) { delete(cfg, "markov_rank") })
	caught(t, check(t, dir), VLLM, "markov_rank", "absent")
}

func TestSGLangDSparkWeights(t *testing.T) {
	// Qwen3DSparkModel owns its embedding and lm_head: without them, and
	// with a name it has no parameter for, it refuses the checkpoint.
	dir := blockExport(t, t.TempDir(), dsparkNativeL, func(_ map[string]any, ts map[string][]int) {
		delete(ts, "embed_tokens.weight")
		ts["t2d"] = []int{tV}
	})
	r := check(t, dir)
	caught(t, r, SGLang, "embed_tokens.weight", "missing", "refuses")
	caught(t, r, SGLang, "t2d", "refuses the checkpoint")
	// vLLM shares the target's embedding and skips t2d.
	if slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Level == Error && slices.Contains(f.Engines, VLLM) && f.Key != "t2d" }) {
		t.Fatalf("vLLM shares the target's embedding:\n%s", strings.Join(r.Lines(), "\n"))
	}
	// head_dim is required (SGLang never derives it).
	dir = blockExport(t, t.TempDir(), dsparkNativeL, func(cfg map[string]any, _ map[string][]int) { delete(cfg, "head_dim") })
	caught(t, check(t, dir), SGLang, "head_dim", "refuses the config")
}

func TestSpeculatorsDSparkNotes(t *testing.T) {
	// The correct speculators DSpark export names the vLLM builds that run
	// it wrong: before #48639 (bonus anchor hard-coded) and those that do
	// not carry the confidence head over.
	dir := blockExport(t, t.TempDir(), dsparkSpecsL, nil)
	r := check(t, dir)
	passes(t, r)
	for _, want := range []string{"#48639", "copies only markov_rank"} {
		if !slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Level == Note && strings.Contains(f.Msg, want) }) {
			t.Fatalf("no note mentioning %q:\n%s", want, strings.Join(r.Lines(), "\n"))
		}
	}
}
