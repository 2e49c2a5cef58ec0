package filecache

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

type result struct{ Sum string }

func TestGetPut(t *testing.T) {
	dir := t.TempDir()
	c := New(filepath.Join(dir, "cache"))
	path := filepath.Join(dir, "weights.bin")
	if err := os.WriteFile(path, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	id, err := Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var got result
	if c.Get("digest", id, &got) {
		t.Fatal("hit in an empty cache")
	}
	if err := c.Put("digest", id, result{"s1"}); err != nil {
		t.Fatal(err)
	}
	if !c.Get("digest", id, &got) || got.Sum != "s1" {
		t.Fatalf("Get after Put = %+v", got)
	}
	if c.Get("other-kind", id, &got) {
		t.Fatal("an entry of one kind served for another")
	}

	// Same size, modification time restored (as cp -p or rsync -t would):
	// the change time still differs, so the entry must not be served.
	old, _ := os.Stat(path)
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(path, []byte("xyz"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, old.ModTime(), old.ModTime()); err != nil {
		t.Fatal(err)
	}
	id2, err := Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if id2 == id {
		t.Skip("this filesystem keeps no change time; identity cannot tell the rewrite")
	}
	if c.Get("digest", id2, &got) {
		t.Fatal("entry served for a file rewritten with the same size and modification time")
	}
}

func TestPutRefusesChangedFile(t *testing.T) {
	dir := t.TempDir()
	c := New(filepath.Join(dir, "cache"))
	path := filepath.Join(dir, "f")
	os.WriteFile(path, []byte("one"), 0o644)
	before, err := Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(path, []byte("two!"), 0o644)
	if err := c.Put("digest", before, result{"stale"}); err == nil {
		t.Fatal("Put stored a result for a file that changed while it was read")
	}
	now, _ := Stat(path)
	var got result
	if c.Get("digest", now, &got) || c.Get("digest", before, &got) {
		t.Fatal("a result for changed bytes was stored")
	}
}

func TestNilAndCorrupt(t *testing.T) {
	var c *Cache
	var got result
	if c.Get("k", Identity{Path: "/x"}, &got) || c.Put("k", Identity{Path: "/x"}, result{}) != nil {
		t.Fatal("nil cache must cache nothing, silently")
	}
	if New("") != nil {
		t.Fatal(`New("") must disable the cache`)
	}
	dir := t.TempDir()
	c = New(dir)
	path := filepath.Join(dir, "f")
	os.WriteFile(path, []byte("one"), 0o644)
	id, _ := Stat(path)
	if err := c.Put("k", id, result{"v"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.file("k", id.Path), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.Get("k", id, &got) {
		t.Fatal("a corrupt entry was served")
	}
}

func TestDir(t *testing.T) {
	if Dir("/tmp/x") != "/tmp/x" {
		t.Fatal("override ignored")
	}
	t.Setenv("XDG_CACHE_HOME", "/tmp/xdg")
	t.Setenv("HOME", "/tmp/home")
	if d := Dir(""); d != "/tmp/xdg/drafter" && d != "/tmp/home/Library/Caches/drafter" {
		t.Fatalf("Dir = %q", d)
	}
}
