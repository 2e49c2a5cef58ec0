package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.json")
	if err := WriteJSON(p, map[string]int{"x": 1}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{\n  \"x\": 1\n}\n" {
		t.Fatalf("content %q", b)
	}
	// A failing writer leaves the old content and no temporary file behind.
	boom := errors.New("boom")
	err := Write(p, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{\n  \"x\": 1\n}\n" {
		t.Fatalf("old content lost: %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only a.json", len(ents))
	}
}

func TestWriteIntoMissingDirFails(t *testing.T) {
	if err := WriteFile(filepath.Join(t.TempDir(), "no", "such", "f"), []byte("x")); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// TestCreateStreams: Create with a fixed temporary name (capture's
// protocol) writes there until Commit renames it, and Abort leaves the
// destination as it was and no temporary file.
func TestCreateStreams(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "shard.arrow")
	a, err := Create(p, Options{Temp: "shard.arrow.tmp", StrictDirSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ab", "cd"} {
		if _, err := a.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "shard.arrow.tmp")); string(b) != "abcd" || a.Size() != 4 {
		t.Fatalf("temporary file holds %q (size %d), want abcd", b, a.Size())
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the destination exists before Commit")
	}
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	a.Abort() // after Commit: nothing
	if b, _ := os.ReadFile(p); string(b) != "abcd" {
		t.Fatalf("committed %q", b)
	}
	b, err := Create(p, Options{Temp: "shard.arrow.tmp"})
	if err != nil {
		t.Fatal(err)
	}
	b.Write([]byte("other"))
	b.Abort()
	if got, _ := os.ReadFile(p); string(got) != "abcd" {
		t.Fatalf("after Abort the destination holds %q", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only the destination", len(ents))
	}
}
