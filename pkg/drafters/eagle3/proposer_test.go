package eagle3

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
	"github.com/drafter-ai/drafter/pkg/tokenizer"
)

// loadTarget loads the bundled model.
func loadTarget(t testing.TB) *model.Model {
	t.Helper()
	m, err := model.Load(testutil.Stories260k(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// promptTokens returns the first eval prompt's tokens as generation encodes
// raw text (with the tokenizer's special tokens).
func promptTokens(t testing.TB) []int {
	t.Helper()
	tok, err := tokenizer.LoadDir(testutil.Stories260k())
	if err != nil {
		t.Fatal(err)
	}
	return tok.Encode("Ben and Lucy went to the zoo to", true)
}

// randomDraft returns a draft for m with random weights (norm weights near
// one) over a random draft vocabulary of n ids.
func randomDraft(t testing.TB, m *model.Model, n int, seed uint64) *Draft {
	t.Helper()
	return randomDraftNorms(t, m, n, seed, Norms{})
}

// randomDraftNorms is randomDraft with the EAGLE-3.1 switches norms.
func randomDraftNorms(t testing.TB, m *model.Model, n int, seed uint64, norms Norms) *Draft {
	t.Helper()
	g := TargetGeometry(m.Config, n)
	g.Norms = norms
	r := rand.New(rand.NewPCG(seed, 3))
	p := NewParams(g)
	for _, tn := range p.Tensors(g) {
		mean, std := 0.0, 0.1
		if len(tn.Shape) == 1 {
			mean = 1 // a norm's weight
		}
		if tn.Name == "lm_head.weight" {
			std = 0.5
		}
		for i := range tn.Data {
			tn.Data[i] = float32(mean + std*r.NormFloat64())
		}
	}
	counts := make([]int64, g.Vocab)
	for i := range counts {
		counts[i] = int64(r.IntN(100))
	}
	voc, err := BuildVocab(counts, n)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDraft(g, p, voc, m.Embed, m.Device())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestEagleSampledChain: at temperature > 0 the EAGLE-3 chain is drawn from
// the draft distribution q, which the proposer hands to verification: row i
// is the draft's softmax (over the draft vocabulary, mapped to target ids,
// zero elsewhere) at chain position i, the drafted token has q > 0, the first
// token's frequencies over many draws follow row 0, and the same seed drafts
// the same chain. At temperature 0 the chain stays top-1 with no q.
func TestEagleSampledChain(t *testing.T) {
	m := loadTarget(t)
	V := m.VocabSize()
	draft := randomDraft(t, m, 150, 5)
	d, err := NewDrafter(draft, m)
	if err != nil {
		t.Fatal(err)
	}
	prompt := promptTokens(t)
	const depth = 3
	newProp := func(params sample.Params, rng *sample.RNG) (*proposer, *model.Result) {
		cfg, err := d.Configure(drafters.Decoding{Mode: drafters.ModeChain, Depth: depth, Sampling: params})
		if err != nil {
			t.Fatal(err)
		}
		p, err := newProposer(m, draft, cfg, len(prompt)+16, rng)
		if err != nil {
			t.Fatal(err)
		}
		seq, err := m.NewSequence(len(prompt) + 16)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Forward([]model.Input{{Seq: seq, Tokens: prompt, Logits: model.LogitsLast}}, model.Options{Taps: p.Taps()})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(prompt, 7, res); err != nil {
			t.Fatal(err)
		}
		return p, res
	}

	// Greedy: top-1, no draft distribution.
	rng := sample.NewRNG(1, 0)
	p, _ := newProp(sample.Params{}, rng)
	var tr spec.Tree
	if err := p.Propose(&tr, 0); err != nil {
		t.Fatal(err)
	}
	if p.DraftProbs() != nil || tr.Len() != depth {
		t.Fatalf("greedy chain: %d nodes, draft rows %v; want %d nodes and none", tr.Len(), p.DraftProbs() != nil, depth)
	}
	var ids [1]int32
	var lp [1]float32
	p.s.TopK(-1, 1, ids[:], lp[:])
	if tr.Node(0).Token != int(ids[0]) {
		t.Fatalf("greedy chain starts with %d, the draft's top-1 is %d", tr.Node(0).Token, ids[0])
	}

	// Temperature 1: q is the draft softmax.
	p, _ = newProp(sample.Params{Temperature: 1}, rng)
	N := draft.Geometry.DraftVocab
	top := make([]int32, N)
	logp := make([]float32, N)
	if n := p.s.TopK(-1, N, top, logp); n != N {
		t.Fatalf("TopK gave %d of %d", n, N)
	}
	want0 := make([]float64, V)
	for i, id := range top {
		want0[id] = math.Exp(float64(logp[i]))
	}
	const draws = 4000
	counts := make([]int, V)
	for s := range draws {
		rng.Reset(3, uint64(s))
		if err := p.Propose(&tr, 0); err != nil {
			t.Fatal(err)
		}
		q := p.DraftProbs()
		if len(q) != (depth+1)*V || tr.Len() != depth {
			t.Fatalf("sampled chain of %d nodes with %d draft values, want %d and %d", tr.Len(), len(q), depth, (depth+1)*V)
		}
		for i := range depth {
			row := q[i*V : (i+1)*V]
			var sum float64
			for id, x := range row {
				if x < 0 || (x > 0 && !draft.Vocab.T2D[id]) {
					t.Fatalf("q row %d holds %v at id %d (in draft vocabulary: %v)", i, x, id, draft.Vocab.T2D[id])
				}
				sum += float64(x)
			}
			if math.Abs(sum-1) > 1e-4 || !(row[tr.Node(i).Token] > 0) {
				t.Fatalf("q row %d sums to %v; drafted token %d has q %v", i, sum, tr.Node(i).Token, row[tr.Node(i).Token])
			}
		}
		if s == 0 {
			for id, w := range want0 {
				if math.Abs(float64(q[id])-w) > 1e-5 {
					t.Fatalf("q row 0 at id %d is %v, the draft softmax %v", id, q[id], w)
				}
			}
		}
		counts[tr.Node(0).Token]++
	}
	pv, df := testutil.ChiSquareP(counts, want0, draws)
	t.Logf("first drafted token vs q: chi-square p = %.3f (%d degrees of freedom)", pv, df)
	if pv < 1e-3 {
		t.Fatalf("the first drafted token does not follow the draft distribution: p = %.2g", pv)
	}
	// Same stream, same chain.
	var a, b spec.Tree
	rng.Reset(9, 9)
	if err := p.Propose(&a, 0); err != nil {
		t.Fatal(err)
	}
	rng.Reset(9, 9)
	if err := p.Propose(&b, 0); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Tokens(nil), b.Tokens(nil)) {
		t.Fatalf("same seed drafted %v and %v", a.Tokens(nil), b.Tokens(nil))
	}
}

// TestEagleFeatureTaps checks which target states an EAGLE-3 drafter is fed:
// its feature layers as the capture stored them, the residual stream after
// each decoder layer, so that index L is the last layer's output before the
// final norm (model.PreNormLast), not Transformers' post-norm entry L, which
// verification reads separately for the logits.
func TestEagleFeatureTaps(t *testing.T) {
	m := loadTarget(t)
	L := m.NumLayers()
	dr := randomDraft(t, m, m.VocabSize(), 3)
	dr.LayerIDs = []int{1, 3, L}
	prop, err := newProposer(m, dr, drafters.Decoding{Mode: drafters.ModeChain, Depth: 4}, 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 3, model.PreNormLast}; !slices.Equal(prop.Taps(), want) {
		t.Fatalf("feature taps %v for layers %v; want %v", prop.Taps(), dr.LayerIDs, want)
	}
}

// TestSessionAllocatesNothing: committing a position and a drafting step
// (one node's layer run, its logits and its top-k) allocate nothing, for
// plain EAGLE-3 and for EAGLE-3.1 drafts (the norms before fc when
// committing, the post-norm feedback when drafting).
func TestSessionAllocatesNothing(t *testing.T) {
	m := loadTarget(t)
	H := m.HiddenSize()
	for _, norms := range []Norms{{}, {FCNorm: true, NormOutput: true}, {NormBeforeFC: true, NormOutput: true}} {
		d := randomDraftNorms(t, m, 100, 4, norms)
		s := d.NewSession(32, 8)
		feats := make([]float32, 5*3*H)
		for i := range feats {
			feats[i] = float32(i%7) - 3
		}
		if err := s.Extend(feats, []int32{5, 6, 7, 8, 9}); err != nil {
			t.Fatal(err)
		}
		par, tok := []int{-1}, []int32{11}
		ids, logp := make([]int32, 4), make([]float32, 4)
		a := testing.AllocsPerRun(5, func() {
			s.Truncate(4)
			if err := s.Extend(feats[4*3*H:], tok); err != nil {
				t.Fatal(err)
			}
			nodes, err := s.AddNodes(par, tok)
			if err != nil {
				t.Fatal(err)
			}
			s.TopK(nodes[0], 4, ids, logp)
		})
		if a != 0 {
			t.Fatalf("%+v: committing a position and a drafting step allocate %v times", norms, a)
		}
	}
}
