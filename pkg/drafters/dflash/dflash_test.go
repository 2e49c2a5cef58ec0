package dflash

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// randomDraft returns a draft of geometry g with random weights (norms near
// one) reading HF layers ids of a target of L layers.
func randomDraft(g Geometry, ids []int, L int, seed uint64) *Draft {
	r := rand.New(rand.NewPCG(seed, 3))
	p := NewParams(g)
	for _, t := range p.Tensors(g) {
		for i := range t.Data {
			if len(t.Shape) == 1 {
				t.Data[i] = float32(1 + 0.1*r.NormFloat64())
			} else {
				t.Data[i] = float32(0.2 * r.NormFloat64())
			}
		}
	}
	return &Draft{Geometry: g, Params: p, LayerIDs: ids, TargetLayers: L}
}

func tinyGeometry() Geometry {
	return Geometry{Hidden: 8, Heads: 4, KVHeads: 2, HeadDim: 4, Intermediate: 12, Layers: 2, RMSNormEps: 1e-6,
		RopeTheta: 10000, MaxPositions: 64, Vocab: 13, TargetHidden: 8, Features: 2, BlockSize: 4, MaskToken: 12}
}

// TestExportRoundTrip writes both layouts and loads them back exactly; the
// configs spell the layer ids in each layout's own convention (z-lab:
// output-of-layer = HF-1; speculators: HF) and the block causality as the
// engines read it.
func TestExportRoundTrip(t *testing.T) {
	g := tinyGeometry()
	d := randomDraft(g, []int{2, 4}, 4, 1)
	for _, layout := range (Method{}).Layouts() {
		dir := filepath.Join(t.TempDir(), layout)
		if err := Export(dir, d, ExportOptions{Format: layout}); err != nil {
			t.Fatal(err)
		}
		got, err := (Method{}).Detect(dir)
		if err != nil || got != layout {
			t.Fatalf("Detect = %q, %v; want %q", got, err, layout)
		}
		back, err := LoadDraft(dir, layout, 4)
		if err != nil {
			t.Fatal(err)
		}
		if back.Geometry != g || !slices.Equal(back.LayerIDs, d.LayerIDs) || !slices.Equal(back.Params.All, d.Params.All) || back.TargetLayers != 4 {
			t.Errorf("%s: loaded %+v ids %v, want %+v ids %v (weights equal: %v)", layout, back.Geometry, back.LayerIDs, g, d.LayerIDs, slices.Equal(back.Params.All, d.Params.All))
		}
		raw, _ := os.ReadFile(filepath.Join(dir, drafters.ConfigFile))
		var c map[string]any
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		switch layout {
		case FormatNative:
			df := c["dflash_config"].(map[string]any)
			if ids := df["target_layer_ids"].([]any); ids[0].(float64) != 1 || ids[1].(float64) != 3 {
				t.Errorf("native target_layer_ids %v, want [1 3] (HF [2 4] minus one)", ids)
			}
			if df["mask_token_id"].(float64) != 12 || c["block_size"].(float64) != 4 || df["causal"] != false || c["num_target_layers"].(float64) != 4 {
				t.Errorf("native config %v", c)
			}
			if c["architectures"].([]any)[0] != NativeArchitecture || c["model_type"] != "qwen3" || c["tie_word_embeddings"] != false {
				t.Errorf("native config %v", c)
			}
		case FormatSpeculators:
			if ids := c["aux_hidden_state_layer_ids"].([]any); ids[0].(float64) != 2 || ids[1].(float64) != 4 {
				t.Errorf("speculators aux_hidden_state_layer_ids %v, want HF [2 4]", ids)
			}
			if c["sliding_window_non_causal"] != true || c["sample_from_anchor"] != false || c["speculators_model_type"] != "dflash" {
				t.Errorf("speculators config %v", c)
			}
		}
	}
	// A causal draft round-trips its flag through both layouts.
	g.Causal = true
	d = randomDraft(g, []int{1, 4}, 4, 2)
	for _, layout := range (Method{}).Layouts() {
		dir := filepath.Join(t.TempDir(), layout)
		if err := Export(dir, d, ExportOptions{Format: layout}); err != nil {
			t.Fatal(err)
		}
		back, err := LoadDraft(dir, layout, 4)
		if err != nil {
			t.Fatal(err)
		}
		if !back.Geometry.Causal {
			t.Errorf("%s: causal draft loaded as bidirectional", layout)
		}
	}
}

// TestLoadRefusesMismatch: a weights file with an extra or a missing tensor,
// and a target of another depth, are refused.
func TestLoadRefusesMismatch(t *testing.T) {
	g := tinyGeometry()
	d := randomDraft(g, []int{2, 4}, 4, 1)
	dir := t.TempDir()
	if err := Export(dir, d, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDraft(dir, FormatNative, 6); err == nil {
		t.Error("a draft for 4 target layers loaded for a target of 6")
	}
	g2 := g
	g2.Layers = 1
	d2 := randomDraft(g2, []int{2, 4}, 4, 1)
	if err := Export(dir, d2, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	// Config of 1 layer with the weights of 1 layer loads; swap in the
	// 2-layer config to see a missing tensor refused.
	cfg2 := filepath.Join(t.TempDir(), "c")
	if err := Export(cfg2, d, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(cfg2, drafters.ConfigFile))
	if err := os.WriteFile(filepath.Join(dir, drafters.ConfigFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDraft(dir, FormatNative, 4); err == nil {
		t.Error("a 2-layer config over 1-layer weights loaded")
	}
}

// TestSessionMatchesTrainingPass: the inference session (context appended in
// chunks, then one block at position Len()) computes what the training pass
// computes for an anchor at that position over all earlier context rows.
func TestSessionMatchesTrainingPass(t *testing.T) {
	g := tinyGeometry()
	d := randomDraft(g, []int{2, 4}, 4, 5)
	r := rand.New(rand.NewPCG(9, 9))
	V, H := g.Vocab, g.Hidden
	tgt := &HostTarget{EmbedW: make([]float32, V*H), LMHead: make([]float32, V*H), V: V, H: H}
	for i := range tgt.EmbedW {
		tgt.EmbedW[i], tgt.LMHead[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	n := 9
	feats := make([]float32, n*g.FCIn())
	for i := range feats {
		feats[i] = float32(r.NormFloat64())
	}
	s := d.NewSession(32)
	if err := s.Append(feats[:4*g.FCIn()]); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(feats[4*g.FCIn():]); err != nil {
		t.Fatal(err)
	}
	anchor := 3
	got := make([]float32, (g.BlockSize-1)*V)
	if err := s.Block(tgt, anchor, got); err != nil {
		t.Fatal(err)
	}
	// The training pass: all n rows plus one more (which the strict mask
	// must hide), the block anchored at n.
	net := NewNet[float32](g, d.Params, nil)
	extra := append(slices.Clone(feats), make([]float32, g.FCIn())...)
	for i := n * g.FCIn(); i < len(extra); i++ {
		extra[i] = 5
	}
	pos := make([]int, n+1)
	for i := range pos {
		pos[i] = i
	}
	if err := net.Context(extra, pos); err != nil {
		t.Fatal(err)
	}
	emb := make([]float32, g.BlockSize*H)
	copy(emb, tgt.EmbedW[anchor*H:(anchor+1)*H])
	for k := 1; k < g.BlockSize; k++ {
		copy(emb[k*H:], tgt.EmbedW[g.MaskToken*H:(g.MaskToken+1)*H])
	}
	if err := net.Blocks(emb, []Block{{Row0: 0, Start: n, Ctx: n}}, net.Kc, net.Vc); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, (g.BlockSize-1)*V)
	if err := tgt.Logits(want, net.Y[H:], g.BlockSize-1); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5 {
			t.Fatalf("logit %d: session %g, training pass %g", i, got[i], want[i])
		}
	}
	// Cropping back and re-appending gives the same block again.
	s.Crop(4)
	if err := s.Append(feats[4*g.FCIn():]); err != nil {
		t.Fatal(err)
	}
	again := make([]float32, len(got))
	if err := s.Block(tgt, anchor, again); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again, got) {
		t.Error("crop and re-append changed the block's logits")
	}
}

// TestProposerOnTarget drafts on the bundled model: greedy chains are each
// slot's argmax with no draft rows; sampled chains hand verification one
// distribution per slot (summing to one, the drafted token possible), and
// the same stream draws the same chain. Configure refuses trees and depths
// past the block.
func TestProposerOnTarget(t *testing.T) {
	m, err := model.Load(testutil.Stories260k(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	g := TargetGeometry(c, 2, 2, 5, 0)
	d := randomDraft(g, []int{2, c.NumLayers}, c.NumLayers, 4)
	dr, err := NewDrafter(d, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dr.Configure(drafters.Decoding{Mode: drafters.ModeTree}); err == nil {
		t.Error("a tree was configured")
	}
	if _, err := dr.Configure(drafters.Decoding{Mode: drafters.ModeChain, Depth: 5}); err == nil {
		t.Error("a chain of 5 was configured for a block of 5 (4 drafts)")
	}
	if c, err := dr.Configure(drafters.Decoding{}); err != nil || c.Mode != drafters.ModeChain || c.Depth != 4 {
		t.Errorf("no shape given: %s of %d, %v; want the chain of the block's 4 drafts", c.Mode, c.Depth, err)
	}
	prompt := []int{1, 400, 30, 77, 12, 9}
	run := func(params sample.Params, rng *sample.RNG) (*proposer, *spec.Tree) {
		cfg, err := dr.Configure(drafters.Decoding{Mode: drafters.ModeChain, Sampling: params})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Depth != 4 {
			t.Fatalf("default depth %d, want B-1 = 4", cfg.Depth)
		}
		pr, err := dr.NewProposer(cfg, drafters.ProposerOptions{Capacity: 64, RNG: rng})
		if err != nil {
			t.Fatal(err)
		}
		p := pr.(*proposer)
		seq, err := m.NewSequence(64)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Forward([]model.Input{{Seq: seq, Tokens: prompt, Logits: model.LogitsLast}}, model.Options{Taps: p.Taps()})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(prompt, 42, res); err != nil {
			t.Fatal(err)
		}
		var tr spec.Tree
		if err := p.Propose(&tr, 0); err != nil {
			t.Fatal(err)
		}
		return p, &tr
	}
	p, tr := run(sample.Params{}, sample.NewRNG(1, 0))
	if p.DraftProbs() != nil || tr.Len() != 4 {
		t.Fatalf("greedy: %d nodes, draft rows %v", tr.Len(), p.DraftProbs() != nil)
	}
	V := g.Vocab
	for k := range 4 {
		if tr.Node(k).Token != argmax(p.lg[k*V:(k+1)*V]) {
			t.Errorf("greedy slot %d drafted %d, not its argmax", k+1, tr.Node(k).Token)
		}
	}
	ps, trs := run(sample.Params{Temperature: 1}, sample.NewRNG(7, 0))
	q := ps.DraftProbs()
	if len(q) != 5*V {
		t.Fatalf("draft rows %d, want %d", len(q), 5*V)
	}
	for k := range 4 {
		var sum float64
		for _, x := range q[k*V : (k+1)*V] {
			sum += float64(x)
		}
		if math.Abs(sum-1) > 1e-4 || q[k*V+trs.Node(k).Token] <= 0 {
			t.Errorf("slot %d: q sums to %g, drafted token's q %g", k+1, sum, q[k*V+trs.Node(k).Token])
		}
	}
	_, trs2 := run(sample.Params{Temperature: 1}, sample.NewRNG(7, 0))
	for k := range 4 {
		if trs.Node(k).Token != trs2.Node(k).Token {
			t.Error("the same stream drew another chain")
		}
	}
}

// TestDefaultLayers: z-lab's ids (Qwen3-8B: output-of-layer 1, 9, 17, 25,
// 33 = HF 2, 10, 18, 26, 34) where they are distinct, and distinct layers
// spread over the target where z-lab's formula repeats one (a 5-layer
// target with 3 draft layers: ids 1, 2, 2), which no engine could serve.
func TestDefaultLayers(t *testing.T) {
	for _, c := range []struct {
		L, n int
		want []int
	}{
		{36, 5, []int{2, 10, 18, 26, 34}},
		{36, 1, []int{19}},
		{5, 1, []int{3}},
		{5, 3, []int{1, 3, 5}},
		{5, 2, []int{2, 3}},
		{5, 5, []int{1, 2, 3, 4, 5}},
		{4, 3, []int{1, 3, 4}},
	} {
		got, err := DefaultLayers(c.L, c.n)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("DefaultLayers(%d, %d) = %v, %v; want %v", c.L, c.n, got, err, c.want)
		}
	}
	if _, err := DefaultLayers(5, 6); err == nil {
		t.Error("6 draft layers on a 5-layer target got default layers")
	}
}
