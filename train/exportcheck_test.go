package train

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/drafters"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
)

// exportForCheck writes an EAGLE-3 export of format into out/eagle3 with a
// drafter.json and SHA256SUMS beside it, as a training run leaves them.
func exportForCheck(t *testing.T, out, format string) string {
	t.Helper()
	g := deagle3.Geometry{Hidden: 8, Heads: 2, KVHeads: 1, HeadDim: 4, Intermediate: 12, RMSNormEps: 1e-5,
		RopeTheta: 10000, MaxPositions: 64, Vocab: 16, DraftVocab: 10}
	counts := make([]int64, g.Vocab)
	for i := range counts {
		counts[i] = int64(i % 5)
	}
	voc, err := deagle3.BuildVocab(counts, g.DraftVocab)
	if err != nil {
		t.Fatal(err)
	}
	p := deagle3.NewParams(g)
	dir := filepath.Join(out, "eagle3")
	if err := deagle3.Export(dir, g, p, voc, deagle3.ExportOptions{Format: format, LayerIDs: []int{1, 3, 5}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, ProvenanceFile), []byte(`{"method":"eagle3"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := drafters.WriteSums(out, []string{ProvenanceFile, "eagle3/config.json", "eagle3/model.safetensors"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCheckExports: train keeps an export every engine loads as it is, and
// removes one an engine would run wrong (here a speculators config without
// norm_before_residual, which vLLM then takes as true), with drafter.json
// and SHA256SUMS, naming the finding; the checkpoint is not touched.
func TestCheckExports(t *testing.T) {
	out := t.TempDir()
	dir := exportForCheck(t, out, deagle3.FormatSpeculators)
	if err := checkExports(out, []string{dir}, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal("a passing export was removed:", err)
	}

	cfgPath := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "norm_before_residual")
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(out, CheckpointFile)
	if err := os.WriteFile(ckpt, []byte("state"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = checkExports(out, []string{dir}, 5)
	if err == nil || !strings.Contains(err.Error(), "error: vllm: "+cfgPath+": norm_before_residual:") {
		t.Fatalf("err %v, want the norm_before_residual finding", err)
	}
	for _, gone := range []string{dir, filepath.Join(out, ProvenanceFile), filepath.Join(out, drafters.SumsFile)} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", gone, err)
		}
	}
	if _, err := os.Stat(ckpt); err != nil {
		t.Error("checkpoint removed:", err)
	}
}
