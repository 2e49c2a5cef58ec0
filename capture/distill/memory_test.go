package distill

import "testing"

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
