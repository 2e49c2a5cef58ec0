package train

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/capture/distill"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/target"
)

// TestOnDistilledData trains both methods on a capture made by the real
// producer, capture/distill (default layers: the EAGLE-3 ones plus
// final_norm), so the manifest fingerprint and columns it writes are the ones
// Run checks.
func TestOnDistilledData(t *testing.T) {
	tg, err := target.Load(modelDir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	tmp := t.TempDir()
	prompts := writePrompts(t, tmp, shardPrompts[:10])
	n := 32
	dir := filepath.Join(tmp, "cap")
	if _, err := distill.Run(context.Background(), tg, distill.Options{Prompts: prompts, Out: dir, SamplesPerPrompt: 2, Seed: 3, Batch: 4,
		Sampling: generate.Overrides{MaxNewTokens: &n}, DType: capture.Float16}); err != nil {
		t.Fatal(err)
	}
	fp := modelFingerprint(t)
	for _, m := range []string{methodMedusa, methodEAGLE3} {
		out := filepath.Join(tmp, "out-"+m)
		res, err := Run(context.Background(), Options{Method: small(m), Model: modelDir, Data: []string{dir}, Out: out})
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		if res.Steps == 0 {
			t.Errorf("%s: no steps", m)
		}
		checkProvenance(t, out, m, fp, dir)
	}
}

// writePrompts writes prompts as a JSONL prompt file in dir.
func writePrompts(t *testing.T, dir string, prompts []string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range prompts {
		j, _ := json.Marshal(map[string]string{"prompt": p})
		b.Write(j)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
