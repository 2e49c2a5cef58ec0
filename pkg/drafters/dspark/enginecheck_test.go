package dspark

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// randomDraft returns a draft of geometry g and head shape sh with random
// weights from seed, fusing HF ids of a target of L layers.
func randomDraft(t *testing.T, g dflash.Geometry, sh HeadShape, ids []int, L int, seed uint64) *Draft {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	p := dflash.NewParams(g)
	for _, ts := range p.Tensors(g) {
		for i := range ts.Data {
			if len(ts.Shape) == 1 {
				ts.Data[i] = float32(1 + 0.2*r.NormFloat64())
			} else {
				ts.Data[i] = float32(0.3 * r.NormFloat64())
			}
		}
	}
	h, err := NewHeads(sh, g.Vocab, g.Hidden, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range h.All {
		h.All[i] = float32(r.NormFloat64())
	}
	d := &Draft{Geometry: g, Params: p, Heads: h, Embed: make([]float32, g.Vocab*g.Hidden), LMHead: make([]float32, g.Vocab*g.Hidden),
		LayerIDs: ids, TargetLayers: L, NumAnchors: 8}
	for i := range d.Embed {
		d.Embed[i], d.LMHead[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestEngineForward exports drafts (each head shape, both layouts) and
// compares drafter's drafting session with the engine-style reference
// (scripts/enginecheck/dspark_forward.py), which picks the context features
// out of all of the target's hidden_states by its own reading of the
// layout's layer ids and drafts one greedy block DeepSpec's way: every
// slot's step logits (backbone through the draft's lm_head plus the Markov
// bias of the previous drafted token), the drafted tokens and the
// confidence logits. A layer-id off-by-one, a Markov prev misalignment (its
// own slot's token instead of the previous one's, or no anchor seed), the
// DFlash layout's unshifted slots or a confidence head on the wrong input
// show as different numbers.
func TestEngineForward(t *testing.T) {
	python, scripts := testutil.EnginePython(t)
	const L, S = 6, 7
	g := dflash.Geometry{Hidden: 16, Heads: 4, KVHeads: 2, HeadDim: 8, Intermediate: 24, Layers: 2, RMSNormEps: 1e-6,
		RopeTheta: 10000, MaxPositions: 64, Vocab: 23, TargetHidden: 16, Features: 3, BlockSize: 5, MaskToken: 21}
	ids := []int{2, 5, 6} // HF indices; 6 = L, the last layer's output
	r := rand.New(rand.NewPCG(11, 12))
	H, V := g.Hidden, g.Vocab
	hs := make([]float32, (L+1)*S*H)
	for k := range L + 1 {
		for i := range S * H {
			hs[k*S*H+i] = float32(float64(k+1) * r.NormFloat64())
		}
	}
	const anchor = 4
	work := t.TempDir()
	batch := filepath.Join(work, "batch.safetensors")
	if err := safetensors.WriteFile(batch, []safetensors.Tensor{
		safetensors.F32Tensor("hidden_states", []int{L + 1, S, H}, hs),
		safetensors.I64Tensor("anchor", []int{1}, []int64{anchor}),
	}, nil); err != nil {
		t.Fatal(err)
	}
	feats := make([]float32, S*g.FCIn())
	for j := range S {
		for c, k := range ids {
			copy(feats[(j*g.Features+c)*H:], hs[(k*S+j)*H:(k*S+j+1)*H])
		}
	}
	shapes := []HeadShape{{Rank: 3, Confidence: true, WithMarkov: true}, {Rank: 3, Confidence: true}, {Rank: 4}, {Confidence: true}}
	for si, sh := range shapes {
		d := randomDraft(t, g, sh, ids, L, uint64(13+si))
		s, err := d.NewSession(S + g.BlockSize)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(feats); err != nil {
			t.Fatal(err)
		}
		if err := s.Backbone(anchor); err != nil {
			t.Fatal(err)
		}
		got, conf, toks := make([]float32, g.BlockSize*V), make([]float32, g.BlockSize), make([]int64, g.BlockSize)
		prev := anchor
		for k := range g.BlockSize {
			if conf[k], err = s.Step(k, prev, got[k*V:(k+1)*V]); err != nil {
				t.Fatal(err)
			}
			prev = argmax(got[k*V : (k+1)*V])
			toks[k] = int64(prev)
		}
		for _, layout := range (Method{}).Layouts() {
			dir := filepath.Join(work, layout)
			if err := Export(dir, d, ExportOptions{Format: layout}); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(work, "out.safetensors")
			if msg, err := exec.Command(python, filepath.Join(scripts, "dspark_forward.py"), dir, batch, out).CombinedOutput(); err != nil {
				t.Fatalf("engine-style forward: %v\n%s", err, msg)
			}
			set, err := safetensors.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			want, shape, err1 := set.Float32("logits")
			wconf, _, err2 := set.Float32("confidence")
			wtok, _, err3 := set.Int64("tokens")
			meta := set.Metadata()
			set.Close()
			for _, err := range []error{err1, err2, err3} {
				if err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(shape, []int{g.BlockSize, V}) {
				t.Fatalf("engine logits of shape %v", shape)
			}
			var engIDs []int
			_ = json.Unmarshal([]byte(meta["hf_layer_ids"]), &engIDs)
			if !slices.Equal(engIDs, ids) {
				t.Errorf("%s: the engine reads hidden_states %v, drafter trained on %v", layout, engIDs, ids)
			}
			worst := 0.0
			for i := range want {
				diff := math.Abs(float64(got[i] - want[i]))
				worst = max(worst, diff)
				if diff > 1e-4*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("%s %+v: slot %d token %d: drafter %.7g, engine %.7g", layout, sh, i/V, i%V, got[i], want[i])
				}
			}
			if !slices.Equal(toks, wtok) {
				t.Fatalf("%s %+v: drafted %v, engine %v", layout, sh, toks, wtok)
			}
			for k := range conf {
				if !sh.Confidence {
					if !math.IsNaN(float64(conf[k])) || !math.IsNaN(float64(wconf[k])) {
						t.Fatalf("%s %+v: confidence %v / engine %v without a confidence head", layout, sh, conf[k], wconf[k])
					}
					continue
				}
				w := 1 / (1 + math.Exp(-float64(wconf[k])))
				if math.Abs(float64(conf[k])-w) > 1e-5 {
					t.Fatalf("%s %+v: slot %d confidence %.7g, engine %.7g", layout, sh, k, conf[k], w)
				}
			}
			t.Logf("%s %+v: step logits agree within %.2g, tokens %v, confidences %v", layout, sh, worst, toks, conf)
		}
	}
}
