package model

import (
	"runtime"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// oneThread is cpu.DefaultBackend() saying that each of its calls runs on one
// thread, so that cpu.Products splits large products and the model
// splits attention heads over the workers.
type oneThread struct{ cpu.Backend }

func (oneThread) Threads() int { return 1 }

// unsplit is cpu.DefaultBackend() saying nothing of its threads, so that neither
// the products nor the attention heads are split over the workers.
type unsplit struct{ cpu.Backend }

// splitBackend returns cpu.DefaultBackend() with its products and attention split
// over the workers, or not.
func splitBackend(split bool) cpu.Backend {
	if split {
		return oneThread{cpu.DefaultBackend()}
	}
	return unsplit{cpu.DefaultBackend()}
}

// TestSplitMatchesUnsplit checks that splitting the products and attention
// heads across the workers computes what one backend call per product does,
// on a random model large enough to take every split path: prefill (BLAS
// attention, row blocks), a tree, and batched decode, with taps.
func TestSplitMatchesUnsplit(t *testing.T) {
	cfg := Bench60MConfig()
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.VocabSize = 128, 384, 2, 700
	cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim = 4, 2, 32
	prompt := make([]int, 150)
	for i := range prompt {
		prompt[i] = (i*37 + 5) % cfg.VocabSize
	}
	runAll := func(split bool) [][]float32 {
		m, err := NewRandom(cfg, 7, cpu.New(splitBackend(split)))
		if err != nil {
			t.Fatal(err)
		}
		if m.dev.(*cpu.Device).Products().ParallelCalls() != split {
			t.Fatalf("products split %v on %T, want %v", !split, m.dev.(*cpu.Device).Backend(), split)
		}
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
	m, err := NewRandom(cfg, 7, cpu.New(splitBackend(true)))
	if err != nil {
		t.Fatal(err)
	}
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

// TestLogitsFromHidden checks that logits computed from the tapped final
// hidden states of a tree pass equal the logits Forward computes for the same
// rows: bit for bit one row at a time against a one-row pass, and within
// float32 rounding for all rows at once against LogitsAll.
func TestLogitsFromHidden(t *testing.T) {
	m := loadModel(t, "stories260k")
	L, V, H := m.NumLayers(), m.VocabSize(), m.HiddenSize()
	prompt := []int{1, 403, 407, 261, 378, 350, 300, 45}
	toks := []int{100, 101, 102, 103, 104}
	parents := []int{-1, 0, 0, 1, -1}
	seq := mustSeq(t, m, 32)
	if _, err := m.Forward([]Input{{Seq: seq, Tokens: prompt}}, Options{}); err != nil {
		t.Fatal(err)
	}
	res, err := m.Forward([]Input{{Seq: seq, Tokens: toks, Parents: parents, Logits: LogitsAll}}, Options{Taps: []int{L}})
	if err != nil {
		t.Fatal(err)
	}
	all := append([]float32(nil), res.LogitsOf(0)...)
	hid := append([]float32(nil), res.HiddenOf(0, 0)...)
	got := make([]float32, len(toks)*V)
	if err := m.LogitsFromHidden(got, hid, len(toks)); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(got, all); d > 1e-5 {
		t.Fatalf("all rows: differ from Forward's logits by %g", d)
	}
	// Row 3 (node 3, path 0-1-3) against decoding that path one token at a time.
	if err := seq.Commit(nil); err != nil {
		t.Fatal(err)
	}
	var one []float32
	for _, tok := range []int{100, 101, 103} {
		r, err := m.Forward([]Input{{Seq: seq, Tokens: []int{tok}}}, Options{Taps: []int{L}})
		if err != nil {
			t.Fatal(err)
		}
		one = append(one[:0], r.LogitsOf(0)...)
		h := append([]float32(nil), r.HiddenOf(0, 0)...)
		row := make([]float32, V)
		if err := m.LogitsFromHidden(row, h, 1); err != nil {
			t.Fatal(err)
		}
		for i := range row {
			if row[i] != one[i] {
				t.Fatalf("token %d: logit %d from the hidden state %v, decode step %v", tok, i, row[i], one[i])
			}
		}
	}
	if d := maxDiff(one, all[3*V:4*V]); d > 1e-4 {
		t.Fatalf("tree node 3 and the decoded path differ by %g", d)
	}
	if err := m.LogitsFromHidden(got, hid[:H], 2); err == nil {
		t.Fatal("short hidden states accepted")
	}
}
