package medusa

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/loop"
)

// stories260kData generates n samples from the bundled stories260k model: BOS,
// `prompt` tokens sampled at temperature 1 (not trained on), then `response`
// greedy tokens, with the final post-norm hidden states of a teacher-forced pass.
func stories260kData(t *testing.T, n, prompt, response int, seed uint64) (*dataset.Memory, []float32) {
	t.Helper()
	dir := "../../models/stories260k"
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("bundled model missing at %s: %v", dir, err)
	}
	dev := cpu.New(nil)
	m, err := model.Load(dir, dev)
	if err != nil {
		t.Fatal(err)
	}
	cfg := m.Config
	H, L := cfg.HiddenSize, cfg.NumLayers
	r := rand.New(rand.NewPCG(seed, 3))
	d := &dataset.Memory{H: H}
	T := 1 + prompt + response
	for i := 0; i < n; i++ {
		seq, err := m.NewSequence(T + 1)
		if err != nil {
			t.Fatal(err)
		}
		toks := []int{cfg.BOS[0]}
		next := toks
		for len(toks) < T {
			res, err := m.Forward([]model.Input{{Seq: seq, Tokens: next}}, model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			lg := res.LogitsOf(0)
			var tok int
			if len(toks) < 1+prompt {
				mx := lg[0]
				for _, x := range lg {
					mx = max(mx, x)
				}
				var sum float64
				for _, x := range lg {
					sum += math.Exp(float64(x - mx))
				}
				u := r.Float64() * sum
				for v, x := range lg {
					u -= math.Exp(float64(x - mx))
					tok = v
					if u < 0 {
						break
					}
				}
			} else {
				for v, x := range lg {
					if x > lg[tok] {
						tok = v
					}
				}
			}
			toks = append(toks, tok)
			next = []int{tok}
		}
		full, _ := m.NewSequence(T)
		res, err := m.Forward([]model.Input{{Seq: full, Tokens: toks, Logits: model.LogitsNone}}, model.Options{Taps: []int{L}})
		if err != nil {
			t.Fatal(err)
		}
		s := dataset.Sample{Tokens: make([]int32, T), LossMask: make([]bool, T), Final: append([]float32(nil), res.HiddenOf(0, 0)...)}
		for j, tk := range toks {
			s.Tokens[j] = int32(tk)
			s.LossMask[j] = j >= 1+prompt
		}
		d.Samples = append(d.Samples, s)
	}
	return d, m.LMHead.Float32()
}

// TestCalibrateStories260k is the calibration experiment behind the defaults:
// Medusa heads on greedy stories260k continuations. It runs only with
// DRAFTER_CALIBRATE=1 (minutes); DRAFTER_CALIBRATE_LR and _BATCH override.
func TestCalibrateStories260k(t *testing.T) {
	if os.Getenv("DRAFTER_CALIBRATE") != "1" {
		t.Skip("set DRAFTER_CALIBRATE=1 to run the calibration experiment")
	}
	data, target := stories260kData(t, 400, 4, 96, 1)
	cfg := DefaultConfig()
	if v, err := strconv.ParseFloat(os.Getenv("DRAFTER_CALIBRATE_LR"), 64); err == nil {
		cfg.LR = v
	}
	if v, err := strconv.Atoi(os.Getenv("DRAFTER_CALIBRATE_BATCH")); err == nil {
		cfg.BatchTokens = v
	}
	if v, err := strconv.Atoi(os.Getenv("DRAFTER_CALIBRATE_EPOCHS")); err == nil {
		cfg.MaxEpochs = v
	}
	init, _ := dmedusa.NewHeads(dmedusa.Geometry{Hidden: data.H, Vocab: len(target) / data.H, Heads: cfg.Heads, Layers: cfg.Layers}, target, false)
	base := evalHeads(t, init, data, cfg)
	t.Logf("untrained: loss %.3f top1 %.3v", base.Loss, base.Top1)
	res, err := Train(context.Background(), cfg, target, data, cpu.New(nil), &loop.Job{Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b := res.Best
	t.Logf("lr %g batch %d: %s after %d steps (%d epochs); best step %d loss %.3f top1 %.3v top5 %.3v acceptance %.3f chain %.3f",
		cfg.LR, res.BatchTokens, res.Stopped, res.Steps, res.Epochs, b.Step, b.Loss, b.Top1, b.Top5, b.Acceptance, b.Chain)
}
