package tensor

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestParallelCovers checks that every index is visited exactly once, in
// contiguous chunks of at least minChunk (but the last), including from
// concurrent and nested calls.
func TestParallelCovers(t *testing.T) {
	check := func(n, minChunk int) {
		seen := make([]atomic.Int32, n)
		var calls atomic.Int32
		Parallel(n, minChunk, func(lo, hi int) {
			calls.Add(1)
			if hi <= lo || (hi-lo < minChunk && hi != n) {
				t.Errorf("n=%d minChunk=%d: chunk [%d,%d)", n, minChunk, lo, hi)
			}
			for i := lo; i < hi; i++ {
				seen[i].Add(1)
			}
		})
		for i := range seen {
			if c := seen[i].Load(); c != 1 {
				t.Fatalf("n=%d minChunk=%d: index %d visited %d times", n, minChunk, i, c)
			}
		}
		if int(calls.Load()) > Workers() {
			t.Fatalf("n=%d: %d chunks, more than %d workers", n, calls.Load(), Workers())
		}
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, n := range []int{0, 1, 2, 3, 7, 100, 1001} {
				for _, mc := range []int{0, 1, 2, 50, 2000} {
					check(n, mc)
				}
			}
		}()
	}
	wg.Wait()
	// Nested calls do not deadlock and still cover everything.
	var total atomic.Int64
	Parallel(64, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			Parallel(64, 1, func(lo, hi int) { total.Add(int64(hi - lo)) })
		}
	})
	if total.Load() != 64*64 {
		t.Fatalf("nested: %d items, want %d", total.Load(), 64*64)
	}
}

// TestParallelChunks checks chunk indices and coverage.
func TestParallelChunks(t *testing.T) {
	for _, n := range []int{1, 2, 5, 64, 1000} {
		for _, chunks := range []int{1, 2, 3, 8} {
			seen := make([]atomic.Int32, n)
			idx := make([]atomic.Int32, chunks)
			ParallelChunks(n, chunks, func(c, lo, hi int) {
				if c < 0 || c >= chunks {
					t.Errorf("chunk index %d of %d", c, chunks)
					return
				}
				idx[c].Add(1)
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
			})
			for i := range seen {
				if seen[i].Load() != 1 {
					t.Fatalf("n=%d chunks=%d: index %d visited %d times", n, chunks, i, seen[i].Load())
				}
			}
			for c := range idx {
				if idx[c].Load() > 1 {
					t.Fatalf("n=%d chunks=%d: index %d used %d times", n, chunks, c, idx[c].Load())
				}
			}
		}
	}
}

// TestParallelAllocs checks that a call with a long-lived function allocates
// nothing.
func TestParallelAllocs(t *testing.T) {
	buf := make([]float32, 1<<16)
	fn := func(lo, hi int) { clear(buf[lo:hi]) }
	fc := func(_, lo, hi int) { clear(buf[lo:hi]) }
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // testing.AllocsPerRun would use 1
	mallocs := func(f func()) float64 {
		f()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := 0; i < 100; i++ {
			f()
		}
		runtime.ReadMemStats(&after)
		return float64((after.Mallocs - before.Mallocs) / 100) // whole allocations per call, as AllocsPerRun
	}
	if a := mallocs(func() { Parallel(len(buf), 1, fn) }); a != 0 {
		t.Errorf("Parallel allocates %v times per call", a)
	}
	if a := mallocs(func() { ParallelChunks(len(buf), 2, fc) }); a != 0 {
		t.Errorf("ParallelChunks allocates %v times per call", a)
	}
}

// TestParallelSpinAndPark covers the two ways a job reaches a worker: calls
// back to back (the worker is still spinning on the slot) and calls after
// pauses around and beyond spinFor (the worker parks, or stops spinning
// just as a job is offered, which the caller must then take back). Every
// call must cover its range exactly once and return.
func TestParallelSpinAndPark(t *testing.T) {
	pauses := []time.Duration{0, spinFor / 2, spinFor, spinFor + spinFor/4, 3 * spinFor, time.Millisecond}
	for round := 0; round < 20; round++ {
		for _, d := range pauses {
			time.Sleep(d)
			seen := make([]atomic.Int32, 64)
			ParallelChunks(64, 8, func(_, lo, hi int) {
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
			})
			for i := range seen {
				if c := seen[i].Load(); c != 1 {
					t.Fatalf("pause %v: index %d visited %d times", d, i, c)
				}
			}
		}
	}
}
