package model

import (
	"runtime"
	"testing"
)

// TestSplitMatchesUnsplit checks that splitting the products and attention
// heads across the workers computes what one backend call per product does,
// on a random model large enough to take every split path: prefill (BLAS
// attention, row blocks), a tree, and batched decode, with taps.
func TestSplitMatchesUnsplit(t *testing.T) {
	cfg := Bench60MConfig()
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.VocabSize = 128, 384, 2, 700
	cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim = 4, 2, 32
	type step struct {
		toks    [][]int
		parents []int
	}
	prompt := make([]int, 150)
	for i := range prompt {
		prompt[i] = (i*37 + 5) % cfg.VocabSize
	}
	runAll := func(split bool) [][]float32 {
		m, err := NewRandom(cfg, 7, nil)
		if err != nil {
			t.Fatal(err)
		}
		m.split = split
		a, b := mustSeq(t, m, 256), mustSeq(t, m, 256)
		opt := Options{Taps: []int{1, 2}}
		var outs [][]float32
		add := func(batch []Input) {
			logits, res := run(t, m, batch, opt)
			outs = append(outs, logits...)
			for i := range opt.Taps {
				outs = append(outs, append([]float32(nil), res.Hidden[i]...))
			}
		}
		add([]Input{{Seq: a, Tokens: prompt, Logits: LogitsAll}, {Seq: b, Tokens: prompt[:40]}})
		add([]Input{{Seq: a, Tokens: []int{3}}, {Seq: b, Tokens: []int{9}}})
		add([]Input{{Seq: a, Tokens: []int{4}}})
		add([]Input{{Seq: b, Tokens: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, Parents: []int{-1, 0, 0, 1, 1, 2, 3, 3, 4, -1}}})
		return outs
	}
	want, got := runAll(false), runAll(true)
	for i := range want {
		if d := maxDiff(got[i], want[i]); d > 1e-5 {
			t.Fatalf("output %d: split differs from unsplit by %g", i, d)
		}
	}
}

// TestSplitDecodeDoesNotAllocate checks the split decode path (products large
// enough to go to the workers) allocates nothing in steady state.
func TestSplitDecodeDoesNotAllocate(t *testing.T) {
	cfg := Bench60MConfig()
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.VocabSize = 128, 384, 2, 700
	cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim = 4, 2, 32
	m, err := NewRandom(cfg, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.split = true
	a, b := mustSeq(t, m, 300), mustSeq(t, m, 300)
	batch := []Input{{Seq: a, Tokens: []int{1, 2, 3, 4, 5, 6, 7, 8, 9}}, {Seq: b, Tokens: []int{4, 5}}}
	run(t, m, batch, Options{})
	batch[0].Tokens, batch[1].Tokens = []int{3}, []int{4}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // testing.AllocsPerRun would use 1
	for _, n := range []int{1, 2} {
		if a := mallocsPerRun(50, func() {
			if _, err := m.Forward(batch[:n], Options{}); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("split decode of %d sequences allocates %v times per step", n, a)
		}
	}
}

// mallocsPerRun is testing.AllocsPerRun without its GOMAXPROCS(1), so that
// the work is really handed to the workers.
func mallocsPerRun(runs int, f func()) float64 {
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < runs; i++ {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64((after.Mallocs - before.Mallocs) / uint64(runs)) // whole allocations per run, as AllocsPerRun
}
