package main

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/eval"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/pkg/tensor/cuda"
)

// TestCUDAGraphsLossless runs generate and eval on one CUDA device (make
// cuda-check's stand-in) with its CUDA graphs on and off: the generated ids
// are the same, and eval of Medusa and EAGLE-3 drafters (trained on the
// CPU, as TestCUDAEvalLossless trains them) in chain and tree mode gives
// the same outputs, acceptance histogram and losslessness both ways (the
// drafters are trained briefly: what matters is that they draft); with
// graphs on, the decode steps and verification passes are captured and
// replayed (counted). A pass may differ from its capture only where the
// device's scratch grew since (a larger pass came), once per recapture.
func TestCUDAGraphsLossless(t *testing.T) {
	testutil.NeedCUDA(t)
	tmp := t.TempDir()
	prompts := trainPrompts(t, tmp, 16)
	model := testutil.Stories260k()
	cli := func(args ...string) {
		t.Helper()
		if r := runCLI(t, nil, args...); r.code != exitOK {
			t.Fatalf("drafter %v: exit %d: %s", args, r.code, r.msg)
		}
	}
	cli("distill", "--device", "cpu", "--model", model, "--prompts", prompts, "--out", filepath.Join(tmp, "distill"), "--max-new-tokens", "24", "--temperature", "0", "--quiet")
	cli("train", "medusa", "--device", "cpu", "--model", model, "--data", filepath.Join(tmp, "distill"), "--out", filepath.Join(tmp, "medusa"), "--quiet", "--heads", "3", "--max-steps", "20")
	cli("train", "eagle3", "--device", "cpu", "--model", model, "--data", filepath.Join(tmp, "distill"), "--out", filepath.Join(tmp, "eagle3"), "--quiet", "--epochs", "1", "--draft-vocab", "128")

	dev, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if off := dev.GraphsOff(); off != "" {
		t.Fatalf("the stand-in has CUDA graphs, but: %s", off)
	}

	// generate, on one target loaded once.
	tg, err := target.Load(model, dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	temp, maxNew := 0.0, 40
	st, err := generate.Resolve(tg, generate.Overrides{Temperature: &temp, MaxNewTokens: &maxNew})
	if err != nil {
		t.Fatal(err)
	}
	gen := func(graphs bool) []int {
		dev.SetGraphs(graphs)
		res, err := generate.Generate(context.Background(), tg, generate.Request{Prompt: "Once upon a time", Settings: st})
		if err != nil {
			t.Fatal(err)
		}
		return res.GeneratedIDs
	}
	plainIDs := gen(false)
	s0 := dev.GraphStats()
	graphIDs := gen(true)
	s1 := dev.GraphStats()
	tg.Close()
	if len(plainIDs) == 0 || !slices.Equal(plainIDs, graphIDs) {
		t.Fatalf("generate: %v with graphs, %v without", graphIDs, plainIDs)
	}
	if s1.Replays-s0.Replays < len(graphIDs)/2 || s1.Mismatches-s0.Mismatches > s1.Captures-s0.Captures {
		t.Fatalf("generate of %d tokens: graph stats %+v after %+v: want the decode steps replayed", len(graphIDs), s1, s0)
	}

	for _, method := range []string{"medusa", "eagle3"} {
		for _, mode := range []eval.Mode{eval.ModeChain, eval.ModeTree} {
			run := func(graphs bool) *eval.Report {
				t.Helper()
				dev.SetGraphs(graphs)
				temp, maxNew := 0.0, 24
				rep, err := eval.Evaluate(context.Background(), eval.Options{
					ModelDir: model, DrafterDir: filepath.Join(tmp, method), PromptsPath: "../../data/prompts/stories-eval.jsonl",
					Limit: 2, Sampling: generate.Overrides{Temperature: &temp, MaxNewTokens: &maxNew},
					Config: eval.Config{Mode: mode}, Device: dev,
				}, io.Discard)
				if err != nil {
					t.Fatalf("%s %s (graphs %v): %v", method, mode, graphs, err)
				}
				return rep
			}
			plain := run(false)
			before := dev.GraphStats()
			graph := run(true)
			after := dev.GraphStats()
			what := method + " " + string(mode)
			if !graph.Lossless.Checked || graph.Lossless.Prompts != 2 || len(graph.Lossless.Mismatches) != 0 {
				t.Errorf("%s: with graphs, lossless %+v", what, graph.Lossless)
			}
			if graph.MeanAcceptLength != plain.MeanAcceptLength || !slices.Equal(graph.AcceptLengthHist, plain.AcceptLengthHist) {
				t.Errorf("%s: acceptance %v %v with graphs, %v %v without", what, graph.MeanAcceptLength, graph.AcceptLengthHist, plain.MeanAcceptLength, plain.AcceptLengthHist)
			}
			for i := range plain.PerPrompt {
				if !slices.Equal(graph.PerPrompt[i].Output, plain.PerPrompt[i].Output) {
					t.Errorf("%s prompt %d: output %v with graphs, %v without", what, i, graph.PerPrompt[i].Output, plain.PerPrompt[i].Output)
				}
			}
			// The baseline's decode steps and the verification passes after
			// the first of their shape are replays; a mismatch is followed
			// by a capture.
			steps := graph.Stats.Steps
			captures, mismatches := after.Captures-before.Captures, after.Mismatches-before.Mismatches
			if after.Replays-before.Replays < steps || after.Plain != before.Plain || mismatches > captures {
				t.Errorf("%s: %d verification steps; graph stats %+v after %+v: want at least as many replays, no plain pass, a capture per mismatch", what, steps, after, before)
			}
			t.Logf("%s: %d steps, acceptance %.3f; graph passes: %d captured, %d replayed, %d mismatched (%s)",
				what, steps, graph.MeanAcceptLength, captures, after.Replays-before.Replays, mismatches, after.MismatchWhy)
		}
	}
}
