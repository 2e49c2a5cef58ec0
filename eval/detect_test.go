package eval

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/drafters"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
)

// writeProvenance writes a drafter.json into dir that records only the target
// fingerprint fp (nothing else to check the export against).
func writeProvenance(t *testing.T, dir, fp string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"target_fingerprint": fp})
	if err := os.WriteFile(filepath.Join(dir, "drafter.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	handEdited(t, filepath.Join(dir, "drafter.json"))
}

// TestDetectLayouts exports drafters in every layout and checks that Detect
// finds each one, from the train output folder and from the export itself,
// with the fingerprint recorded beside it, and that each loads.
func TestDetectLayouts(t *testing.T) {
	m := loadTarget(t)
	heads := medusaHeads(randomMedusa(t, m, 3, 5))
	medRoot := t.TempDir()
	if err := dmedusa.Export(medRoot, heads, dmedusa.ExportInfo{TargetFingerprint: "fp-medusa"}); err != nil {
		t.Fatal(err)
	}
	g, p, voc := randomEagleParams(t, m, 100, 6)
	eagleRoot := t.TempDir()
	for dir, format := range map[string]string{"eagle3": deagle3.FormatNative, "speculators": deagle3.FormatSpeculators} {
		if err := deagle3.Export(filepath.Join(eagleRoot, dir), g, p, voc, deagle3.ExportOptions{Format: format, DefaultLayers: true}); err != nil {
			t.Fatal(err)
		}
	}
	writeProvenance(t, eagleRoot, "fp-eagle")

	cases := []struct {
		dir          string
		kind         drafters.Kind
		layout, from string
		fp           string
	}{
		{medRoot, dmedusa.Kind, dmedusa.VLLMDir, "vllm", "fp-medusa"},
		{filepath.Join(medRoot, "vllm"), dmedusa.Kind, dmedusa.VLLMDir, "vllm", "fp-medusa"},
		{filepath.Join(medRoot, "medusa"), dmedusa.Kind, dmedusa.MedusaDir, "medusa", "fp-medusa"},
		{eagleRoot, deagle3.Kind, deagle3.FormatNative, "eagle3", "fp-eagle"},
		{filepath.Join(eagleRoot, "eagle3"), deagle3.Kind, deagle3.FormatNative, "eagle3", "fp-eagle"},
		{filepath.Join(eagleRoot, "speculators"), deagle3.Kind, deagle3.FormatSpeculators, "speculators", "fp-eagle"},
	}
	for _, c := range cases {
		info, err := Detect(c.dir)
		if err != nil {
			t.Fatalf("%s: %v", c.dir, err)
		}
		if info.Kind != c.kind || info.Layout != c.layout || filepath.Base(info.Dir) != c.from || info.TargetFingerprint != c.fp {
			t.Fatalf("%s: detected %+v; want kind %s, layout %s in %s/, fingerprint %s", c.dir, info, c.kind, c.layout, c.from, c.fp)
		}
		d, err := LoadDrafter(info, m)
		if err != nil {
			t.Fatalf("%s: %v", c.dir, err)
		}
		if c.kind == dmedusa.Kind && medusaHeads(d).Heads != 3 || c.kind == deagle3.Kind && eagleDraft(d).Geometry.DraftVocab != 100 {
			t.Fatalf("%s: loaded the wrong drafter", c.dir)
		}
	}
}

func TestDetectErrors(t *testing.T) {
	m := loadTarget(t)
	empty := t.TempDir()
	os.MkdirAll(filepath.Join(empty, "logs"), 0o755)
	if _, err := Detect(empty); err == nil || !strings.Contains(err.Error(), "holds no drafter") {
		t.Fatalf("empty folder: %v", err)
	}
	if _, err := Detect(filepath.Join(empty, "missing")); err == nil {
		t.Fatal("missing folder detected")
	}
	both := t.TempDir()
	if err := dmedusa.Export(both, medusaHeads(randomMedusa(t, m, 2, 1)), dmedusa.ExportInfo{}); err != nil {
		t.Fatal(err)
	}
	g, p, voc := randomEagleParams(t, m, 50, 2)
	if err := deagle3.Export(filepath.Join(both, "eagle3"), g, p, voc, deagle3.ExportOptions{DefaultLayers: true}); err != nil {
		t.Fatal(err)
	}
	_, err := Detect(both)
	if err == nil || !strings.Contains(err.Error(), "two kinds") || !strings.Contains(err.Error(), "medusa in") || !strings.Contains(err.Error(), "eagle3 in") {
		t.Fatalf("two kinds in one folder: %v", err)
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "config.json"), []byte(`{"speculators_model_type": "mlp"}`), 0o644)
	if _, err := Detect(bad); err == nil || !strings.Contains(err.Error(), `"mlp"`) {
		t.Fatalf("unsupported speculator: %v", err)
	}
}

// TestStaleDrafter: a drafter bound to another fingerprint is refused with a
// message naming both fingerprints, both folders and the way out.
func TestStaleDrafter(t *testing.T) {
	dir := t.TempDir()
	g, p, voc := randomEagleParams(t, loadTarget(t), 50, 2)
	if err := deagle3.Export(filepath.Join(dir, "eagle3"), g, p, voc, deagle3.ExportOptions{DefaultLayers: true}); err != nil {
		t.Fatal(err)
	}
	writeProvenance(t, dir, "0123old")
	info, err := Detect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFingerprint(info, "models/x", "0123old"); err != nil {
		t.Fatalf("matching fingerprint refused: %v", err)
	}
	err = CheckFingerprint(info, "models/new-sft", "4567new")
	var se *StaleError
	if !errors.As(err, &se) {
		t.Fatalf("stale drafter: got %v", err)
	}
	for _, want := range []string{"stale", "0123old", "4567new", "models/new-sft", filepath.Join(dir, "eagle3"), "drafter.json", "--allow-mismatch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("stale error lacks %q: %v", want, err)
		}
	}
	if err := CheckFingerprint(&DrafterInfo{Dir: dir}, "m", "x"); err != nil {
		t.Fatalf("a drafter without provenance is refused: %v", err)
	}
}
