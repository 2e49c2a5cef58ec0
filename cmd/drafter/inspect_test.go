package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// TestInspectDrafter: inspect --drafter verifies the export's files against
// its SHA256SUMS: every file listed, and a flipped bit exits 1 naming the
// file; an export without sums is shown with a warning.
func TestInspectDrafter(t *testing.T) {
	if _, err := os.Stat(testutil.Stories260k()); err != nil {
		t.Skip("bundled model missing:", err)
	}
	dir := exportRandomHeads(t, "")
	r := runCLI(t, nil, "inspect", "--drafter", dir)
	if r.code != exitOK || !strings.Contains(r.out, "medusa (vllm layout)") || !strings.Contains(r.out, "5 files match "+filepath.Join(dir, "SHA256SUMS")) {
		t.Fatalf("inspect --drafter: exit %d: %s\n%s", r.code, r.msg, r.out)
	}
	r = runCLI(t, nil, "inspect", "--drafter", dir, "--json")
	var rep struct {
		Verified []string `json:"verified_files"`
	}
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil || len(rep.Verified) != 5 {
		t.Fatalf("inspect --drafter --json: %v\n%s", err, r.out)
	}
	heads := filepath.Join(dir, "medusa", "medusa_lm_head.safetensors")
	b, err := os.ReadFile(heads)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0x40
	if err := os.WriteFile(heads, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, nil, "inspect", "--drafter", dir); r.code != exitError || !strings.Contains(r.msg, heads+" is damaged") {
		t.Fatalf("inspect --drafter of a damaged export: exit %d: %s", r.code, r.msg)
	}
	old := exportRandomHeads(t, "")
	if err := os.Remove(filepath.Join(old, "SHA256SUMS")); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, nil, "inspect", "--drafter", old); r.code != exitOK || !strings.Contains(r.out, "checksums:         none") {
		t.Fatalf("inspect --drafter of an export without sums: exit %d: %s\n%s", r.code, r.msg, r.out)
	}
	for _, args := range [][]string{{"inspect"}, {"inspect", "--model", "m", "--drafter", "d"}} {
		if r := runCLI(t, nil, args...); r.code != exitUsage {
			t.Errorf("drafter %s: exit %d, want %d", strings.Join(args, " "), r.code, exitUsage)
		}
	}
}
