package distill

import (
	"context"
	"path/filepath"
	"testing"
)

// TestSizeBatch: the caches take the free memory less a tenth of the total,
// in whole sequences; nothing fits when the reserve exceeds the free memory.
func TestSizeBatch(t *testing.T) {
	for _, c := range []struct {
		free, total, perSeq int64
		fits                int
	}{
		{free: 1000, total: 1000, perSeq: 100, fits: 9},     // 900 usable
		{free: 950, total: 1000, perSeq: 100, fits: 8},      // 850 usable
		{free: 999, total: 1000, perSeq: 300, fits: 2},      // 899 usable
		{free: 90, total: 1000, perSeq: 1, fits: 0},         // below the reserve
		{free: 8 << 30, total: 8 << 30, perSeq: 0, fits: 0}, // no per-sequence size: none claimed
	} {
		bm := sizeBatch(7, c.free, c.total, c.perSeq)
		if bm.fits != c.fits || bm.reserve != c.total/10 || bm.weights != 7 {
			t.Errorf("free %d total %d per sequence %d: %d fit, reserve %d; want %d fit, reserve %d", c.free, c.total, c.perSeq, bm.fits, bm.reserve, c.fits, c.total/10)
		}
	}
}

// TestResumedBatch: the batch a run used is read back from its manifest by
// the run that resumes it (not with --force, nor where there is no
// capture), so that a batch chosen from free memory repeats its block
// schedule whatever the free memory is then.
func TestResumedBatch(t *testing.T) {
	tg := loadStories(t)
	dir := t.TempDir()
	opt := baseOptions(promptFile(t, dir), filepath.Join(dir, "out"))
	if b, ok := resumedBatch(&opt); ok {
		t.Fatalf("no capture: batch %d", b)
	}
	opt.Batch = 5
	opt.Sampling.MaxNewTokens = intp(2)
	if _, err := Run(context.Background(), tg, opt); err != nil {
		t.Fatal(err)
	}
	if b, ok := resumedBatch(&Options{Out: opt.Out}); !ok || b != 5 {
		t.Fatalf("resumed batch %d %v, want 5", b, ok)
	}
	if b, ok := resumedBatch(&Options{Out: opt.Out, Force: true}); ok {
		t.Fatalf("--force: batch %d", b)
	}
}
