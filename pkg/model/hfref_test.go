package model_test

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/hfref"
	"github.com/drafter-ai/drafter/pkg/arch"
	"github.com/drafter-ai/drafter/pkg/devices"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// hfTolerance is the largest accepted |drafter - transformers| logit
// difference, relative to the prompt's logit scale (max(1, the largest
// |logit| transformers gives over the prompt's positions)). Both compute in
// float32 (bf16 weights upcast exactly), only in other orders: differences
// are rounding, of order 1e-6 of the scale; a wrong feature (a window, a
// bias, a norm, a RoPE variant) moves logits by a sizeable fraction of it.
const hfTolerance = 1e-4

// TestHFReference compares drafter's forward with Hugging Face transformers'
// on the tiny checkpoints transformers made (internal/hfref): for each
// supported architecture (hfref.Archs), the f32 checkpoint and the sharded
// bf16 one, on the CPU device, and on the CUDA device when a driver is
// configured (make cuda-check's stand-in, or a GPU): every position's logits
// of each prompt (LogitsAll), the last position's from a pass that asks for
// it alone, and the greedy ids of a cached decode, one token per pass, which
// must equal transformers' (its top-2 gaps exceed 1e-3, far above the
// tolerance, so equal ids are required, not hoped for).
//
// Every other architecture tiny.py makes must be refused by model.Load with
// an error naming its model_type and the supported ones; one that pkg/arch
// supports but hfref.Archs lacks fails, so that a new family cannot go
// untested.
func TestHFReference(t *testing.T) {
	c := hfref.Checkpoints(t)
	for _, a := range hfref.Archs {
		t.Run(a.Name, func(t *testing.T) {
			ref := c.Reference(t, a.Name)
			for _, dt := range a.DTypes() {
				t.Run(dt+"/cpu", func(t *testing.T) {
					m, err := model.Load(c.Model(a.Name, dt), nil)
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					compareHF(t, m, a, ref, dt)
				})
				t.Run(dt+"/cuda", func(t *testing.T) {
					dev := cudaDevice(t)
					m, err := model.Load(c.Model(a.Name, dt), dev)
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					compareHF(t, m, a, ref, dt)
				})
			}
		})
	}
	for _, name := range c.Names(t) {
		if hfref.Supported(name) {
			continue
		}
		t.Run(name+"/refused", func(t *testing.T) {
			ref := c.Reference(t, name)
			if _, ok := arch.Lookup(ref.ModelType); ok {
				t.Fatalf("pkg/arch supports model_type %s, but internal/hfref.Archs has no line for %s: add it, so that it is compared with transformers", ref.ModelType, name)
			}
			m, err := model.Load(c.Model(name, "f32"), nil)
			if err == nil {
				m.Close()
				t.Fatalf("model.Load of a %s checkpoint succeeded; drafter does not support it", ref.ModelType)
			}
			for _, want := range []string{fmt.Sprintf("%q", ref.ModelType), arch.Supported()} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal %q does not name %s", err, want)
				}
			}
		})
	}
}

// cudaDevice opens CUDA device 0 when DRAFTER_LIBCUDA names a driver (make
// cuda-check: the stand-in, whose kernels run on CPU threads), and skips
// otherwise, or fails where DRAFTER_REQUIRE_CUDA is set.
func cudaDevice(t *testing.T) tensor.Device {
	t.Helper()
	if os.Getenv("DRAFTER_LIBCUDA") == "" {
		if os.Getenv("DRAFTER_REQUIRE_CUDA") != "" {
			t.Fatal("DRAFTER_REQUIRE_CUDA is set but DRAFTER_LIBCUDA is not: run through make cuda-check")
		}
		t.Skip("no CUDA driver configured (make cuda-check sets DRAFTER_LIBCUDA to the stand-in)")
	}
	d, err := devices.Open(devices.Spec{Kind: devices.CUDA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// compareHF runs every reference prompt through m and compares with
// transformers' run of the same checkpoint.
func compareHF(t *testing.T, m *model.Model, a hfref.Arch, ref *hfref.Reference, dtype string) {
	t.Helper()
	runs := ref.Runs(dtype)
	worstAll, worstLast, worstRel := 0.0, 0.0, 0.0
	for i, p := range ref.Prompts {
		want := runs[i]
		n := len(p.IDs)
		scale := 1.0
		for _, row := range want.Logits[:n] {
			for _, v := range row {
				scale = math.Max(scale, math.Abs(v))
			}
		}
		tol := hfTolerance * scale
		compare := func(what string, got []float32, rows [][]float64) float64 {
			t.Helper()
			V := m.VocabSize()
			if len(got) != len(rows)*V {
				t.Fatalf("prompt %d %s: %d logits, want %d rows of %d", i, what, len(got), len(rows), V)
			}
			worst := 0.0
			for r, row := range rows {
				for v, w := range row {
					d := math.Abs(float64(got[r*V+v]) - w)
					if d > tol || math.IsNaN(d) {
						t.Fatalf("prompt %d %s: position %d token %d: drafter %.7g, transformers %.7g (difference %.3g > %.3g = %g x logit scale %.3g)",
							i, what, r, v, got[r*V+v], w, d, tol, hfTolerance, scale)
					}
					worst = math.Max(worst, d)
				}
			}
			worstRel = math.Max(worstRel, worst/scale)
			return worst
		}
		ids := p.IDs[:n]
		seq, err := m.NewSequence(n)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Forward([]model.Input{{Seq: seq, Tokens: ids, Logits: model.LogitsAll}}, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		worstAll = math.Max(worstAll, compare("all positions", res.LogitsOf(0), want.Logits[:n]))

		seq, err = m.NewSequence(n + p.NewTokens)
		if err != nil {
			t.Fatal(err)
		}
		in := []model.Input{{Seq: seq, Tokens: ids}}
		var got []int
		for step := range p.NewTokens {
			res, err := m.Forward(in, model.Options{})
			if err != nil {
				t.Fatalf("prompt %d greedy step %d: %v", i, step, err)
			}
			lg := res.LogitsOf(0)
			if step == 0 {
				worstLast = math.Max(worstLast, compare("last position", lg, want.Logits[n-1:n]))
			}
			id := argmax(lg)
			got = append(got, id)
			in[0].Tokens = []int{id}
		}
		if !slices.Equal(got, want.GreedyIDs) {
			t.Errorf("prompt %d: greedy ids\n%v\ntransformers\n%v (its top-2 gaps %v)", i, got, want.GreedyIDs, want.GreedyGaps)
		}
	}
	t.Logf("%s %s on %s: %d prompts, max |logit difference| %.3g at all positions, %.3g at the last (%.3g of the logit scale; tolerance %g of it)%s",
		a.Name, dtype, m.Device().Name(), len(ref.Prompts), worstAll, worstLast, worstRel, hfTolerance, greedyNote(ref))
}

func greedyNote(ref *hfref.Reference) string {
	n := 0
	for _, p := range ref.Prompts {
		n += p.NewTokens
	}
	return fmt.Sprintf("; %d greedy ids equal", n)
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// TestArchitecturesVerifyAsDecode checks, on every supported tiny
// architecture, what eval's losslessness rests on: a draft of five tokens
// verified in one pass, as a chain-shaped tree, as a chain, and inside a
// tree of 60 nodes (more rows than tensor.FewRows, where a bare product
// would sum in another order or round bf16 inputs), gives each row the
// logits, bit for bit, that decoding those tokens one at a time gives
// (sliding windows, soft-caps and expert routing included: the last rows
// reach past the 8-token windows), and a decode step of two sequences
// allocates nothing once warm.
func TestArchitecturesVerifyAsDecode(t *testing.T) {
	c := hfref.Checkpoints(t)
	for _, a := range hfref.Archs {
		t.Run(a.Name, func(t *testing.T) {
			m, err := model.Load(c.Model(a.Name, a.Shipped()), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			prompt := c.Reference(t, a.Name).Prompts[0].IDs
			draft := []int{5, 77, 301, 42, 9}
			V := m.VocabSize()
			newSeq := func() *model.Sequence {
				s, err := m.NewSequence(len(prompt) + 64)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := m.Forward([]model.Input{{Seq: s, Tokens: prompt}}, model.Options{}); err != nil {
					t.Fatal(err)
				}
				return s
			}
			dec := newSeq()
			var want [][]float32
			for _, id := range draft {
				res, err := m.Forward([]model.Input{{Seq: dec, Tokens: []int{id}}}, model.Options{})
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, slices.Clone(res.LogitsOf(0)))
			}
			parents := []int{-1, 0, 1, 2, 3}
			// A draft tree of 60 nodes, more than tensor.FewRows: the
			// chain above, then branches off its nodes and each other.
			bigToks, bigParents := slices.Clone(draft), slices.Clone(parents)
			for i := len(draft); i < 60; i++ {
				bigToks = append(bigToks, (i*37)%500+3)
				bigParents = append(bigParents, (i*7)%i-1)
			}
			for _, mode := range []struct {
				name            string
				tokens, parents []int
			}{{"tree", draft, parents}, {"chain", draft, nil}, {"60-node tree", bigToks, bigParents}} {
				s := newSeq()
				res, err := m.Forward([]model.Input{{Seq: s, Tokens: mode.tokens, Parents: mode.parents, Logits: model.LogitsAll}}, model.Options{})
				if err != nil {
					t.Fatal(err)
				}
				got := res.LogitsOf(0)
				for i := range draft {
					if !slices.Equal(got[i*V:(i+1)*V], want[i]) {
						t.Errorf("%s row %d: logits differ from decode step %d", mode.name, i, i)
					}
				}
			}
			a, b := newSeq(), newSeq()
			batch := []model.Input{{Seq: a, Tokens: []int{3}}, {Seq: b, Tokens: []int{4}}}
			if _, err := m.Forward(batch, model.Options{}); err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(3, func() {
				if _, err := m.Forward(batch, model.Options{}); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("a decode step of two sequences allocates %v times", n)
			}
		})
	}
}
