package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// trainPrompts writes the first n prompts of the bundled
// stories-train.jsonl to dir/prompts.jsonl and returns its path.
func trainPrompts(t *testing.T, dir string, n int) string {
	t.Helper()
	src, err := os.ReadFile("../../data/prompts/stories-train.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(strings.SplitAfterN(string(src), "\n", n+1)[:n], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkLossless reads an eval report (--report) and fails t, naming what,
// unless its lossless check covered every one of prompts prompts; it
// returns the report's mean acceptance length.
func checkLossless(t *testing.T, what, report string, prompts int) float64 {
	t.Helper()
	var rep struct {
		Accept   float64 `json:"mean_accept_length"`
		Lossless struct {
			Checked bool `json:"checked"`
			Prompts int  `json:"prompts"`
		} `json:"lossless"`
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%s: %v", report, err)
	}
	if !rep.Lossless.Checked || rep.Lossless.Prompts != prompts {
		t.Errorf("%s: lossless check %+v, want %d prompts checked", what, rep.Lossless, prompts)
	}
	return rep.Accept
}
