package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/target"
)

// exportRandomEagle writes an EAGLE-3 draft with random weights for the
// bundled model into a train-like output folder.
func exportRandomEagle(t *testing.T) string {
	t.Helper()
	tg, err := target.Load(testutil.Stories260k(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	m := tg.Model
	g := deagle3.TargetGeometry(m.Config, m.VocabSize())
	r := rand.New(rand.NewPCG(3, 4))
	H, qw, kw, I := g.Hidden, g.Heads*g.HeadDim, g.KVHeads*g.HeadDim, g.Intermediate
	rnd := func(size int, mean float64) []float32 {
		x := make([]float32, size)
		for i := range x {
			x[i] = float32(mean + 0.1*r.NormFloat64())
		}
		return x
	}
	p := &deagle3.Params{FC: rnd(H*3*H, 0), HiddenNorm: rnd(H, 1), InputNorm: rnd(H, 1),
		Q: rnd(qw*2*H, 0), K: rnd(kw*2*H, 0), V: rnd(kw*2*H, 0), O: rnd(H*qw, 0),
		PostNorm: rnd(H, 1), Gate: rnd(I*H, 0), Up: rnd(I*H, 0), Down: rnd(H*I, 0),
		Norm: rnd(H, 1), LMHead: rnd(m.VocabSize()*H, 0)}
	counts := make([]int64, g.Vocab)
	for i := range counts {
		counts[i] = int64(r.IntN(100))
	}
	voc, err := deagle3.BuildVocab(counts, m.VocabSize())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := deagle3.Export(filepath.Join(dir, "eagle3"), g, p, voc, deagle3.ExportOptions{DefaultLayers: true}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEvalDraftBeyondContext: a draft shape that cannot fit the model's
// context whatever the prompt (its nodes, --max-new-tokens and the shortest
// prompt need more positions than the model attends over) is a value the
// flag cannot take with this model: exit 2, naming the flag and the range
// this model and --max-new-tokens allow, as for --max-new-tokens beyond the
// context. Valid shapes run (eval's TestDraftFitsEdge checks the edge of the
// range against the decoder's own capacity).
func TestEvalDraftBeyondContext(t *testing.T) {
	if _, err := os.Stat(testutil.Stories260k()); err != nil {
		t.Skip("bundled model missing:", err)
	}
	dir := exportRandomEagle(t)
	prompts := "../../data/prompts/stories-eval.jsonl"
	base := []string{"--model", testutil.Stories260k(), "--drafter", dir, "--prompts", prompts, "--limit", "1"}
	// stories260k attends over 2048 positions: 2000 new tokens leave 45 for
	// the prompt (at least 1 token), the draft's nodes and the 2 the
	// decoder keeps in reserve.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-new-tokens", "2000", "--mode", "tree", "--total-tokens", "1000"},
			"--total-tokens 1000: want 2 to 46 positions with this model (it attends over 2048 positions) and --max-new-tokens 2000"},
		{[]string{"--max-new-tokens", "2000", "--mode", "chain", "--depth", "60"},
			"--depth 60: want 1 to 45 drafted tokens with this model (it attends over 2048 positions) and --max-new-tokens 2000"},
		{[]string{"--max-new-tokens", "2000", "--mode", "tree"},
			"--max-new-tokens 2000 leaves room for a draft of 2 to 46 positions with this model (it attends over 2048 positions), and the default --total-tokens is 60: lower --max-new-tokens or set --total-tokens 2 to 46"},
		{[]string{"--max-new-tokens", "2046", "--mode", "chain"},
			"--max-new-tokens 2046 leaves no room for a draft with this model"},
		// Out of range whatever the model: the range of the flag.
		{[]string{"--mode", "tree", "--total-tokens", "1"}, "--total-tokens 1: want 0 (the default, 60) or 2 to 1024 positions"},
		{[]string{"--mode", "tree", "--total-tokens", "100000"}, "--total-tokens 100000: want 0 (the default, 60) or 2 to 1024 positions"},
	} {
		code, msg := evalCLI(t, append(base, c.args...)...)
		if code != exitUsage || !strings.Contains(msg, c.want) {
			t.Errorf("%v: exit %d (%s); want %d and %q", c.args, code, msg, exitUsage, c.want)
		}
	}
	for _, args := range [][]string{
		{"--max-new-tokens", "4", "--mode", "tree", "--total-tokens", "2"},
		{"--max-new-tokens", "4", "--mode", "chain", "--depth", "1"},
	} {
		if code, msg := evalCLI(t, append(base, args...)...); code != exitOK {
			t.Errorf("%v: exit %d (%s); want %d", args, code, msg, exitOK)
		}
	}
}
