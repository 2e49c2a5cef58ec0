package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/target"
)

// evalCLI runs `drafter eval` with args and returns the exit code main would
// use and the error text.
func evalCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r := runCLI(t, nil, append(append([]string{"eval"}, args...), "--quiet")...)
	return r.code, r.msg
}

// exportRandomHeads writes Medusa heads with random blocks (they rarely guess
// right: acceptance length near 1) into a train-like output folder whose
// drafter.json records fingerprint fp.
func exportRandomHeads(t *testing.T, fp string) string {
	t.Helper()
	tg, err := target.Load(testutil.Stories260k(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if fp == "" {
		fp = tg.Fingerprint
	}
	m := tg.Model
	h, err := medusa.NewHeads(medusa.Geometry{Hidden: m.HiddenSize(), Vocab: m.VocabSize(), Heads: 2, Layers: 1}, m.LMHead.Float32(), false)
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
	if _, err := os.Stat(testutil.Stories260k()); err != nil {
		t.Skip("bundled model missing:", err)
	}
	dir := exportRandomHeads(t, "")
	prompts := "../../data/prompts/stories-eval.jsonl"
	base := []string{"--model", testutil.Stories260k(), "--drafter", dir, "--prompts", prompts, "--limit", "2", "--max-new-tokens", "16", "--mode", "chain"}
	report := filepath.Join(t.TempDir(), "r.json")

	if code, msg := evalCLI(t, append(base, "--report", report, "--min-acceptance", "1")...); code != exitOK {
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
	if code, msg := evalCLI(t, append(base, "--min-acceptance", "3")...); code != exitGateHit || !strings.Contains(msg, "--min-acceptance") {
		t.Fatalf("min-acceptance gate: exit %d: %s", code, msg)
	}
	if code, msg := evalCLI(t, append(base, "--baseline", report, "--max-drop", "0")...); code != exitOK {
		t.Fatalf("baseline gate against itself: exit %d: %s", code, msg)
	}
	// A baseline far better than this drafter.
	better := filepath.Join(t.TempDir(), "better.json")
	var raw map[string]any
	json.Unmarshal(b, &raw)
	raw["mean_accept_length"] = rep.Tau + 1
	nb, _ := json.Marshal(raw)
	os.WriteFile(better, nb, 0o644)
	if code, msg := evalCLI(t, append(base, "--baseline", better, "--max-drop", "10%")...); code != exitGateHit || !strings.Contains(msg, "--max-drop") {
		t.Fatalf("max-drop gate: exit %d: %s", code, msg)
	}

	stale := exportRandomHeads(t, "0000stale")
	staleArgs := append([]string(nil), base...)
	staleArgs[3] = stale
	if code, msg := evalCLI(t, staleArgs...); code != exitError || !strings.Contains(msg, "stale") {
		t.Fatalf("stale drafter: exit %d: %s", code, msg)
	}
	if code, msg := evalCLI(t, append(staleArgs, "--allow-mismatch")...); code != exitOK {
		t.Fatalf("--allow-mismatch: exit %d: %s", code, msg)
	}

	for _, bad := range [][]string{
		{"--max-drop", "5%"},      // without --baseline
		{"--baseline", report},    // without --max-drop
		{"--typical", "0.09"},     // malformed
		{"--tree", "[[0,0]]"},     // not closed under prefixes
		{"--mode", "beam"},        // unknown mode
		{"--depth", "5"},          // more than the 2 heads (checked by the drafter: see below)
		{"--no-such-flag"},        // unknown flag
		{"--typical", "0.09,0.3"}, // lossy acceptance at temperature 0
		{"--topk", "4"},           // an EAGLE-2 setting for Medusa heads
		{"--max-drop", "x", "--baseline", report},
	} {
		if code, msg := evalCLI(t, append(base, bad...)...); code != exitUsage {
			t.Errorf("%v: exit %d (%s); want %d", bad, code, msg, exitUsage)
		}
	}
	// Settings only the loaded drafter can refuse are named by their flags.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--depth", "5"}, "eval: --depth: a chain of 5 exceeds the drafter's 2 Medusa heads"},
		{[]string{"--topk", "4"}, "eval: --topk and --total-tokens: configure EAGLE-2's dynamic tree"},
		{[]string{"--tree", "[[0]]"}, "eval: --tree and --mode: a static tree applies to tree mode"},
	} {
		if code, msg := evalCLI(t, append(base, c.args...)...); code != exitUsage || !strings.Contains(msg, c.want) {
			t.Errorf("%v: exit %d (%s); want %d and %q", c.args, code, msg, exitUsage, c.want)
		}
	}
}

// TestEvalChecksOutputsFirst: --report and --plot that cannot be written are
// refused before anything runs: the model folder here does not exist, and
// the error is about the output, not the model.
func TestEvalChecksOutputsFirst(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--model", filepath.Join(tmp, "no-model"), "--drafter", tmp, "--prompts", "../../data/prompts/stories-eval.jsonl"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--report", filepath.Join(tmp, "no-dir", "r.json")}, "the folder " + filepath.Join(tmp, "no-dir") + " does not exist"},
		{[]string{"--report", tmp}, "--report " + tmp + " is a folder"},
		{[]string{"--report", filepath.Join(file, "r.json")}, file + " is not a folder"},
		{[]string{"--plot", file}, "--plot " + file + " is a file"},
		{[]string{"--plot", filepath.Join(tmp, "a", "b")}, "the folder " + filepath.Join(tmp, "a") + " does not exist"},
	} {
		code, msg := evalCLI(t, append(base, c.args...)...)
		if code != exitError || !strings.Contains(msg, c.want) || strings.Contains(msg, "no-model") {
			t.Errorf("%v: exit %d (%s); want %d and %q", c.args, code, msg, exitError, c.want)
		}
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 1 {
		t.Errorf("the checks left files behind: %v", entries)
	}
	// Writable outputs pass the check; the run then fails on its inputs.
	code, msg := evalCLI(t, append(base, "--report", filepath.Join(tmp, "r.json"), "--plot", filepath.Join(tmp, "plots"))...)
	if code != exitError || strings.Contains(msg, "--report") || strings.Contains(msg, "--plot") {
		t.Errorf("writable outputs: exit %d (%s); want a failure on the inputs", code, msg)
	}
}

// TestEvalBaselinePrompts: a report records its prompt file's SHA-256 and
// --limit; a --baseline measured on other prompts is refused (exit 1) unless
// --allow-baseline-mismatch, which warns; one without a hash (an older
// drafter's report) is compared with a warning.
func TestEvalBaselinePrompts(t *testing.T) {
	if _, err := os.Stat(testutil.Stories260k()); err != nil {
		t.Skip("bundled model missing:", err)
	}
	dir := exportRandomHeads(t, "")
	tmp := t.TempDir()
	prompts := "../../data/prompts/stories-eval.jsonl"
	src, err := os.ReadFile(prompts)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(tmp, "other.jsonl")
	if err := os.WriteFile(other, append([]byte(`{"prompt": "Once upon a time there was a cat"}`+"\n"), src...), 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(tmp, "r.json")
	args := func(prompts, limit string, extra ...string) []string {
		return append([]string{"--model", testutil.Stories260k(), "--drafter", dir, "--prompts", prompts, "--limit", limit, "--max-new-tokens", "8", "--mode", "chain"}, extra...)
	}
	if code, msg := evalCLI(t, args(prompts, "2", "--report", report)...); code != exitOK {
		t.Fatalf("first report: exit %d: %s", code, msg)
	}
	var rep struct {
		File   string `json:"prompt_file"`
		SHA256 string `json:"prompt_sha256"`
		Limit  int    `json:"limit"`
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	if err := json.Unmarshal(b, &rep); err != nil || rep.SHA256 != hex.EncodeToString(sum[:]) || rep.Limit != 2 || rep.File != prompts {
		t.Fatalf("report records prompts %+v (%v); want %s, sha256 %x, limit 2", rep, err, prompts, sum)
	}

	gate := []string{"--baseline", report, "--max-drop", "100%"}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{args(other, "2", gate...), []string{"measured on other prompts", "sha256 " + rep.SHA256, other, "--allow-baseline-mismatch"}},
		{args(prompts, "3", gate...), []string{"measured on other prompts", "2 prompts (--limit 2), now 3 (--limit 3)"}},
	} {
		r := runCLI(t, nil, append(append([]string{"eval"}, c.args...), "--quiet")...)
		for _, w := range c.want {
			if r.code != exitError || !strings.Contains(r.msg, w) {
				t.Errorf("%v: exit %d (%s); want %d and %q", c.args, r.code, r.msg, exitError, w)
			}
		}
		r = runCLI(t, nil, append(append([]string{"eval"}, c.args...), "--quiet", "--allow-baseline-mismatch")...)
		if r.code != exitOK || !strings.Contains(r.stderr, "warning: the baseline report "+report+" was measured on other prompts") || !strings.Contains(r.stderr, "comparing anyway") {
			t.Errorf("%v --allow-baseline-mismatch: exit %d (%s), stderr %q", c.args, r.code, r.msg, r.stderr)
		}
	}
	// An older report without the hash: compared, with a warning.
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	delete(raw, "prompt_sha256")
	delete(raw, "prompt_file")
	delete(raw, "limit")
	old := filepath.Join(tmp, "old.json")
	nb, _ := json.Marshal(raw)
	if err := os.WriteFile(old, nb, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, nil, append(append([]string{"eval"}, args(other, "2", "--baseline", old, "--max-drop", "100%")...), "--quiet")...)
	if r.code != exitOK || !strings.Contains(r.stderr, "records no prompt-file hash") {
		t.Errorf("baseline without a hash: exit %d (%s), stderr %q", r.code, r.msg, r.stderr)
	}
}

func TestParseFlags(t *testing.T) {
	if d, rel, err := parseDrop("0.25"); err != nil || d != 0.25 || rel {
		t.Fatalf("0.25: %v %v %v", d, rel, err)
	}
	if d, rel, err := parseDrop("5%"); err != nil || d != 0.05 || !rel {
		t.Fatalf("5%%: %v %v %v", d, rel, err)
	}
	for _, bad := range []string{"-1", "x", "150%", ""} {
		if _, _, err := parseDrop(bad); err == nil {
			t.Errorf("parseDrop(%q) accepted", bad)
		}
	}
	if tp, err := parseTypical("0.09, 0.3"); err != nil || tp.Epsilon != 0.09 || tp.Alpha != 0.3 {
		t.Fatalf("typical: %+v %v", tp, err)
	}
	for _, bad := range []string{"0.09", "a,b", ""} {
		if _, err := parseTypical(bad); err == nil {
			t.Errorf("parseTypical(%q) accepted", bad)
		}
	}
	c, err := parseTree("[[0],[1],[0,0]]")
	if err != nil || len(c) != 3 {
		t.Fatalf("inline tree: %v %v", c, err)
	}
	f := filepath.Join(t.TempDir(), "tree.json")
	os.WriteFile(f, []byte("[[0],[0,0],[0,0,0]]\n"), 0o644)
	if c, err := parseTree(f); err != nil || c.Depth() != 3 {
		t.Fatalf("tree file: %v %v", c, err)
	}
	if _, err := parseTree("[[0,0]]"); err == nil {
		t.Fatal("a tree missing a prefix was accepted")
	}
}

// TestEvalDamagedExport: a weight of the export with one flipped bit exits 1
// naming the file (it used to be evaluated, exit 0); an export without
// SHA256SUMS (an older drafter's) is evaluated with one warning line.
func TestEvalDamagedExport(t *testing.T) {
	if _, err := os.Stat(testutil.Stories260k()); err != nil {
		t.Skip("bundled model missing:", err)
	}
	dir := exportRandomHeads(t, "")
	base := []string{"eval", "--model", testutil.Stories260k(), "--drafter", dir, "--prompts", "../../data/prompts/stories-eval.jsonl",
		"--limit", "1", "--max-new-tokens", "8", "--mode", "chain", "--quiet"}
	weights := filepath.Join(dir, "vllm", "model.safetensors")
	b, err := os.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0x01 // the last weight's low mantissa bit
	if err := os.WriteFile(weights, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, nil, base...); r.code != exitError || !strings.Contains(r.msg, weights+" is damaged") {
		t.Fatalf("eval of an export with a flipped weight bit: exit %d: %s", r.code, r.msg)
	}
	old := exportRandomHeads(t, "")
	if err := os.Remove(filepath.Join(old, "SHA256SUMS")); err != nil {
		t.Fatal(err)
	}
	base[4] = old
	r := runCLI(t, nil, base...)
	if r.code != exitOK || strings.Count(r.stderr, "has no SHA256SUMS") != 1 {
		t.Fatalf("eval of an export without sums: exit %d: %s\nstderr: %s", r.code, r.msg, r.stderr)
	}
}
