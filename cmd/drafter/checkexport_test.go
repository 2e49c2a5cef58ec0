package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/drafters/medusa"
)

// TestCheckExport: check-export passes drafter's own Medusa export (both
// layouts, each for its engine), exits 1 with one line per finding when an
// engine would load it wrong, and treats a bad --engine or a missing folder
// argument as a command-line mistake.
func TestCheckExport(t *testing.T) {
	lm := make([]float32, 16*8)
	h, err := medusa.NewHeads(medusa.Geometry{Hidden: 8, Vocab: 16, Heads: 2, Layers: 1}, lm, false)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := medusa.Export(dir, h, medusa.ExportInfo{TargetFingerprint: "x"}); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, nil, "check-export", dir)
	if r.code != exitOK || !strings.Contains(r.out, "0 errors") || !strings.Contains(r.out, "(medusa vllm: vllm)") || !strings.Contains(r.out, "(medusa medusa: trtllm)") {
		t.Fatalf("check-export of a good export: exit %d: %s\n%s", r.code, r.msg, r.out)
	}
	if r := runCLI(t, nil, "check-export", dir, "--engine", "sglang"); r.code != exitError || !strings.Contains(r.out, "error: sglang: ") {
		t.Fatalf("check-export --engine sglang of a Medusa export: exit %d: %s\n%s", r.code, r.msg, r.out)
	}
	cfg := filepath.Join(dir, "vllm", "config.json")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), `"num_heads": 2`, `"num_heads": 1`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, nil, "check-export", dir, "--engine", "vllm")
	if r.code != exitError || !strings.Contains(r.out, "error: vllm: "+filepath.Join(dir, "vllm", "model.safetensors")+": blocks.1.layers.0.weight: ") {
		t.Fatalf("check-export of a head count the tensors disagree with: exit %d: %s\n%s", r.code, r.msg, r.out)
	}
	for _, args := range [][]string{{"check-export"}, {"check-export", dir, "--engine", "tgi"}, {"check-export", dir, dir}} {
		if r := runCLI(t, nil, args...); r.code != exitUsage {
			t.Errorf("drafter %s: exit %d, want %d", strings.Join(args, " "), r.code, exitUsage)
		}
	}
	if r := runCLI(t, nil, "check-export", filepath.Join(dir, "nothing")); r.code != exitError {
		t.Errorf("check-export of a missing folder: exit %d, want %d", r.code, exitError)
	}
}
