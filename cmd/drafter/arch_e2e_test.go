package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/hfref"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/arch"
)

// TestArchitecturesEndToEnd runs the whole pipeline on the tiny checkpoint
// Hugging Face transformers made of each supported architecture
// (internal/hfref.Archs; pkg/model's TestHFReference compares its forward
// with transformers'): inspect prints the architecture, transformers'
// parameter count, the weights' memory (f32: 4 bytes a parameter; bf16: 2
// for every matrix, the vectors in float32; mxfp4: 4.25 bits for every
// expert value) and the default feature layers;
// distill on a handful of prompts, Medusa and EAGLE-3 trained a few steps,
// and eval of each in chain mode, which must be lossless (eval exits 0 only
// when every speculative output equals greedy decoding, and the report says
// every prompt was checked). The checkpoint as such models ship (bf16;
// gpt-oss's MXFP4 experts) runs the pipeline; every checkpoint is
// inspected. Every other architecture is refused by inspect naming its
// model_type and the supported ones.
func TestArchitecturesEndToEnd(t *testing.T) {
	c := hfref.Checkpoints(t)
	tmp := t.TempDir()
	prompts := trainPrompts(t, tmp, 6)
	run := func(t *testing.T, args ...string) cliResult {
		t.Helper()
		r := runCLI(t, nil, args...)
		if r.code != exitOK {
			t.Fatalf("drafter %s: exit %d: %s", strings.Join(args, " "), r.code, r.msg)
		}
		return r
	}
	for _, a := range hfref.Archs {
		t.Run(a.Name, func(t *testing.T) {
			ref := c.Reference(t, a.Name)
			for _, dt := range a.DTypes() {
				checkInspect(t, run(t, "inspect", "--model", c.Model(a.Name, dt)).out,
					run(t, "inspect", "--json", "--model", c.Model(a.Name, dt)).out, ref, dt)
			}
			model, dir := c.Model(a.Name, a.Shipped()), filepath.Join(tmp, a.Name)
			distilled := filepath.Join(dir, "distill")
			run(t, "distill", "--model", model, "--prompts", prompts, "--out", distilled, "--max-new-tokens", "24", "--temperature", "0", "--quiet")
			for _, m := range []struct {
				method string
				extra  []string
			}{
				{"medusa", []string{"--heads", "2", "--blocks", "1"}},
				{"eagle3", []string{"--draft-vocab", "64"}},
			} {
				out := filepath.Join(dir, m.method)
				run(t, append([]string{"train", m.method, "--model", model, "--data", distilled, "--out", out, "--max-steps", "3", "--quiet"}, m.extra...)...)
				report := filepath.Join(dir, m.method+".json")
				run(t, "eval", "--model", model, "--drafter", out, "--prompts", "../../data/prompts/stories-eval.jsonl", "--limit", "2",
					"--max-new-tokens", "16", "--temperature", "0", "--mode", "chain", "--report", report, "--quiet")
				checkLossless(t, m.method, report, 2)
			}
		})
	}
	for _, name := range c.Names(t) {
		if hfref.Supported(name) {
			continue
		}
		t.Run(name+"/refused", func(t *testing.T) {
			ref := c.Reference(t, name)
			if _, ok := arch.Lookup(ref.ModelType); ok {
				t.Fatalf("pkg/arch supports model_type %s, but internal/hfref.Archs has no line for %s: add it", ref.ModelType, name)
			}
			r := runCLI(t, nil, "inspect", "--model", c.Model(name, "f32"))
			if r.code == exitOK {
				t.Fatalf("inspect of a %s checkpoint succeeded:\n%s", ref.ModelType, r.out)
			}
			for _, want := range []string{fmt.Sprintf("%q", ref.ModelType), arch.Supported()} {
				if !strings.Contains(r.msg, want) {
					t.Errorf("inspect's refusal %q does not name %s", r.msg, want)
				}
			}
		})
	}
	// An architecture nobody generated: a real checkpoint's files with a
	// model_type drafter does not know (Nemotron-H, a hybrid of Mamba and
	// attention layers).
	t.Run("nemotron_h/refused", func(t *testing.T) {
		dir := testutil.CopyDir(t, c.Model("llama", "f32"))
		p := filepath.Join(dir, "config.json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.NewReplacer(`"LlamaForCausalLM"`, `"NemotronHForCausalLM"`, `"llama"`, `"nemotron_h"`).Replace(string(b)))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, nil, "inspect", "--model", dir)
		if r.code == exitOK || !strings.Contains(r.msg, `"nemotron_h" is not supported`) || !strings.Contains(r.msg, arch.Supported()) {
			t.Fatalf("inspect of a nemotron_h checkpoint: exit %d, %q; want a refusal naming it and %s", r.code, r.msg, arch.Supported())
		}
	})
}

// checkInspect checks inspect's text and JSON output for a checkpoint
// against what transformers says of it.
func checkInspect(t *testing.T, text, js string, ref *hfref.Reference, dtype string) {
	t.Helper()
	for _, line := range []string{"architecture:", "parameters:", "weights:", "eagle3 layers:"} {
		if !strings.Contains(text, "\n"+line) {
			t.Errorf("%s inspect prints no %q line:\n%s", dtype, line, text)
		}
	}
	var got struct {
		ModelType   string           `json:"model_type"`
		Parameters  int64            `json:"parameters"`
		WeightBytes map[string]int64 `json:"weight_bytes"`
		Layers      int              `json:"num_hidden_layers"`
		Feature     []int            `json:"eagle3_feature_layers"`
	}
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, js)
	}
	if got.ModelType != ref.ModelType || !strings.Contains(text, ref.ModelType+" (") {
		t.Errorf("%s inspect: model_type %q, transformers' %q:\n%s", dtype, got.ModelType, ref.ModelType, text)
	}
	if got.Parameters != ref.Parameters || !strings.Contains(text, fmt.Sprint(ref.Parameters)) {
		t.Errorf("%s inspect: %d parameters, transformers counts %d", dtype, got.Parameters, ref.Parameters)
	}
	held := ref.Parameters + ref.PersistentBuffers
	want := map[string]int64{"f32": 4 * held}
	switch dtype {
	case "bf16":
		want = map[string]int64{"bf16": 2 * ref.MatrixParameters, "f32": 4 * (held - ref.MatrixParameters)}
	case "mxfp4": // 4-bit values and a scale byte per 32
		want = map[string]int64{"mxfp4": ref.MXFP4Parameters/2 + ref.MXFP4Parameters/32, "f32": 4 * (held - ref.MXFP4Parameters)}
	}
	if fmt.Sprint(got.WeightBytes) != fmt.Sprint(want) {
		t.Errorf("%s inspect: weight bytes %v, want %v", dtype, got.WeightBytes, want)
	}
	// The documented rule (inspect --help): hidden_states indices 2, L/2,
	// L-3; 1, (L+1)/2, L below 7 layers.
	L := got.Layers
	wantLayers := []int{2, L / 2, L - 3}
	if L < 7 {
		wantLayers = []int{1, (L + 1) / 2, L}
	}
	if !slices.Equal(got.Feature, wantLayers) {
		t.Errorf("%s inspect: eagle3 feature layers %v, want %v for %d layers", dtype, got.Feature, wantLayers, L)
	}
}
