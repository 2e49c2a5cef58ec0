package eval

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/drafters"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// shapes lists every draft shape eval runs for a drafter kind.
func shapes(kind drafters.Kind) map[string]Config {
	if kind == dmedusa.Kind {
		return map[string]Config{
			"chain":          {Mode: ModeChain},
			"chain-2":        {Mode: ModeChain, Depth: 2},
			"default-tree":   {Mode: ModeTree},
			"custom-tree":    {Mode: ModeTree, Tree: spec.Choices{{0}, {1}, {2}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}, {0, 0, 0, 0}}},
			"wide-flat-tree": {Mode: ModeTree, Tree: spec.Choices{{0}, {1}, {2}, {3}, {4}, {5}}},
		}
	}
	return map[string]Config{
		"chain-1":     {Mode: ModeChain, Depth: 1},
		"chain-4":     {Mode: ModeChain},
		"chain-7":     {Mode: ModeChain, Depth: 7},
		"tree":        {Mode: ModeTree},
		"tree-narrow": {Mode: ModeTree, Depth: 3, TopK: 2, TotalTokens: 6},
		"tree-wide":   {Mode: ModeTree, Depth: 2, TopK: 10, TotalTokens: 40},
	}
}

// TestLosslessRandomDrafters: at temperature 0 the speculative output equals
// plain greedy decoding for drafters with random weights, in every shape.
func TestLosslessRandomDrafters(t *testing.T) {
	m := loadTarget(t)
	ps := testPrompts(t, evalPrompts, 6)
	drafters := map[string]*Drafter{
		"medusa":           randomMedusa(t, m, 4, 1),
		"eagle3":           randomEagle(t, m, 200, 2),
		"eagle3-fullvocab": randomEagle(t, m, m.VocabSize(), 3),
	}
	for name, d := range drafters {
		for shape, cfg := range shapes(d.Info.Kind) {
			t.Run(name+"/"+shape, func(t *testing.T) {
				rep := runLossless(t, m, d, ps, cfg, 40)
				if !rep.Lossless.Checked || rep.Lossless.Prompts != len(ps) {
					t.Fatalf("lossless check covered %d of %d prompts (checked %v)", rep.Lossless.Prompts, len(ps), rep.Lossless.Checked)
				}
				if rep.Speculative.Tokens != rep.Baseline.Tokens {
					t.Fatalf("speculative run made %d tokens, baseline %d", rep.Speculative.Tokens, rep.Baseline.Tokens)
				}
				t.Logf("τ %.3f over %d steps, hist %v", rep.MeanAcceptLength, rep.Stats.Steps, rep.AcceptLengthHist)
			})
		}
	}
}

// TestLosslessBF16: on the target converted to bf16 (its weights read in
// place, the EAGLE-3 draft gathering its embedding rows from the bf16
// matrix) the speculative output still equals plain greedy decoding, as on
// the float32 target, in a chain and a tree of each kind.
func TestLosslessBF16(t *testing.T) {
	dir := testutil.CopyDir(t, testutil.Stories260k())
	testmodel.Convert(t, dir, safetensors.BF16)
	g, err := target.Load(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m := g.Model
	if m.Embed.DType != tensor.BF16 || m.Memory().Mapped == 0 {
		t.Fatalf("the target holds its embedding as %s, %d bytes mapped: want bf16 read in place", m.Embed.DType, m.Memory().Mapped)
	}
	ps := testPrompts(t, evalPrompts, 4)
	for name, d := range map[string]*Drafter{"medusa": randomMedusa(t, m, 4, 1), "eagle3": randomEagle(t, m, 200, 2)} {
		for _, shape := range []string{"chain-2", "chain-4", "tree", "default-tree"} {
			cfg, ok := shapes(d.Info.Kind)[shape]
			if !ok {
				continue
			}
			t.Run(name+"/"+shape, func(t *testing.T) {
				rep := runLossless(t, m, d, ps, cfg, 32)
				if !rep.Lossless.Checked || rep.Lossless.Prompts != len(ps) || rep.Speculative.Tokens != rep.Baseline.Tokens {
					t.Fatalf("lossless check covered %d of %d prompts (checked %v); %d speculative tokens, %d baseline",
						rep.Lossless.Prompts, len(ps), rep.Lossless.Checked, rep.Speculative.Tokens, rep.Baseline.Tokens)
				}
			})
		}
	}
}

// TestTrainedDrafters: drafters trained for a few seconds on self-distilled
// stories accept several tokens per forward, still losslessly, loaded from
// their exports the way the command loads them.
func TestTrainedDrafters(t *testing.T) {
	tr := trainedDrafters(t)
	m := loadTarget(t)
	ps := testPrompts(t, evalPrompts, 10)
	for _, dir := range []string{tr.medusaDir, tr.eagleDir} {
		info, err := Detect(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckFingerprint(info, testutil.Stories260k(), tr.fp); err != nil {
			t.Fatal(err)
		}
		d, err := LoadDrafter(info, m)
		if err != nil {
			t.Fatal(err)
		}
		for shape, cfg := range map[string]Config{"chain": {Mode: ModeChain}, "tree": {Mode: ModeTree}} {
			t.Run(string(info.Kind)+"/"+shape, func(t *testing.T) {
				rep := runLossless(t, m, d, ps, cfg, 64)
				t.Logf("τ %.3f, hist %v, by depth %.3f, heads %+v, speed-up %.2f (drafter %.0f%%)", rep.MeanAcceptLength, rep.AcceptLengthHist, rep.AcceptRateByDepth, rep.HeadHits, rep.SpeedUp, 100*rep.DrafterShare)
				if !(rep.MeanAcceptLength > 1.3) {
					t.Fatalf("a trained drafter accepts %.3f tokens per forward; want > 1.3 (random drafters: about 1.0)", rep.MeanAcceptLength)
				}
				// The step costs explain the speed-up: the tokens per
				// forward over the break-even.
				c, b, s := rep.Cost, rep.Baseline, rep.Speculative
				perFwd := float64(b.Forwards) / float64(s.Forwards)
				if !(c.Verify > 0 && c.Draft > 0) || math.Abs(perFwd/c.BreakEven-rep.SpeedUp) > 1e-9*rep.SpeedUp {
					t.Fatalf("step cost %+v does not explain speed-up %.4f (%.3f tokens per forward)", c, rep.SpeedUp, perFwd)
				}
			})
		}
	}
}

// TestTypicalAcceptance runs Medusa's typical acceptance, which the report
// must mark lossy and exempt from the token-for-token comparison.
func TestTypicalAcceptance(t *testing.T) {
	m := loadTarget(t)
	ps := testPrompts(t, evalPrompts, 3)
	cfg := Config{Mode: ModeTree, MaxNewTokens: 24, Sampling: sample.Params{Temperature: 0.7},
		Typical: &spec.TypicalParams{Epsilon: 0.09, Alpha: 0.3}}
	rep, err := Run(context.Background(), m, randomMedusa(t, m, 3, 2), ps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Lossy || rep.Acceptance != "typical" || rep.Lossless.Checked {
		t.Fatalf("typical acceptance reported as acceptance %q, lossy %v, checked %v", rep.Acceptance, rep.Lossy, rep.Lossless.Checked)
	}
	var buf bytes.Buffer
	rep.WriteText(&buf)
	if !strings.Contains(buf.String(), "LOSSY") {
		t.Fatalf("the table does not flag lossy acceptance:\n%s", buf.String())
	}
}

// TestLosslessReporting checks the comparison that makes eval fail.
func TestLosslessReporting(t *testing.T) {
	cases := []struct {
		a, b []int
		want int
	}{
		{[]int{1, 2, 3}, []int{1, 2, 3}, -1},
		{[]int{1, 2, 3}, []int{1, 5, 3}, 1},
		{[]int{1, 2}, []int{1, 2, 3}, 2},
		{[]int{1, 2, 3}, []int{1}, 1},
		{nil, nil, -1},
	}
	for _, c := range cases {
		if got := firstMismatch(c.a, c.b); got != c.want {
			t.Errorf("firstMismatch(%v, %v) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	rep := &Report{Lossless: Lossless{Checked: true, Prompts: 4, Mismatches: []Mismatch{{Prompt: 2, ID: "line 3", Index: 7, Baseline: 10, Speculative: 11, Margin: 0.5}}}}
	err := rep.CheckLossless()
	var le *LosslessError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "1 of 4 prompts") || !strings.Contains(err.Error(), "token 7") {
		t.Fatalf("CheckLossless: %v", err)
	}
	rep.Lossless.Mismatches = nil
	if err := rep.CheckLossless(); err != nil {
		t.Fatal(err)
	}
}
