package distill

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/filecache"
)

// TestKillAndResume runs the real binary, SIGKILLs it after 1, 2 and 3 shards
// have appeared (and once at a random early moment), reruns the same command
// each time, and compares the final shards and responses byte for byte with an
// uninterrupted run.
func TestKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the drafter binary")
	}
	dir := t.TempDir()
	bin := buildDrafter(t, dir)
	prompts := promptFile(t, dir)
	args := func(out string) []string {
		return []string{"distill", "--model", testutil.Stories260k(), "--prompts", prompts, "--out", out, "--quiet",
			"--temperature", "0.9", "--max-new-tokens", "48", "--samples-per-prompt", "6", "--seed", "5",
			"--batch", "3", "--shard-rows", "150", "--dtype", "float16"}
	}
	early := func(string) bool { time.Sleep(30 * time.Millisecond); return true }
	killAndResume(t, bin, dir, args, 5, []func(out string) bool{afterShard(1), afterShard(2), afterShard(3), early})
}

// afterShard is a kill point: once shard n exists.
func afterShard(n int) func(out string) bool {
	return func(out string) bool {
		_, err := os.Stat(filepath.Join(out, capture.ShardFileName(n)))
		return err == nil
	}
}

// killAndResume runs bin with args(out) into a reference directory (which
// must end with at least minShards shards), then into another one, SIGKILLing
// the run once each kill point holds and starting it again, and finally lets
// it finish; the two directories must hold the same bytes (compareDirs, and
// the extra files). It returns the number of runs killed, at least one.
func killAndResume(t *testing.T, bin, dir string, args func(out string) []string, minShards int, points []func(out string) bool, extra ...string) int {
	t.Helper()
	t.Setenv(filecache.EnvDir, t.TempDir()) // the runs must not touch the user's cache
	run := func(out string) {
		t.Helper()
		cmd := exec.Command(bin, args(out)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("drafter %s: %v\n%s", strings.Join(args(out), " "), err, b)
		}
	}
	ref := filepath.Join(dir, "ref")
	run(ref)
	refMan, err := capture.ReadManifest(ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(refMan.Shards) < minShards {
		t.Fatalf("the reference run wrote %d shards; the test needs more to kill in between", len(refMan.Shards))
	}

	out := filepath.Join(dir, "killed")
	kills := 0
	for n, reached := range points {
		cmd := exec.Command(bin, args(out)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		killed := false
	wait:
		for {
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("run before kill point %d failed: %v\n%s", n, err, stderr.String())
				}
				break wait
			default:
			}
			if reached(out) {
				cmd.Process.Signal(syscall.SIGKILL)
				<-exited
				killed = true
				break wait
			}
			time.Sleep(time.Millisecond)
		}
		if killed {
			kills++
		}
	}
	if kills == 0 {
		t.Fatal("no run was killed before it finished; the test proved nothing")
	}
	run(out) // resume to the end
	compareDirs(t, ref, out)
	for _, name := range extra {
		compareFiles(t, ref, out, name)
	}
	t.Logf("%d kills, %d shards", kills, len(refMan.Shards))
	return kills
}

// compareDirs fails unless captures a and b hold the same bytes: the
// manifest, the responses and every shard.
func compareDirs(t *testing.T, a, b string) {
	t.Helper()
	compareCaptures(t, a, b)
	compareFiles(t, a, b, capture.ManifestName)
}

// compareCaptures is compareDirs for runs whose manifests may differ where
// they describe the runs' circumstances (other --generator servers): the
// shards and responses must be the same bytes, the manifests list the same
// shards.
func compareCaptures(t *testing.T, a, b string) {
	t.Helper()
	ma, err := capture.ReadManifest(a)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := capture.ReadManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if !mb.Complete {
		t.Fatal("resumed capture is not complete")
	}
	if fmt.Sprint(ma.Shards) != fmt.Sprint(mb.Shards) || ma.Totals != mb.Totals {
		t.Fatalf("manifests list different shards:\n%v\n%v", ma.Shards, mb.Shards)
	}
	names := []string{ResponsesName}
	for _, s := range ma.Shards {
		names = append(names, s.File)
	}
	for _, n := range names {
		compareFiles(t, a, b, n)
	}
	entries, _ := os.ReadDir(b)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Fatalf("leftover %s", e.Name())
		}
	}
}

// compareFiles fails unless dir a and dir b hold the same bytes as name.
func compareFiles(t testing.TB, a, b, name string) {
	t.Helper()
	x, err := os.ReadFile(filepath.Join(a, name))
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(filepath.Join(b, name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Fatalf("%s differs between %s and %s", name, a, b)
	}
}
