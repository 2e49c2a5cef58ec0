package distill

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/target"
)

// snapshot returns the content and modification time of every file in dir.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = st.ModTime().String() + "\x00" + string(b)
	}
	return out
}

// TestResumeRefusesAnotherCheckpoint: a distill interrupted after a shard and
// rerun with --model pointing at a copy whose decoder weights were scaled by
// 0.9 (a body-only fine-tune) is refused, the error names both fingerprints,
// and nothing in the output changes.
func TestResumeRefusesAnotherCheckpoint(t *testing.T) {
	orig := loadStories(t)
	tunedDir := testutil.CopyDir(t, testutil.Stories260k())
	testmodel.ScaleBody(t, tunedDir, 0.9)
	tuned, err := target.Load(tunedDir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tuned.Close()
	if tuned.Fingerprint == orig.Fingerprint {
		t.Fatalf("the body-tuned copy has the original's fingerprint %s", orig.Fingerprint)
	}

	dir := t.TempDir()
	opt := baseOptions(promptFile(t, dir), filepath.Join(dir, "out"))
	opt.Batch, opt.ShardRows, opt.SamplesPerPrompt = 2, 80, 4
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for ctx.Err() == nil {
			if _, err := os.Stat(filepath.Join(opt.Out, capture.ShardFileName(0))); err == nil {
				cancel()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, err = Run(ctx, orig, opt)
	cancel()
	man, merr := capture.ReadManifest(opt.Out)
	if merr != nil {
		t.Fatal(merr)
	}
	// The run is normally cut after its first shard; a complete capture
	// must be refused just the same.
	t.Logf("first run: %v; %d samples stored, complete %v", err, man.Totals.Samples, man.Complete)

	before := snapshot(t, opt.Out)
	_, err = Run(context.Background(), tuned, opt)
	if err == nil {
		t.Fatal("resuming with another checkpoint was accepted")
	}
	t.Log(err)
	for _, want := range []string{"made from another checkpoint", orig.Fingerprint, tuned.Fingerprint, opt.Out, "--model", "--force"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if after := snapshot(t, opt.Out); !maps.Equal(before, after) {
		t.Error("the refused run changed the output folder")
	}
}
