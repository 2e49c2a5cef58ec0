package medusa

import (
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// TestProposerRunsTheHeadsItDrafts: a chain shorter than the export runs only
// the heads it reaches (its draft cost, and the hits it reports, are those of
// those heads), and drafts the same tokens as the chain of every head does at
// those depths.
func TestProposerRunsTheHeadsItDrafts(t *testing.T) {
	g := Geometry{Hidden: 16, Vocab: 40, Heads: 4, Layers: 1}
	h, _ := randomHeads(t, g, 7)
	cfg := &checkpoint.Config{ModelType: "llama", HiddenSize: g.Hidden, IntermediateSize: 24, NumLayers: 2,
		NumHeads: 2, NumKVHeads: 2, HeadDim: 8, RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositions: 64,
		VocabSize: g.Vocab, BOS: []int{1}, EOS: []int{2}}
	m, err := model.NewRandom(cfg, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, g.Hidden)
	for i := range x {
		x[i] = float32(i%5) - 2
	}
	draft := func(depth int) ([]int, int, int) {
		p, err := newProposer(m, h, drafters.Decoding{Mode: drafters.ModeChain, Depth: depth, HitK: 3})
		if err != nil {
			t.Fatal(err)
		}
		copy(p.x, x)
		p.predict(0)
		var tr spec.Tree
		if err := p.Propose(&tr, 0); err != nil {
			t.Fatal(err)
		}
		return tr.Tokens(nil), p.score.heads, len(p.hits)
	}
	all, heads, hits := draft(4)
	if heads != 4 || hits != 4 {
		t.Fatalf("chain of 4: %d heads run, %d reported, want 4", heads, hits)
	}
	short, heads, hits := draft(2)
	if heads != 2 || hits != 2 {
		t.Fatalf("chain of 2: %d heads run, %d reported, want 2", heads, hits)
	}
	if len(all) != 4 || !slices.Equal(short, all[:2]) {
		t.Fatalf("chain of 2 drafts %v, want the first two of the chain of 4's %v", short, all)
	}
}
