package eval

import (
	"math"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// TestEagleSampledChain: at temperature > 0 the EAGLE-3 chain is drawn from
// the draft distribution q, which the proposer hands to verification: row i
// is the draft's softmax (over the draft vocabulary, mapped to target ids,
// zero elsewhere) at chain position i, the drafted token has q > 0, the first
// token's frequencies over many draws follow row 0, and the same seed drafts
// the same chain. At temperature 0 the chain stays top-1 with no q.
func TestEagleSampledChain(t *testing.T) {
	m := loadTarget(t)
	V := m.VocabSize()
	d := randomEagle(t, m, 150, 5)
	prompt := testPrompts(t, evalPrompts, 1)[0].Tokens
	const depth = 3
	newProp := func(params sample.Params, rng *sample.RNG) (*eagleProposer, *model.Result) {
		cfg, err := Config{Mode: ModeChain, Depth: depth, Sampling: params, MaxNewTokens: 8}.withDefaults(d)
		if err != nil {
			t.Fatal(err)
		}
		p, err := newEagleProposer(m, d.eagle, cfg, len(prompt)+16, rng)
		if err != nil {
			t.Fatal(err)
		}
		seq, err := m.NewSequence(len(prompt) + 16)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Forward([]model.Input{{Seq: seq, Tokens: prompt, Logits: model.LogitsLast}}, model.Options{Taps: p.taps()})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.start(prompt, 7, res); err != nil {
			t.Fatal(err)
		}
		return p, res
	}

	// Greedy: top-1, no draft distribution.
	rng := sample.NewRNG(1, 0)
	p, _ := newProp(sample.Params{}, rng)
	var tr spec.Tree
	if err := p.propose(&tr, 0); err != nil {
		t.Fatal(err)
	}
	if p.draftProbs() != nil || tr.Len() != depth {
		t.Fatalf("greedy chain: %d nodes, draft rows %v; want %d nodes and none", tr.Len(), p.draftProbs() != nil, depth)
	}
	var ids [1]int32
	var lp [1]float32
	p.s.TopK(-1, 1, ids[:], lp[:])
	if tr.Node(0).Token != int(ids[0]) {
		t.Fatalf("greedy chain starts with %d, the draft's top-1 is %d", tr.Node(0).Token, ids[0])
	}

	// Temperature 1: q is the draft softmax.
	p, _ = newProp(sample.Params{Temperature: 1}, rng)
	N := d.eagle.Geometry.DraftVocab
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
		if err := p.propose(&tr, 0); err != nil {
			t.Fatal(err)
		}
		q := p.draftProbs()
		if len(q) != (depth+1)*V || tr.Len() != depth {
			t.Fatalf("sampled chain of %d nodes with %d draft values, want %d and %d", tr.Len(), len(q), depth, (depth+1)*V)
		}
		for i := range depth {
			row := q[i*V : (i+1)*V]
			var sum float64
			for id, x := range row {
				if x < 0 || (x > 0 && !d.eagle.Vocab.T2D[id]) {
					t.Fatalf("q row %d holds %v at id %d (in draft vocabulary: %v)", i, x, id, d.eagle.Vocab.T2D[id])
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
	pv, df := chiSquareP(counts, want0, draws)
	t.Logf("first drafted token vs q: chi-square p = %.3f (%d degrees of freedom)", pv, df)
	if pv < 1e-3 {
		t.Fatalf("the first drafted token does not follow the draft distribution: p = %.2g", pv)
	}
	// Same stream, same chain.
	var a, b spec.Tree
	rng.Reset(9, 9)
	if err := p.propose(&a, 0); err != nil {
		t.Fatal(err)
	}
	rng.Reset(9, 9)
	if err := p.propose(&b, 0); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Tokens(nil), b.Tokens(nil)) {
		t.Fatalf("same seed drafted %v and %v", a.Tokens(nil), b.Tokens(nil))
	}
}
