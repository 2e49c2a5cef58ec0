package main

import (
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/bench"
	"github.com/drafter-ai/drafter/internal/testutil"
)

// checkBenchTable checks a bench --json table: every row, in order, each
// finite and positive.
func checkBenchTable(t *testing.T, out string) bench.Table {
	t.Helper()
	var tb bench.Table
	if err := json.Unmarshal([]byte(out), &tb); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	names := bench.RowNames()
	if len(tb.Rows) != len(names) {
		t.Fatalf("%d rows, want %d:\n%s", len(tb.Rows), len(names), out)
	}
	for i, r := range tb.Rows {
		if r.Name != names[i] {
			t.Errorf("row %d is %q, want %q", i, r.Name, names[i])
		}
		if !(r.Value > 0) || math.IsInf(r.Value, 0) {
			t.Errorf("%s: %v %s, want a finite positive value", r.Name, r.Value, r.Unit)
		}
	}
	return tb
}

// drafter bench --random runs every row on the CPU for the 60M shape (as a
// table and as JSON) and the 1B shape. The 1B model is built with 3 of its
// 16 decoder layers (--layers, the documented override: 16 layers at even
// the smallest sizes take minutes on two cores); every other dimension is
// the shape's, which the JSON header shows.
func TestBenchRandom(t *testing.T) {
	r := runCLI(t, nil, "bench", "--random", "60m", "--quick", "--device", "cpu")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.msg)
	}
	for _, n := range bench.RowNames() {
		if !strings.Contains(r.out, n) {
			t.Errorf("the table has no row %q:\n%s", n, r.out)
		}
	}
	if !strings.Contains(r.out, "drafter bench --random 60m: 8 layers") {
		t.Errorf("header:\n%s", r.out)
	}
	r = runCLI(t, nil, "bench", "--random", "llama3-1b", "--quick", "--layers", "3", "--medusa-shared-lm-head", "--device", "cpu", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.msg)
	}
	tb := checkBenchTable(t, r.out)
	if tb.Shape != "llama3-1b" || tb.Layers != 3 || tb.ShapeLayers != 16 || tb.DType != "bf16" {
		t.Errorf("header %+v", tb)
	}
	// The geometry is Llama-3.2-1B's but for the layers.
	cfg, _, err := bench.ShapeConfig("llama3-1b", 3)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HiddenSize != 2048 || cfg.NumHeads != 32 || cfg.NumKVHeads != 8 || cfg.VocabSize != 128256 || cfg.IntermediateSize != 8192 ||
		!cfg.TieWordEmbeddings || tb.Params != 262_668_288+3*60_821_504+2048 {
		t.Errorf("the 1B shape with 3 layers: %+v, %d parameters", cfg, tb.Params)
	}
}

// Command-line mistakes: an unknown shape (refused with the list), too few
// layers, --save with measuring flags, a missing --random.
func TestBenchMistakes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"bench", "--random", "llama3-70b"}, []string{"unknown shape", "60m", "llama3-1b", "llama3-8b"}},
		{[]string{"bench", "--random", "60m", "--layers", "2", "--device", "cpu"}, []string{"--layers", "at least 3"}},
		{[]string{"bench", "--random", "60m", "--save", t.TempDir(), "--quick"}, []string{"--quick does not apply with --save"}},
		{[]string{"bench", "--random", "60m", "--dtype", "fp8"}, []string{"--dtype fp8"}},
		{[]string{"bench"}, []string{"random"}},
	} {
		r := runCLI(t, nil, c.args...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d (%s), want %d", c.args, r.code, r.msg, exitUsage)
		}
		for _, w := range c.want {
			if !strings.Contains(r.msg, w) {
				t.Errorf("%v: %q does not say %q", c.args, r.msg, w)
			}
		}
	}
}

// scripts/random-pipeline.sh, the pipeline step of scripts/gpu-check.sh,
// runs on the CPU for the 60M shape: bench --save, distill, both trainers
// and three evals, each report lossless.
func TestRandomPipeline(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "drafter")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "run")
	cmd := exec.Command("bash", filepath.Join(testutil.Root(), "scripts", "random-pipeline.sh"), bin, "60m", "cpu", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("random-pipeline.sh: %v\n%s", err, b)
	}
	for _, name := range []string{"medusa-chain", "eagle3-chain4", "eagle3-tree"} {
		checkLossless(t, name, filepath.Join(out, "reports", name+".json"), 2)
	}
}
