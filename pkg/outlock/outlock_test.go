package outlock

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// holdEnv makes the test binary a helper that takes the lock of the folder it
// names, says "locked" and waits to be killed.
const holdEnv = "OUTLOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		if _, err := Acquire(dir, "drafter helper"); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("locked")
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func busyError(t *testing.T, err error) *BusyError {
	t.Helper()
	var be *BusyError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v, want a *BusyError", err)
	}
	return be
}

func TestSecondAcquireIsBusy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	l, err := Acquire(dir, "drafter train")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir, "drafter distill")
	be := busyError(t, err)
	if be.Owner.PID != os.Getpid() || be.Owner.Command != "drafter train" || be.Owner.Host != hostname(t) || be.Unverifiable {
		t.Fatalf("busy error %+v", be)
	}
	for _, want := range []string{dir + " is in use by \"drafter train\"", fmt.Sprintf("pid %d on host %s", os.Getpid(), hostname(t)),
		"started " + time.Now().Format("2006-01-02"), "wait for it to finish, or use another --out"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file after Release: %v", err)
	}
	l2, err := Acquire(dir, "drafter distill")
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
	l2.Release() // a second Release is harmless
}

// A folder Acquire created is removed on Release while it is empty, and kept
// once something was written into it.
func TestCreatedFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "out")
	l, err := Acquire(dir, "x")
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty folder made by Acquire left behind: %v", err)
	}
	l, err = Acquire(dir, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if _, err := os.Stat(filepath.Join(dir, "metrics.jsonl")); err != nil {
		t.Fatalf("folder with output removed: %v", err)
	}
}

// startHolder runs the test binary as a process holding dir's lock.
func startHolder(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	return cmd
}

// The lock of a process killed with SIGKILL ends with it: its leftover file
// does not block the next run, which records itself in it.
func TestKilledHolderDoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	cmd := startHolder(t, dir)
	_, err := Acquire(dir, "drafter train")
	if be := busyError(t, err); be.Owner.PID != cmd.Process.Pid || be.Owner.Command != "drafter helper" {
		t.Fatalf("busy error names %+v, want the helper, pid %d", be.Owner, cmd.Process.Pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		t.Fatalf("the killed holder left no lock file (the test proves nothing): %v", err)
	}
	l, err := Acquire(dir, "drafter train")
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	defer l.Release()
	_, o, err := readOwner(l.Path())
	if err != nil || o.PID != os.Getpid() || o.Command != "drafter train" {
		t.Fatalf("record after taking over: %+v, %v", o, err)
	}
}

// Many goroutines taking and releasing one folder's lock never hold it
// together: a Release deletes the file while a waiter may have it open, and
// the waiter must notice that its lock is on a deleted file.
func TestMutualExclusion(t *testing.T) {
	dir := t.TempDir()
	var holders, maxHolders, taken atomic.Int32
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 50; {
				l, err := Acquire(dir, "g")
				var be *BusyError
				if errors.As(err, &be) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				h := holders.Add(1)
				if h > maxHolders.Load() {
					maxHolders.Store(h)
				}
				time.Sleep(10 * time.Microsecond)
				holders.Add(-1)
				if err := l.Release(); err != nil {
					t.Error(err)
				}
				taken.Add(1)
				n++
			}
		}()
	}
	wg.Wait()
	if maxHolders.Load() != 1 || taken.Load() != 200 {
		t.Fatalf("%d holders at once (want 1), %d acquisitions", maxHolders.Load(), taken.Load())
	}
}

// writeRecord writes a lock record as another process would have.
func writeRecord(t *testing.T, path string, o Owner) {
	t.Helper()
	b, _ := json.Marshal(o)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// deadPID returns the id of a process that has ended.
func deadPID(t *testing.T) int {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// Where the filesystem refuses locks, the record is the lock: a record of a
// process of this host that has ended is taken over, a running one is busy,
// and another host's is reported with how to remove it.
func TestRecordFallback(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	host := hostname(t)
	me := Owner{PID: os.Getpid(), Host: host, Command: "drafter distill", Started: time.Now().UTC().Truncate(time.Second)}
	old := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

	writeRecord(t, path, Owner{PID: deadPID(t), Host: host, Command: "drafter train", Started: old})
	l, err := acquireByRecord(path, me)
	if err != nil {
		t.Fatalf("stale record of an ended process: %v", err)
	}
	if _, o, _ := readOwner(path); !o.same(me) {
		t.Fatalf("record after taking over: %+v", o)
	}
	_, err = acquireByRecord(path, Owner{PID: me.PID + 1, Host: host, Command: "y"})
	if be := busyError(t, err); !be.Owner.same(me) {
		t.Fatalf("held record: %+v", be)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("record after Release: %v", err)
	}

	helper := startHolder(t, t.TempDir()) // a running process of this host
	writeRecord(t, path, Owner{PID: helper.Process.Pid, Host: host, Command: "drafter train", Started: old})
	_, err = acquireByRecord(path, me)
	if be := busyError(t, err); be.Unverifiable || be.Owner.PID != helper.Process.Pid {
		t.Fatalf("record of a running process: %+v", be)
	}

	other := Owner{PID: 4242, Host: host + "-other", Command: "drafter train", Started: old}
	writeRecord(t, path, other)
	_, err = acquireByRecord(path, me)
	if be := busyError(t, err); !be.Unverifiable || !be.Owner.same(other) {
		t.Fatalf("another host's record: %+v", be)
	}
	for _, want := range []string{"pid 4242 on host " + other.Host, "if you know it has ended, delete " + path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}

	if err := os.WriteFile(path, []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = acquireByRecord(path, me)
	if be := busyError(t, err); be.Owner.PID != 0 || !be.NoOwner || !strings.Contains(err.Error(), "delete "+path) {
		t.Fatalf("unreadable record: %v", err)
	}
	// A lock taken without kernel locks and replaced by hand is not deleted
	// by its Release.
	os.Remove(path)
	l, err = acquireByRecord(path, me)
	if err != nil {
		t.Fatal(err)
	}
	writeRecord(t, path, other)
	l.Release()
	if _, o, _ := readOwner(path); !o.same(other) {
		t.Fatal("Release deleted another process's record")
	}
}

// Without kernel locks, a lock file that names no process (empty, garbage,
// a record without a usable pid or host) is not reported as a run to wait
// for: the message names the file to delete, and no later run is told to
// wait for a process that does not exist.
func TestRecordFallbackNamesNoProcess(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	me := Owner{PID: os.Getpid(), Host: hostname(t), Command: "drafter distill", Started: time.Now().UTC().Truncate(time.Second)}
	for _, content := range []string{"", "{garbage", "\x00\x00\x00\x00", "{}", `{"pid":-1,"host":"` + me.Host + `"}`,
		`{"pid":0,"host":"h"}`, `{"pid":1234}`, "null", `{"pid":"12"}`} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := acquireByRecord(path, me)
		be := busyError(t, err)
		if !be.NoOwner || be.Owner.PID != 0 {
			t.Errorf("%q: busy error %+v, want NoOwner and no owner", content, be)
		}
		msg := err.Error()
		for _, want := range []string{"delete " + path, "names no process", "no file locks"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%q: message %q does not say %q", content, msg, want)
			}
		}
		if strings.Contains(msg, "wait for it to finish") {
			t.Errorf("%q: message %q asks to wait for a process it cannot name", content, msg)
		}
		if b, _ := os.ReadFile(path); string(b) != content {
			t.Errorf("%q: the lock file was changed to %q; only its owner or the user may remove it", content, b)
		}
	}
}
