package train

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/drafters"
)

// checkSums checks that out's SHA256SUMS lists exactly files (the exports
// and drafter.json), each with its current SHA-256.
func checkSums(t *testing.T, out string, files ...string) {
	t.Helper()
	sums, err := drafters.FindSums(out)
	if err != nil || sums == nil {
		t.Fatalf("%s holds no readable %s: %v", out, drafters.SumsFile, err)
	}
	done, err := sums.Check()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(done, slices.Sorted(slices.Values(files))) || len(sums.Files) != len(files) {
		t.Fatalf("%s lists %v, want %v", sums.Path, done, files)
	}
}

// TestResumeWithoutCheckpointRefused: --resume into a folder that holds no
// checkpoint is refused naming the missing file, and leaves the folder's
// earlier exports alone (it used to start from step 0 and replace them).
func TestResumeWithoutCheckpointRefused(t *testing.T) {
	fp := modelFingerprint(t)
	dir := filepath.Join(t.TempDir(), "cap")
	writeCapture(t, dir, fp, distil(t, 4), []int{1, 3, 5}, true)
	out := t.TempDir()
	prov := filepath.Join(out, ProvenanceFile)
	earlier := []byte(`{"method": "medusa", "note": "an earlier export"}` + "\n")
	if err := os.WriteFile(prov, earlier, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Run(ctx, Options{Method: smallMedusa(), Model: modelDir, Data: []string{dir}, Out: out, Resume: true,
		Progress: &cancelOn{text: "eval ", cancel: cancel}})
	ckpt := filepath.Join(out, CheckpointFile)
	if err == nil || errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), ckpt+" does not exist") || !strings.Contains(err.Error(), "without --resume") {
		t.Fatalf("--resume without a checkpoint: %v, want a refusal naming %s", err, ckpt)
	}
	if b, _ := os.ReadFile(prov); !bytes.Equal(b, earlier) {
		t.Errorf("the refused resume rewrote %s:\n%s", prov, b)
	}
	for _, f := range []string{"metrics.jsonl", CheckpointFile, ArgsFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err == nil {
			t.Errorf("the refused resume wrote %s", f)
		}
	}
}

// greedyCapture writes a capture whose manifest records greedy decoding as
// drafter distill does: temperature 0 in the generation block, and again
// in args.sampling.
func greedyCapture(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cap")
	writeCapture(t, dir, modelFingerprint(t), distil(t, 12), []int{1, 3, 5}, true)
	m, err := capture.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Generation = map[string]any{"temperature": 0, "top_p": 1, "top_k": 0, "min_p": 0, "decoding": "greedy"}
	m.Args["sampling"] = "temperature=0 top_p=1 top_k=0 min_p=0"
	if err := capture.WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestManifestBitFlipRefused: one flipped bit of manifest.json (the greedy
// temperature 0 becomes 1, which trains EAGLE-3 toward τ = 1 instead of 0.5)
// is refused before training, naming the manifest: by its checksum, and in a
// manifest from before checksums by the temperature args.sampling records
// too. An intact manifest without a checksum trains, with one note.
func TestManifestBitFlipRefused(t *testing.T) {
	dir := greedyCapture(t)
	path := filepath.Join(dir, capture.ManifestName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(good, []byte(`"temperature": 0`))
	if i < 0 {
		t.Fatalf("no greedy temperature in\n%s", good)
	}
	flipped := bytes.Clone(good)
	flipped[i+len(`"temperature": `)] ^= 1 // '0' (0x30) becomes '1'
	run := func(what string) (error, string) {
		t.Helper()
		var notes bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err := Run(ctx, Options{Method: smallEAGLE3(), Model: modelDir, Data: []string{dir}, Out: filepath.Join(t.TempDir(), "out"),
			Progress: &cancelOn{text: "eval ", cancel: cancel}, Notes: &notes})
		return err, notes.String()
	}
	if err := os.WriteFile(path, flipped, 0o644); err != nil {
		t.Fatal(err)
	}
	if err, _ := run("flipped"); err == nil || errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), path+" is damaged") {
		t.Fatalf("a manifest with a flipped bit: %v, want it refused as damaged, naming %s", err, path)
	}
	testutil.EditJSON(t, path, func(m map[string]any) { delete(m, "sha256") })
	if err, _ := run("flipped, no checksum"); err == nil || errors.Is(err, context.Canceled) ||
		!strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "generation.temperature is 1") || !strings.Contains(err.Error(), `args.sampling temperature is "0"`) {
		t.Fatalf("a manifest without a checksum whose temperature disagrees with args.sampling: %v", err)
	}
	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.EditJSON(t, path, func(m map[string]any) { delete(m, "sha256") })
	err, notes := run("intact, no checksum")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("an intact manifest without a checksum: %v, want it trained on", err)
	}
	if n := strings.Count(notes, "no checksum"); n != 1 || !strings.Contains(notes, path) {
		t.Fatalf("notes %q: want one line naming %s", notes, path)
	}
}
