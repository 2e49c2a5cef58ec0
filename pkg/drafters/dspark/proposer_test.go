package dspark

import (
	"math"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
	"github.com/drafter-ai/drafter/pkg/tokenizer"
)

// storiesDrafter is a random DSpark drafter for the bundled model: block 5,
// one layer fusing hidden_states 3 and 5 (5 = L: the last layer's output
// before the final norm), the target's embedding and lm_head.
func storiesDrafter(t *testing.T) (*model.Model, *Drafter, []int) {
	t.Helper()
	m, err := model.Load(testutil.Stories260k(), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := dflash.TargetGeometry(m.Config, 1, 2, 5, 0)
	d := randomDraft(t, g, HeadShape{Rank: 8, Confidence: true, WithMarkov: true}, []int{3, m.NumLayers()}, m.NumLayers(), 21)
	d.Embed, d.LMHead = m.Embed.Float32(), m.LMHead.Float32()
	dr, err := NewDrafter(d, m)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.LoadDir(testutil.Stories260k())
	if err != nil {
		t.Fatal(err)
	}
	return m, dr, tok.Encode("Ben and Lucy went to the zoo to", true)
}

// start makes a proposer for cfg and starts it on prompt (first token 7).
func start(t *testing.T, m *model.Model, dr *Drafter, prompt []int, cfg drafters.Decoding, rng *sample.RNG) *proposer {
	t.Helper()
	cfg, err := dr.Configure(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pp, err := dr.NewProposer(cfg, drafters.ProposerOptions{Capacity: len(prompt) + 32, RNG: rng})
	if err != nil {
		t.Fatal(err)
	}
	p := pp.(*proposer)
	if !slices.Equal(p.Taps(), []int{3, model.PreNormLast}) {
		t.Fatalf("taps %v: want hidden_states 3 and the last layer's output before the final norm", p.Taps())
	}
	seq, err := m.NewSequence(len(prompt) + 32)
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
	return p
}

// The proposer's chains: greedy ones are the Markov loop's argmaxes with
// each slot biased by the previous drafted token (the anchor for slot 0);
// sampled ones hand verification the distribution each token was drawn
// from, row k being the softmax of slot k's logits under the token drawn
// at slot k-1, the first token following row 0, the same stream drafting
// the same chain; a confidence threshold cuts the chain where the product
// of confidences falls below it.
func TestProposerChains(t *testing.T) {
	m, dr, prompt := storiesDrafter(t)
	V, B := m.VocabSize(), dr.d.Geometry.BlockSize
	rng := sample.NewRNG(1, 0)
	p := start(t, m, dr, prompt, drafters.Decoding{Mode: drafters.ModeChain}, rng)
	var tr spec.Tree
	if err := p.Propose(&tr, 0); err != nil {
		t.Fatal(err)
	}
	if tr.Len() != B || p.DraftProbs() != nil {
		t.Fatalf("greedy chain of %d nodes (draft rows %v), want the whole block of %d", tr.Len(), p.DraftProbs() != nil, B)
	}
	lg := make([]float32, V)
	prev := 7
	var conf []float32
	for k := range B {
		c, err := p.s.Step(k, prev, lg)
		if err != nil {
			t.Fatal(err)
		}
		conf = append(conf, c)
		if tr.Node(k).Token != argmax(lg) {
			t.Fatalf("slot %d drafted %d, the Markov loop's argmax after %d is %d", k, tr.Node(k).Token, prev, argmax(lg))
		}
		prev = tr.Node(k).Token
	}
	if !slices.Equal(p.Confidences(), conf) {
		t.Fatalf("confidences %v, the session's %v", p.Confidences(), conf)
	}

	// A threshold between two cumulative products cuts the chain there:
	// the products fall (confidences are below 1), so the first slot k >= 1
	// whose product is below the midpoint of P_{k-1} and P_k is k.
	prods := make([]float64, B)
	cum := 1.0
	for k, c := range conf {
		cum *= float64(c)
		prods[k] = cum
	}
	cut := 1
	for cut < B-1 && !(prods[cut] < prods[cut-1]) {
		cut++
	}
	dr.Threshold = (prods[cut-1] + prods[cut]) / 2
	pt := start(t, m, dr, prompt, drafters.Decoding{Mode: drafters.ModeChain}, rng)
	dr.Threshold = 0
	if err := pt.Propose(&tr, 0); err != nil {
		t.Fatal(err)
	}
	if tr.Len() != cut || !(prods[cut] < prods[cut-1]) {
		t.Fatalf("threshold between %v and %v (confidences %v): chain of %d, want %d", prods[cut-1], prods[cut], conf, tr.Len(), cut)
	}

	// Temperature 1.
	p = start(t, m, dr, prompt, drafters.Decoding{Mode: drafters.ModeChain, Sampling: sample.Params{Temperature: 1}}, rng)
	if err := p.s.Backbone(7); err != nil {
		t.Fatal(err)
	}
	if _, err := p.s.Step(0, 7, lg); err != nil {
		t.Fatal(err)
	}
	want0 := softmax(lg)
	const draws = 3000
	counts := make([]int, V)
	for s := range draws {
		rng.Reset(3, uint64(s))
		if err := p.Propose(&tr, 0); err != nil {
			t.Fatal(err)
		}
		q := p.DraftProbs()
		if len(q) != (B+1)*V || tr.Len() != B {
			t.Fatalf("sampled chain of %d nodes with %d draft values", tr.Len(), len(q))
		}
		if s < 3 {
			prev := 7
			for k := range B {
				if _, err := p.s.Step(k, prev, lg); err != nil {
					t.Fatal(err)
				}
				want := softmax(lg)
				for v := range V {
					if math.Abs(float64(q[k*V+v])-want[v]) > 1e-5 {
						t.Fatalf("draw %d slot %d: q[%d] = %v, softmax of the slot's logits after %d: %v", s, k, v, q[k*V+v], prev, want[v])
					}
				}
				if !(q[k*V+tr.Node(k).Token] > 0) {
					t.Fatalf("slot %d drafted %d with q 0", k, tr.Node(k).Token)
				}
				prev = tr.Node(k).Token
			}
		}
		counts[tr.Node(0).Token]++
	}
	pv, df := testutil.ChiSquareP(counts, want0, draws)
	t.Logf("first drafted token vs q: chi-square p = %.3f (%d degrees of freedom)", pv, df)
	if pv < 1e-3 {
		t.Fatalf("the first drafted token does not follow the draft distribution: p = %.2g", pv)
	}
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

func softmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	out := make([]float64, len(x))
	var z float64
	for i, v := range x {
		out[i] = math.Exp(float64(v) - mx)
		z += out[i]
	}
	for i := range out {
		out[i] /= z
	}
	return out
}

// Configure: the whole block by default, a shorter chain on request; a
// tree, or a chain longer than the block, is refused naming the setting.
func TestConfigure(t *testing.T) {
	_, dr, _ := storiesDrafter(t)
	c, err := dr.Configure(drafters.Decoding{Mode: drafters.ModeChain})
	if err != nil || c.Depth != 5 {
		t.Fatalf("default chain: depth %d, %v; want the block of 5", c.Depth, err)
	}
	if c, err = dr.Configure(drafters.Decoding{Mode: drafters.ModeChain, Depth: 3}); err != nil || c.Depth != 3 {
		t.Fatalf("chain of 3: %d, %v", c.Depth, err)
	}
	for _, bad := range []drafters.Decoding{{Mode: drafters.ModeTree}, {Mode: drafters.ModeChain, Depth: 6}} {
		_, err := dr.Configure(bad)
		if se, ok := err.(*drafters.SettingError); !ok || len(se.Settings) == 0 {
			t.Errorf("%+v: %v, want a SettingError", bad, err)
		}
	}
}
