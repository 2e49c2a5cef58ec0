package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/hfref"
	"github.com/drafter-ai/drafter/internal/testutil"
)

// TestCUDAArchitectures runs every supported architecture's tiny
// transformers checkpoint (internal/hfref, as its models ship: bf16, or
// gpt-oss's MXFP4 experts) on the CUDA device: greedy generation gives the
// CPU device's ids, distillation runs on the device, and Medusa and EAGLE-3
// drafters trained on its shards evaluate losslessly on the device in chain
// and tree mode. make cuda-check runs it against the stand-in driver.
func TestCUDAArchitectures(t *testing.T) {
	testutil.NeedCUDA(t)
	c := hfref.Checkpoints(t)
	tmp := t.TempDir()
	prompts := trainPrompts(t, tmp, 4)
	for _, a := range hfref.Archs {
		t.Run(a.Name, func(t *testing.T) {
			run := func(args ...string) {
				t.Helper()
				if r := runCLI(t, nil, args...); r.code != exitOK {
					t.Fatalf("drafter %s: exit %d: %s", strings.Join(args, " "), r.code, r.msg)
				}
			}
			model, dir := c.Model(a.Name, a.Shipped()), filepath.Join(tmp, a.Name)
			cpu := greedyIDs(t, model, "cpu", "Once upon a time", "24")
			gpu := greedyIDs(t, model, "cuda", "Once upon a time", "24")
			if len(cpu) == 0 || !equalInts(cpu, gpu) {
				t.Fatalf("cuda generated\n%v\nthe cpu\n%v", gpu, cpu)
			}
			distilled := filepath.Join(dir, "distill")
			run("distill", "--device", "cuda", "--model", model, "--prompts", prompts, "--out", distilled, "--max-new-tokens", "16", "--temperature", "0", "--quiet")
			for _, m := range []struct {
				method string
				extra  []string
			}{
				{"medusa", []string{"--heads", "2", "--blocks", "1"}},
				{"eagle3", []string{"--draft-vocab", "64"}},
			} {
				out := filepath.Join(dir, m.method)
				run(append([]string{"train", m.method, "--device", "cpu", "--model", model, "--data", distilled, "--out", out, "--max-steps", "3", "--quiet"}, m.extra...)...)
				for _, mode := range []string{"chain", "tree"} {
					report := filepath.Join(dir, m.method+"-"+mode+".json")
					run("eval", "--device", "cuda", "--model", model, "--drafter", out, "--prompts", "../../data/prompts/stories-eval.jsonl",
						"--limit", "1", "--max-new-tokens", "10", "--temperature", "0", "--mode", mode, "--report", report, "--quiet")
					checkLossless(t, m.method+" "+mode+" on cuda", report, 1)
				}
			}
		})
	}
}
