package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/train/medusa"
)

const evalTestModel = "../../models/stories260k"

// runEval runs `drafter eval` with args and returns the exit code main would
// use and the error text.
func runEval(t *testing.T, args ...string) (int, string) {
	t.Helper()
	c := newRootCmd()
	c.SetArgs(append(append([]string{"eval"}, args...), "--quiet"))
	c.SetOut(new(bytes.Buffer))
	c.SetErr(new(bytes.Buffer))
	err := c.ExecuteContext(context.Background())
	if err != nil {
		return exitCode(err), err.Error()
	}
	return exitOK, ""
}

// exportRandomHeads writes Medusa heads with random blocks (they rarely guess
// right: acceptance length near 1) into a train-like output folder whose
// drafter.json records fingerprint fp.
func exportRandomHeads(t *testing.T, fp string) string {
	t.Helper()
	tg, err := generate.Load(evalTestModel, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if fp == "" {
		fp = tg.Fingerprint
	}
	m := tg.Model
	h, err := medusa.NewHeads(medusa.Geometry{Hidden: m.HiddenSize(), Vocab: m.VocabSize(), Heads: 2, Layers: 1}, m.LMHead, false)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for hd := range h.W {
		for i := range h.W[hd][0] {
			h.W[hd][0][i] = float32(r.NormFloat64() * 0.3)
		}
	}
	dir := t.TempDir()
	if err := medusa.Export(dir, h, medusa.ExportInfo{TargetFingerprint: fp}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEvalExitCodes: 0 when the drafter passes, 3 when it falls short of a
// gate, 1 for a stale drafter, 2 for a command-line mistake.
func TestEvalExitCodes(t *testing.T) {
	if _, err := os.Stat(evalTestModel); err != nil {
		t.Skip("bundled model missing:", err)
	}
	dir := exportRandomHeads(t, "")
	prompts := "../../data/prompts/stories-eval.jsonl"
	base := []string{"--model", evalTestModel, "--drafter", dir, "--prompts", prompts, "--limit", "2", "--max-new-tokens", "16", "--mode", "chain"}
	report := filepath.Join(t.TempDir(), "r.json")

	if code, msg := runEval(t, append(base, "--report", report, "--min-acceptance", "1")...); code != exitOK {
		t.Fatalf("passing run: exit %d: %s", code, msg)
	}
	var rep struct {
		Tau float64 `json:"mean_accept_length"`
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil || rep.Tau < 1 {
		t.Fatalf("report: %v, τ %v", err, rep.Tau)
	}
	if code, msg := runEval(t, append(base, "--min-acceptance", "3")...); code != exitGateHit || !strings.Contains(msg, "--min-acceptance") {
		t.Fatalf("min-acceptance gate: exit %d: %s", code, msg)
	}
	if code, msg := runEval(t, append(base, "--baseline", report, "--max-drop", "0")...); code != exitOK {
		t.Fatalf("baseline gate against itself: exit %d: %s", code, msg)
	}
	// A baseline far better than this drafter.
	better := filepath.Join(t.TempDir(), "better.json")
	var raw map[string]any
	json.Unmarshal(b, &raw)
	raw["mean_accept_length"] = rep.Tau + 1
	nb, _ := json.Marshal(raw)
	os.WriteFile(better, nb, 0o644)
	if code, msg := runEval(t, append(base, "--baseline", better, "--max-drop", "10%")...); code != exitGateHit || !strings.Contains(msg, "--max-drop") {
		t.Fatalf("max-drop gate: exit %d: %s", code, msg)
	}

	stale := exportRandomHeads(t, "0000stale")
	staleArgs := append([]string(nil), base...)
	staleArgs[3] = stale
	if code, msg := runEval(t, staleArgs...); code != exitError || !strings.Contains(msg, "stale") {
		t.Fatalf("stale drafter: exit %d: %s", code, msg)
	}
	if code, msg := runEval(t, append(staleArgs, "--allow-mismatch")...); code != exitOK {
		t.Fatalf("--allow-mismatch: exit %d: %s", code, msg)
	}

	for _, bad := range [][]string{
		{"--max-drop", "5%"},      // without --baseline
		{"--baseline", report},    // without --max-drop
		{"--typical", "0.09"},     // malformed
		{"--tree", "[[0,0]]"},     // not closed under prefixes
		{"--mode", "beam"},        // unknown mode
		{"--depth", "5"},          // more than the 2 heads
		{"--no-such-flag"},        // unknown flag
		{"--typical", "0.09,0.3"}, // lossy acceptance at temperature 0
		{"--topk", "4"},           // an EAGLE-2 setting for Medusa heads
		{"--max-drop", "x", "--baseline", report},
	} {
		if code, msg := runEval(t, append(base, bad...)...); code != exitUsage {
			t.Errorf("%v: exit %d (%s); want %d", bad, code, msg, exitUsage)
		}
	}
}
