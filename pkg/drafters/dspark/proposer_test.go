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
// of confidences falls below it (the schedules: TestSchedules).
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
	thr := drafters.Decoding{Mode: drafters.ModeChain, Schedule: drafters.Schedule{Kind: drafters.ScheduleThreshold, Threshold: (prods[cut-1] + prods[cut]) / 2}}
	if err := start(t, m, dr, prompt, thr, rng).Propose(&tr, 0); err != nil {
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

// The SPS scheduler stops at the first slot that does not raise the
// expected tokens per unit of verification cost, τ(ℓ)/cost(ℓ), computed
// here from the session's own confidences; flat costs draft the whole
// block, a cost that jumps after slot j stops there; a calibration divides
// each slot's confidence logit by its temperature for the serving rule.
func TestSchedules(t *testing.T) {
	m, dr, prompt := storiesDrafter(t)
	B := dr.d.Geometry.BlockSize
	// The random head is nearly sure every slot is rejected; raise its
	// bias so that the confidences spread over (0, 1) and Φ peaks inside
	// the block.
	dr.d.Heads.ConfB[0] += 8
	rng := sample.NewRNG(1, 0)
	sps := func(cost []float64) drafters.Decoding {
		return drafters.Decoding{Mode: drafters.ModeChain, Schedule: drafters.Schedule{Kind: drafters.ScheduleSPS, RoundCost: cost}}
	}
	flat := make([]float64, B+1)
	for i := range flat {
		flat[i] = 1
	}
	var tr spec.Tree
	p := start(t, m, dr, prompt, sps(flat), rng)
	if err := p.Propose(&tr, 0); err != nil {
		t.Fatal(err)
	}
	conf := slices.Clone(p.Confidences())
	if tr.Len() != B {
		t.Fatalf("flat verification costs drafted %d of %d slots (confidences %v)", tr.Len(), B, conf)
	}
	for j := 1; j < B; j++ {
		jump := slices.Clone(flat)
		for k := j + 1; k <= B; k++ {
			jump[k] = 50
		}
		if err := start(t, m, dr, prompt, sps(jump), rng).Propose(&tr, 0); err != nil {
			t.Fatal(err)
		}
		if tr.Len() != j {
			t.Errorf("cost jumping after %d drafts: chain of %d", j, tr.Len())
		}
	}
	// Costs growing by a fraction per token: the chain ends at the first
	// ℓ where Φ(ℓ+1) <= Φ(ℓ).
	for _, slope := range []float64{0.02, 0.1, 0.3, 1} {
		cost := make([]float64, B+1)
		for i := range cost {
			cost[i] = 1 + slope*float64(i)
		}
		phi := func(l int) float64 {
			tau, cum := 1.0, 1.0
			for _, c := range conf[:l] {
				cum *= float64(c)
				tau += cum
			}
			return tau / cost[l]
		}
		want := 1
		for want < B && phi(want+1) > phi(want) {
			want++
		}
		if err := start(t, m, dr, prompt, sps(cost), rng).Propose(&tr, 0); err != nil {
			t.Fatal(err)
		}
		t.Logf("cost slope %g: chain of %d (confidences %v)", slope, tr.Len(), conf)
		if tr.Len() != want {
			t.Errorf("cost slope %g: chain of %d, Φ's first maximum is at %d (confidences %v)", slope, tr.Len(), want, conf)
		}
	}

	// Sampled and cut short: verification gets a draft row per node and
	// one past the chain, not the whole block's.
	V := m.VocabSize()
	samp := sps(make([]float64, B+1))
	samp.Sampling = sample.Params{Temperature: 1}
	for i := range samp.Schedule.RoundCost {
		samp.Schedule.RoundCost[i] = 1 + 0.3*float64(i)
	}
	ps := start(t, m, dr, prompt, samp, rng)
	for s := range 20 {
		rng.Reset(4, uint64(s))
		if err := ps.Propose(&tr, 0); err != nil {
			t.Fatal(err)
		}
		if q := ps.DraftProbs(); len(q) != (tr.Len()+1)*V || tr.Len() < 1 {
			t.Fatalf("sampled chain of %d nodes with %d draft values, want %d", tr.Len(), len(q), (tr.Len()+1)*V)
		}
	}

	// Calibrated: σ(z_k/T_k), the greedy set at temperature 0.
	dr.Calibration = &Calibration{Method: CalibrationSTS, Greedy: []float64{0.5, 1, 2, 3, 4}, Sampled: []float64{7, 7, 7, 7, 7}}
	defer func() { dr.Calibration = nil }()
	cfg, err := dr.Configure(sps(flat))
	if err != nil || cfg.Schedule.Calibration != CalibrationSTS {
		t.Fatalf("calibrated schedule: %+v, %v", cfg.Schedule, err)
	}
	p = start(t, m, dr, prompt, sps(flat), rng)
	if err := p.Propose(&tr, 0); err != nil {
		t.Fatal(err)
	}
	for k, c := range p.Confidences() {
		z := math.Log(float64(conf[k]) / (1 - float64(conf[k])))
		want := 1 / (1 + math.Exp(-z/dr.Calibration.Greedy[k]))
		if math.Abs(float64(c)-want) > 1e-5 {
			t.Errorf("slot %d: calibrated confidence %v, σ(z/%g) = %v", k, c, dr.Calibration.Greedy[k], want)
		}
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
	if c, err = dr.Configure(drafters.Decoding{}); err != nil || c.Mode != drafters.ModeChain || c.Depth != 5 {
		t.Fatalf("no shape given: %s of %d, %v; want the chain of the block, 5", c.Mode, c.Depth, err)
	}
	if c, err = dr.Configure(drafters.Decoding{Mode: drafters.ModeChain, Depth: 3}); err != nil || c.Depth != 3 {
		t.Fatalf("chain of 3: %d, %v", c.Depth, err)
	}
	for _, bad := range []drafters.Decoding{{Mode: drafters.ModeTree}, {Mode: drafters.ModeChain, Depth: 6},
		{Mode: drafters.ModeChain, Schedule: drafters.Schedule{Kind: drafters.ScheduleThreshold, Threshold: 1}},
		{Mode: drafters.ModeChain, Schedule: drafters.Schedule{Kind: drafters.ScheduleSPS, RoundCost: []float64{1, 1}}},
		{Mode: drafters.ModeChain, Schedule: drafters.Schedule{Kind: "best"}}} {
		_, err := dr.Configure(bad)
		if se, ok := err.(*drafters.SettingError); !ok || len(se.Settings) == 0 {
			t.Errorf("%+v: %v, want a SettingError", bad, err)
		}
	}
}
