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
	t.Setenv(filecache.EnvDir, t.TempDir()) // the runs must not touch the user's cache
	dir := t.TempDir()
	bin := filepath.Join(dir, "drafter")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/drafter")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	prompts := promptFile(t, dir)
	args := func(out string) []string {
		return []string{"distill", "--model", storiesDir, "--prompts", prompts, "--out", out, "--quiet",
			"--temperature", "0.9", "--max-new-tokens", "48", "--samples-per-prompt", "6", "--seed", "5",
			"--batch", "3", "--shard-rows", "150", "--dtype", "float16"}
	}
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
	if len(refMan.Shards) < 5 {
		t.Fatalf("the reference run wrote %d shards; the test needs more to kill in between", len(refMan.Shards))
	}

	out := filepath.Join(dir, "killed")
	kills := 0
	for _, after := range []int{1, 2, 3, 0} {
		cmd := exec.Command(bin, args(out)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		target := filepath.Join(out, capture.ShardFileName(after))
		killed := false
	wait:
		for {
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("run before kill point %d failed: %v\n%s", after, err, stderr.String())
				}
				break wait
			default:
			}
			_, statErr := os.Stat(target)
			if after == 0 || statErr == nil {
				if after == 0 {
					time.Sleep(30 * time.Millisecond)
				}
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
	t.Logf("%d kills, %d shards", kills, len(refMan.Shards))
}

func compareDirs(t *testing.T, a, b string) {
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
		x, err := os.ReadFile(filepath.Join(a, n))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Fatalf("%s differs between the uninterrupted and the killed-and-resumed run", n)
		}
	}
	entries, _ := os.ReadDir(b)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Fatalf("leftover %s", e.Name())
		}
	}
}
