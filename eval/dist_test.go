package eval

import (
	"context"
	"fmt"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
)

// secondTokenDistribution returns the exact distribution of the second
// generated token under params: sum_x p(x | prompt) p(y | prompt, x).
func secondTokenDistribution(t *testing.T, m *model.Model, prompt []int, params sample.Params) []float64 {
	t.Helper()
	V := m.VocabSize()
	sm, err := sample.NewSampler(V, params)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := m.NewSequence(len(prompt) + 2)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Forward([]model.Input{{Seq: seq, Tokens: prompt, Logits: model.LogitsLast}}, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p0, p1 := make([]float32, V), make([]float32, V)
	if err := sm.Probs(res.LogitsOf(0), p0); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, V)
	for x, px := range p0 {
		if px == 0 {
			continue
		}
		res, err := m.Forward([]model.Input{{Seq: seq, Tokens: []int{x}, Logits: model.LogitsLast}}, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := sm.Probs(res.LogitsOf(0), p1); err != nil {
			t.Fatal(err)
		}
		for y, py := range p1 {
			want[y] += float64(px) * float64(py)
		}
		if err := seq.Truncate(len(prompt)); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// TestSamplingMatchesTarget: at temperature 1 (with top-k 12, so that
// verification uses the warped distribution), the second generated token,
// the first one speculative decoding verifies, is distributed exactly as the
// target's: a chi-square test over many random streams, for random and
// trained drafters, chains and trees.
func TestSamplingMatchesTarget(t *testing.T) {
	m := loadTarget(t)
	prompt := testPrompts(t, evalPrompts, 1)[0]
	params := sample.Params{Temperature: 1, TopK: 12}
	want := secondTokenDistribution(t, m, prompt.Tokens, params)
	const n = 1500
	ps := make([]Prompt, n)
	for i := range ps {
		ps[i] = Prompt{ID: fmt.Sprint(i), Tokens: prompt.Tokens}
	}
	type drafterCase struct {
		name string
		d    *Drafter
		cfg  Config
	}
	cases := []drafterCase{
		{"random-medusa/tree", randomMedusa(t, m, 3, 9), Config{Mode: ModeTree}},
		{"random-eagle3/chain", randomEagle(t, m, 300, 9), Config{Mode: ModeChain, Depth: 2}},
	}
	if !testing.Short() {
		tr := trainedDrafters(t)
		for _, dir := range []string{tr.medusaDir, tr.eagleDir} {
			info, err := Detect(dir)
			if err != nil {
				t.Fatal(err)
			}
			d, err := LoadDrafter(info, m)
			if err != nil {
				t.Fatal(err)
			}
			cases = append(cases, drafterCase{"trained-" + string(info.Kind) + "/chain", d, Config{Mode: ModeChain}},
				drafterCase{"trained-" + string(info.Kind) + "/tree", d, Config{Mode: ModeTree}})
			if info.Kind == deagle3.Kind {
				// A small dynamic tree keeps the 1500 verification passes quick.
				cases[len(cases)-1].cfg = Config{Mode: ModeTree, Depth: 2, TopK: 4, TotalTokens: 12}
			}
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Sampling, cfg.MaxNewTokens, cfg.Seed = params, 2, 11
			rep, err := Run(context.Background(), m, c.d, ps, cfg)
			if err != nil {
				t.Fatal(err)
			}
			counts := make([]int, m.VocabSize())
			for _, pr := range rep.PerPrompt {
				if len(pr.Output) < 2 {
					t.Fatalf("prompt %s generated %v", pr.ID, pr.Output)
				}
				counts[pr.Output[1]]++
			}
			p, df := testutil.ChiSquareP(counts, want, n)
			t.Logf("τ %.3f, depth-1 acceptance %.3f; chi-square p = %.4f (%d degrees of freedom)", rep.MeanAcceptLength, rep.Stats.AcceptRate(1), p, df)
			if p < 1e-3 {
				t.Fatalf("the verified token's distribution differs from the target's: p = %.2g", p)
			}
		})
	}
}
