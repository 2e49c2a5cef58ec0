package dflash

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// TestEngineForward exports drafts (bidirectional and causal blocks, both
// layouts) and compares drafter's session logits for one block with the
// engine-style reference (scripts/enginecheck/dflash_forward.py), which picks
// the context features out of all of the target's hidden_states by its own
// reading of the layout's layer ids: an off-by-one there, a norm on the
// wrong input, RoPE at the wrong positions or the wrong block mask shows as
// different logits.
func TestEngineForward(t *testing.T) {
	python, scripts := testutil.EnginePython(t)
	const L, S = 6, 7
	g := Geometry{Hidden: 16, Heads: 4, KVHeads: 2, HeadDim: 8, Intermediate: 24, Layers: 2, RMSNormEps: 1e-6,
		RopeTheta: 10000, MaxPositions: 64, Vocab: 23, TargetHidden: 16, Features: 3, BlockSize: 5, MaskToken: 21}
	ids := []int{2, 5, 6} // HF indices; 6 = L, the last layer's output
	r := rand.New(rand.NewPCG(11, 12))
	V, H := g.Vocab, g.Hidden
	hs := make([]float32, (L+1)*S*H) // every HF index, each at its own scale
	for k := range L + 1 {
		for i := range S * H {
			hs[k*S*H+i] = float32(float64(k+1) * r.NormFloat64())
		}
	}
	tgt := &HostTarget{EmbedW: make([]float32, V*H), LMHead: make([]float32, V*H), V: V, H: H}
	for i := range tgt.EmbedW {
		tgt.EmbedW[i], tgt.LMHead[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	const anchor = 4
	work := t.TempDir()
	batch := filepath.Join(work, "batch.safetensors")
	if err := safetensors.WriteFile(batch, []safetensors.Tensor{
		safetensors.F32Tensor("hidden_states", []int{L + 1, S, H}, hs),
		safetensors.I64Tensor("anchor", []int{1}, []int64{anchor}),
		safetensors.F32Tensor("embed", []int{V, H}, tgt.EmbedW),
		safetensors.F32Tensor("lm_head", []int{V, H}, tgt.LMHead),
	}, nil); err != nil {
		t.Fatal(err)
	}
	for _, causal := range []bool{false, true} {
		g.Causal = causal
		d := randomDraft(g, ids, L, 13)
		// The features drafter's proposer fuses: the draft's HF ids, in order.
		feats := make([]float32, S*g.FCIn())
		for j := range S {
			for c, k := range ids {
				copy(feats[(j*g.Features+c)*H:], hs[(k*S+j)*H:(k*S+j+1)*H])
			}
		}
		s := d.NewSession(S + g.BlockSize)
		if err := s.Append(feats); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, (g.BlockSize-1)*V)
		if err := s.Block(tgt, anchor, got); err != nil {
			t.Fatal(err)
		}
		for _, layout := range (Method{}).Layouts() {
			dir := filepath.Join(work, layout)
			if err := Export(dir, d, ExportOptions{Format: layout}); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(work, "out.safetensors")
			cmd := exec.Command(python, filepath.Join(scripts, "dflash_forward.py"), dir, batch, out)
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("engine-style forward: %v\n%s", err, msg)
			}
			set, err := safetensors.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			want, shape, err := set.Float32("logits")
			meta := set.Metadata()
			set.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(shape, []int{g.BlockSize - 1, V}) {
				t.Fatalf("engine logits of shape %v", shape)
			}
			var engIDs []int
			var zl, vl []bool
			_ = json.Unmarshal([]byte(meta["hf_layer_ids"]), &engIDs)
			_ = json.Unmarshal([]byte(meta["causal_zlab"]), &zl)
			_ = json.Unmarshal([]byte(meta["causal_vllm"]), &vl)
			if !slices.Equal(engIDs, ids) {
				t.Errorf("%s: the engine reads hidden_states %v, drafter trained on %v", layout, engIDs, ids)
			}
			for i := range zl {
				if zl[i] != causal || vl[i] != causal {
					t.Errorf("%s causal=%v: the engines run layer %d causal: z-lab %v, vLLM %v", layout, causal, i, zl[i], vl[i])
				}
			}
			worst := 0.0
			for i := range want {
				diff := math.Abs(float64(got[i] - want[i]))
				worst = max(worst, diff)
				if diff > 1e-4*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("%s causal=%v: slot %d token %d: drafter %.7g, engine %.7g", layout, causal, i/V+1, i%V, got[i], want[i])
				}
			}
			t.Logf("%s causal=%v: block logits agree with the engine-style forward within %.2g", layout, causal, worst)
		}
	}
}
