package optim

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMetricsResumeKeepsLinesUpToStep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	l, err := OpenMetrics(path, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{1, 2, 3, 3, 4} {
		if err := l.Write(map[string]int{"step": s}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	if err := os.WriteFile(path, append(must(os.ReadFile(path)), []byte("{\"step\":5\n")...), 0o644); err != nil { // a torn last line
		t.Fatal(err)
	}
	l, err = OpenMetrics(path, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	l.Write(map[string]int{"step": 4})
	l.Close()
	if got, want := string(must(os.ReadFile(path))), "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"step\":3}\n{\"step\":4}\n"; got != want {
		t.Fatalf("resumed log:\n%s\nwant:\n%s", got, want)
	}
	// A fresh run (no resume) starts an empty log.
	l, _ = OpenMetrics(path, 3, false)
	l.Close()
	if b := must(os.ReadFile(path)); len(b) != 0 {
		t.Fatalf("fresh log holds %q", b)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
