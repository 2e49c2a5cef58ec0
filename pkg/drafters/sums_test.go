package drafters

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSums: WriteSums writes sha256sum's format (what `sha256sum -c` reads),
// Check verifies every listed file that exists and names the first damaged
// one, and Covers names a needed file the sums do not list.
func TestSums(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "vllm"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"drafter.json": "{}\n", "vllm/model.safetensors": "weights"} {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteSums(dir, []string{"vllm/model.safetensors", "drafter.json"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	// sha256sum of "{}\n" and of "weights", sorted by path.
	want := "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356  drafter.json\n" +
		"9a129038d9a00aed0cf6a7ea059ca50a813449061ab87848cf1a13eafdf33b2c  vllm/model.safetensors\n"
	if string(raw) != want {
		t.Fatalf("%s:\n%s\nwant:\n%s", SumsFile, raw, want)
	}
	sums, err := FindSums(filepath.Join(dir, "vllm"), dir)
	if err != nil || sums == nil || sums.Path != filepath.Join(dir, SumsFile) {
		t.Fatalf("FindSums: %+v, %v", sums, err)
	}
	if done, err := sums.Check(); err != nil || len(done) != 2 {
		t.Fatalf("intact files: %v, %v", done, err)
	}
	if err := sums.Covers([]string{filepath.Join(dir, "vllm", "config.json")}); err == nil || !strings.Contains(err.Error(), "is not listed") {
		t.Fatalf("an unlisted config: %v", err)
	}
	w := filepath.Join(dir, "vllm", "model.safetensors")
	if err := os.WriteFile(w, []byte("weighs"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sums.Check(); err == nil || !strings.Contains(err.Error(), w+" is damaged") {
		t.Fatalf("a changed file: %v", err)
	}
	// A listed file that is gone is skipped by Check, refused by Covers.
	if err := os.Remove(w); err != nil {
		t.Fatal(err)
	}
	if _, err := sums.Check(); err != nil {
		t.Fatal(err)
	}
	if err := sums.Covers([]string{w}); err == nil {
		t.Fatal("Covers accepted a missing file")
	}
	if err := RemoveSums(dir); err != nil {
		t.Fatal(err)
	}
	if s, err := FindSums(dir); s != nil || err != nil {
		t.Fatalf("after RemoveSums: %+v, %v", s, err)
	}
}
