package model_test

import (
	"math"
	"testing"

	"github.com/drafter-ai/drafter/internal/hfref"
	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/devices"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor/cuda"
)

// graphScript runs the passes of speculative decoding on one sequence, and
// a batch of two: a prefill, decode steps, chain verifications, draft trees
// (a small one, and one of more than FewRows nodes, which runs its products
// in blocks) with their commits, and returns every logits row, in order.
// Each shape comes more than once, so that a graph is replayed for it.
func graphScript(t *testing.T, m *model.Model) [][]float32 {
	t.Helper()
	var out [][]float32
	seq, err := m.NewSequence(256)
	if err != nil {
		t.Fatal(err)
	}
	other, err := m.NewSequence(128)
	if err != nil {
		t.Fatal(err)
	}
	fwd := func(batch ...model.Input) []float32 {
		t.Helper()
		res, err := m.Forward(batch, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]float32(nil), res.Logits...))
		return res.LogitsOf(0)
	}
	argmax := func(row []float32) int {
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		return best
	}
	vocab := m.VocabSize()
	last := fwd(model.Input{Seq: seq, Tokens: []int{1, 100 % vocab, 200 % vocab, 300 % vocab, 50 % vocab}})
	next := argmax(last)
	decode := func(n int) {
		for i := 0; i < n; i++ {
			next = argmax(fwd(model.Input{Seq: seq, Tokens: []int{next}}))
		}
	}
	decode(8)
	for i := 0; i < 2; i++ { // chain verification: every row's logits
		l := fwd(model.Input{Seq: seq, Tokens: []int{next, 7 % vocab, 8 % vocab, 9 % vocab}, Logits: model.LogitsAll})
		next = argmax(l[3*vocab:])
	}
	small := []int{-1, 0, 0, 1, 2, 3}
	big := make([]int, 52)
	big[0] = -1
	for i := 1; i < len(big); i++ {
		big[i] = (i - 1) / 2 // a binary tree of more than FewRows nodes
	}
	for _, parents := range [][]int{small, small, big, big} {
		toks := make([]int, len(parents))
		for i := range toks {
			toks[i] = (next + 31*i) % vocab
		}
		l := fwd(model.Input{Seq: seq, Tokens: toks, Parents: parents})
		if err := seq.Commit([]int{0, 1}); err != nil {
			t.Fatal(err)
		}
		next = argmax(l[vocab : 2*vocab])
		decode(3)
	}
	// A batch of two sequences: the other's prefill, then steps of both.
	fwd(model.Input{Seq: other, Tokens: []int{1, 5 % vocab, 6 % vocab}})
	for i := 0; i < 4; i++ {
		fwd(model.Input{Seq: seq, Tokens: []int{next}}, model.Input{Seq: other, Tokens: []int{(next + i) % vocab}})
		next = (next + 1) % vocab
	}
	return out
}

// TestCUDAGraphsMatchPlain: on the CUDA device (make cuda-check's stand-in),
// the passes of decoding and verification, chains and trees, run as CUDA
// graphs give bit for bit the logits of the same passes run op by op, on a
// float32 and a bf16 checkpoint; graphs are captured once per shape and
// replayed (a second sequence's passes replay the first's captures: every
// value that changes per step, the cache's address included, reaches the
// kernels through device memory), and no replay differs from its capture.
func TestCUDAGraphsMatchPlain(t *testing.T) {
	od := cudaDevice(t).(*devices.Opened)
	dev := od.Device.(*cuda.Device)
	bf16 := testutil.CopyDir(t, testutil.Stories260k())
	testmodel.Convert(t, bf16, safetensors.BF16)
	for name, dir := range map[string]string{"f32": testutil.Stories260k(), "bf16": bf16} {
		t.Run(name, func(t *testing.T) {
			m, err := model.Load(dir, od) // through devices.Opened, as the commands run it
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			dev.SetGraphs(false)
			plain := graphScript(t, m)
			dev.SetGraphs(true)
			s0 := dev.GraphStats()
			graph := graphScript(t, m)
			s1 := dev.GraphStats()
			again := graphScript(t, m)
			s2 := dev.GraphStats()
			passes := len(plain)
			if s1.Captures == s0.Captures || s1.Replays-s0.Replays < passes/2 || s2.Mismatches != 0 || s1.Plain != s0.Plain {
				t.Fatalf("graph stats %+v after %+v for %d passes: want captures, at least %d replays, no mismatch, no plain pass", s1, s0, passes, passes/2)
			}
			if s2.Captures != s1.Captures || s2.Replays-s1.Replays != passes || s2.Plain != s1.Plain {
				t.Fatalf("the second run's stats %+v after %+v: want all %d passes replayed", s2, s1, passes)
			}
			t.Logf("%d passes per run; graph stats after the two graph runs: %+v", passes, s2)
			for _, run := range [][][]float32{graph, again} {
				for i := range plain {
					if len(run[i]) != len(plain[i]) {
						t.Fatalf("pass %d: %d logits with graphs, %d plain", i, len(run[i]), len(plain[i]))
					}
					for j := range plain[i] {
						if math.Float32bits(run[i][j]) != math.Float32bits(plain[i][j]) {
							t.Fatalf("pass %d logit %d: %v with graphs, %v plain", i, j, run[i][j], plain[i][j])
						}
					}
				}
			}
		})
	}
}

// sameLogits fails unless every pass's logits are the same bits.
func sameLogits(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s pass %d: %d logits with graphs, %d plain", what, i, len(got[i]), len(want[i]))
		}
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("%s pass %d logit %d: %v with graphs, %v plain", what, i, j, got[i][j], want[i][j])
			}
		}
	}
}

// TestCUDAGraphsArchitectures: every supported architecture's tiny
// transformers checkpoint (internal/hfref) gives the same logits bit for
// bit with graphs and without over graphScript's passes; the dense
// families' passes are replayed from captures (sliding windows, softcaps,
// sandwich norms, longrope included), the mixture-of-experts families'
// (host routing) run op by op without a capture.
func TestCUDAGraphsArchitectures(t *testing.T) {
	od := cudaDevice(t).(*devices.Opened)
	dev := od.Device.(*cuda.Device)
	c := hfref.Checkpoints(t)
	for _, a := range hfref.Archs {
		t.Run(a.Name, func(t *testing.T) {
			m, err := model.Load(c.Model(a.Name, a.Shipped()), od)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			dev.SetGraphs(false)
			plain := graphScript(t, m)
			dev.SetGraphs(true)
			s0 := dev.GraphStats()
			graph := graphScript(t, m)
			s1 := dev.GraphStats()
			sameLogits(t, a.Name, graph, plain)
			moe := m.Config.Experts > 0
			switch {
			case moe && (s1.Captures != s0.Captures || s1.Replays != s0.Replays):
				t.Fatalf("a mixture of experts was graphed: %+v after %+v", s1, s0)
			case !moe && (s1.Replays-s0.Replays < len(plain)/2 || s1.Plain != s0.Plain):
				t.Fatalf("%d passes: graph stats %+v after %+v: want at least %d replays, no plain pass", len(plain), s1, s0, len(plain)/2)
			}
		})
	}
}
