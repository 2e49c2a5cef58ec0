package eval

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/generate"
)

// handEdited deletes the SHA256SUMS beside path (in its folder and the one
// above), so that a test's deliberate edit of an export reaches the check it
// is about, as in an export from before the sums; TestDamagedExportRefused
// covers the sums themselves.
func handEdited(t *testing.T, path string) {
	t.Helper()
	for _, d := range []string{filepath.Dir(path), filepath.Dir(filepath.Dir(path))} {
		if err := os.Remove(filepath.Join(d, drafters.SumsFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// editJSON is testutil.EditJSON of an export's file, as a hand edit.
func editJSON(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	testutil.EditJSON(t, path, edit)
	handEdited(t, path)
}

// TestDamagedExportRefused: one flipped bit of an exported file (a weight,
// a config, drafter.json) fails Detect, and so drafter eval, naming the file
// and the SHA256SUMS that records it (it used to be evaluated, exit 0); an
// export without SHA256SUMS is evaluated with one warning line.
func TestDamagedExportRefused(t *testing.T) {
	m := loadTarget(t)
	for _, file := range []string{"vllm/model.safetensors", "medusa/medusa_lm_head.safetensors", "vllm/config.json", "drafter.json"} {
		dir := medusaExport(t, m, 3, 1, "")
		if _, err := Detect(dir); err != nil {
			t.Fatalf("intact export: %v", err)
		}
		path := filepath.Join(dir, filepath.FromSlash(file))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-3] ^= 0x10 // the last weight's bytes; a character of a JSON file
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = Detect(dir)
		if err == nil || !strings.Contains(err.Error(), path+" is damaged") || !strings.Contains(err.Error(), filepath.Join(dir, drafters.SumsFile)) {
			t.Errorf("%s with a flipped bit: %v, want it refused naming the file", file, err)
		}
	}

	// Without the sums (an older export): evaluated, with one warning.
	dir := medusaExport(t, m, 3, 1, "")
	if err := os.Remove(filepath.Join(dir, drafters.SumsFile)); err != nil {
		t.Fatal(err)
	}
	info, err := Detect(dir)
	if err != nil {
		t.Fatalf("export without sums: %v", err)
	}
	if !strings.Contains(info.Warning, "has no "+drafters.SumsFile) || strings.Count(info.Warning, "\n") != 0 {
		t.Fatalf("warning %q, want one line saying the files are not checked", info.Warning)
	}
}

// TestEvaluateWarnsOnce: Evaluate prints the warning about an export
// without sums once, to Log.
func TestEvaluateWarnsOnce(t *testing.T) {
	m := loadTarget(t)
	dir := medusaExport(t, m, 2, 1, "")
	if err := os.Remove(filepath.Join(dir, drafters.SumsFile)); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	n := 8
	_, err := Evaluate(context.Background(), Options{ModelDir: testutil.Stories260k(), DrafterDir: dir, PromptsPath: evalPrompts,
		Limit: 1, AllowMismatch: true, Log: &log, Sampling: generate.Overrides{MaxNewTokens: &n}, Config: Config{Mode: ModeChain}}, &bytes.Buffer{})
	if err != nil {
		var ge *GateError
		if !errors.As(err, &ge) {
			t.Fatal(err)
		}
	}
	if n := strings.Count(log.String(), "has no "+drafters.SumsFile); n != 1 {
		t.Fatalf("log %q: want the warning once", log.String())
	}
}
