package eval

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/loop"
	"github.com/drafter-ai/drafter/train/medusa"
)

const (
	evalPrompts = "../data/prompts/stories-eval.jsonl"
	trainPrompt = "../data/prompts/stories-train.jsonl"
	eosID       = 2

	// Training budget of the test drafters: small, but enough for
	// multi-token acceptance.
	trainSamples = 60
	medusaEpochs = 10
	eagleEpochs  = 8
)

func loadTarget(t testing.TB) *model.Model {
	return loadGen(t).Model
}

func loadGen(t testing.TB) *target.Target {
	t.Helper()
	g, err := target.Load(testutil.Stories260k(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func testPrompts(t testing.TB, path string, n int) []Prompt {
	t.Helper()
	ps, err := LoadPrompts(loadGen(t), path, n)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// randomMedusa returns heads with random residual blocks and lm_heads near
// the target's: a drafter whose guesses are mostly wrong but sometimes right.
func randomMedusa(t testing.TB, m *model.Model, heads int, seed uint64) *Drafter {
	t.Helper()
	g := dmedusa.Geometry{Hidden: m.HiddenSize(), Vocab: m.VocabSize(), Heads: heads, Layers: 1}
	h, err := dmedusa.NewHeads(g, m.LMHead.Float32(), false)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for hd := range heads {
		for l := range g.Layers {
			for i := range h.W[hd][l] {
				h.W[hd][l][i] = float32(r.NormFloat64() * 0.3)
			}
			for i := range h.B[hd][l] {
				h.B[hd][l][i] = float32(r.NormFloat64() * 0.3)
			}
		}
		for i := range h.LMHead[hd] {
			h.LMHead[hd][i] += float32(r.NormFloat64() * 0.05)
		}
	}
	d, err := dmedusa.NewDrafter(h, m)
	if err != nil {
		t.Fatal(err)
	}
	return NewDrafter(d)
}

// medusaHeads returns the heads of a Medusa drafter.
func medusaHeads(d *Drafter) *dmedusa.Heads { return d.d.(*dmedusa.Drafter).Heads() }

// eagleDraft returns the draft of an EAGLE-3 drafter.
func eagleDraft(d *Drafter) *deagle3.Draft { return d.d.(*deagle3.Drafter).Draft() }

// randomEagle returns an EAGLE-3 draft with random weights over a random
// draft vocabulary of n ids (n < V exercises the d2t mapping).
func randomEagle(t testing.TB, m *model.Model, n int, seed uint64) *Drafter {
	t.Helper()
	g, p, voc := randomEagleParams(t, m, n, seed)
	dr, err := deagle3.NewDraft(g, p, voc, m.Embed, m.Device())
	if err != nil {
		t.Fatal(err)
	}
	d, err := deagle3.NewDrafter(dr, m)
	if err != nil {
		t.Fatal(err)
	}
	return NewDrafter(d)
}

func randomEagleParams(t testing.TB, m *model.Model, n int, seed uint64) (deagle3.Geometry, *deagle3.Params, *deagle3.Vocab) {
	t.Helper()
	g := deagle3.TargetGeometry(m.Config, n)
	r := rand.New(rand.NewPCG(seed, 2))
	H, qw, kw, I := g.Hidden, g.Heads*g.HeadDim, g.KVHeads*g.HeadDim, g.Intermediate
	rnd := func(size int, mean, std float64) []float32 {
		x := make([]float32, size)
		for i := range x {
			x[i] = float32(mean + std*r.NormFloat64())
		}
		return x
	}
	p := &deagle3.Params{FC: rnd(H*3*H, 0, 0.1), HiddenNorm: rnd(H, 1, 0.1), InputNorm: rnd(H, 1, 0.1),
		Q: rnd(qw*2*H, 0, 0.1), K: rnd(kw*2*H, 0, 0.1), V: rnd(kw*2*H, 0, 0.1), O: rnd(H*qw, 0, 0.1),
		PostNorm: rnd(H, 1, 0.1), Gate: rnd(I*H, 0, 0.1), Up: rnd(I*H, 0, 0.1), Down: rnd(H*I, 0, 0.1),
		Norm: rnd(H, 1, 0.1), LMHead: rnd(n*H, 0, 0.5)}
	counts := make([]int64, g.Vocab)
	for i := range counts {
		counts[i] = int64(r.IntN(100))
	}
	voc, err := deagle3.BuildVocab(counts, n)
	if err != nil {
		t.Fatal(err)
	}
	return g, p, voc
}

// runLossless runs the prompts ps through d with cfg, generating up to maxNew
// tokens and stopping at EOS, and fails unless every speculative output
// equals the baseline's.
func runLossless(tb testing.TB, m *model.Model, d *Drafter, ps []Prompt, cfg Config, maxNew int) *Report {
	tb.Helper()
	cfg.MaxNewTokens = maxNew
	cfg.EOS = []int{eosID}
	rep, err := Run(context.Background(), m, d, ps, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := rep.CheckLossless(); err != nil {
		tb.Fatal(err)
	}
	return rep
}

// trained holds drafters trained once for the whole test binary on greedy
// stories260k continuations of the training prompts, exported to disk the
// way the train command writes them.
type trained struct {
	dir       string // train output root: medusa-out/ and eagle-out/, as the trainers write them
	medusaDir string
	eagleDir  string
	fp        string
	err       error
}

var (
	trainOnce sync.Once
	trainRes  trained
)

// trainedDrafters trains Medusa heads and an EAGLE-3 layer on self-distilled
// data captured here (a few seconds on stories260k).
func trainedDrafters(t *testing.T) *trained {
	t.Helper()
	if testing.Short() {
		t.Skip("trains two drafters (seconds)")
	}
	trainOnce.Do(func() { trainRes = trainDrafters(t) })
	if trainRes.err != nil {
		t.Fatal(trainRes.err)
	}
	return &trainRes
}

func trainDrafters(t *testing.T) (tr trained) {
	gt, err := target.Load(testutil.Stories260k(), nil, nil)
	if err != nil {
		tr.err = err
		return
	}
	defer gt.Close()
	m := gt.Model
	tr.fp = gt.Fingerprint
	start := time.Now()
	ps, err := LoadPrompts(gt, trainPrompt, trainSamples)
	if err != nil {
		tr.err = err
		return
	}
	L, H := m.NumLayers(), m.HiddenSize()
	layers := deagle3.EngineDefaultLayers(L)
	taps := []int{L}
	var slot [3]int
	for c, id := range layers {
		slot[c] = slices.Index(taps, id)
		if slot[c] < 0 {
			slot[c] = len(taps)
			taps = append(taps, id)
		}
	}
	mem := &dataset.Memory{H: H}
	for _, p := range ps {
		seq := testmodel.Greedy(t, m, p.Tokens, 64, eosID)
		states := testmodel.States(t, m, seq, taps)
		toks := make([]int32, len(seq))
		mask := make([]bool, len(seq))
		for i, id := range seq {
			toks[i] = int32(id)
			mask[i] = i >= len(p.Tokens)
		}
		mem.Samples = append(mem.Samples, dataset.Sample{Tokens: toks, LossMask: mask, Final: states[0],
			Features: [][]float32{slices.Clone(states[slot[0]]), slices.Clone(states[slot[1]]), slices.Clone(states[slot[2]])}})
	}
	root, err := os.MkdirTemp("", "drafter-eval-test-")
	if err != nil {
		tr.err = err
		return
	}
	tr.dir = root
	be := cpu.New(nil)

	t.Logf("captured %d samples in %v", len(ps), time.Since(start))
	start = time.Now()
	mcfg := medusa.DefaultConfig()
	mcfg.BatchTokens = 512
	mcfg.MaxEpochs = medusaEpochs
	tr.medusaDir = filepath.Join(root, "medusa-out")
	mres, err := medusa.Train(context.Background(), mcfg, m.LMHead.Float32(), mem, be,
		&loop.Job{Out: tr.medusaDir, Provenance: loop.Provenance{BaseModel: testutil.Stories260k(), TargetFingerprint: tr.fp}})
	if err != nil {
		tr.err = err
		return
	}

	t.Logf("trained Medusa heads in %v: %+v", time.Since(start), mres.Best)
	start = time.Now()
	g := deagle3.TargetGeometry(m.Config, 0)
	ecfg := eagle3.DefaultConfig() // a zero field is not replaced by its default
	ecfg.DraftVocab, ecfg.BatchTokens, ecfg.MaxLength, ecfg.Epochs, ecfg.Seed = 256, 512, 512, eagleEpochs, 1
	ecfg.Export = deagle3.ExportOptions{DefaultLayers: true}
	tr.eagleDir = filepath.Join(root, "eagle-out")
	eres, err := eagle3.Train(context.Background(), ecfg, g, m.Embed.Float32(), m.LMHead.Float32(), mem, be,
		&loop.Job{Out: tr.eagleDir, Provenance: loop.Provenance{TargetFingerprint: tr.fp}})
	if err != nil {
		tr.err = err
		return
	}
	t.Logf("trained the EAGLE-3 layer in %v: %+v", time.Since(start), eres.Best)
	return tr
}

func TestMain(m *testing.M) {
	code := m.Run()
	if trainRes.dir != "" {
		os.RemoveAll(trainRes.dir)
	}
	os.Exit(code)
}
