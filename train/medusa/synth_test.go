package medusa

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/loop"
)

// synthTarget is a tiny random frozen "language model": a recurrent state
// s_t = norm(tanh(A s_{t-1} + E[tok_t])), next-token logits scale * LM s_t,
// tokens sampled at the given temperature. Its states are what the heads read.
type synthTarget struct {
	H, V     int
	A, E, LM []float32
	scale    float64
}

func newSynthTarget(seed uint64, H, V int) *synthTarget {
	r := rand.New(rand.NewPCG(seed, 42))
	st := &synthTarget{H: H, V: V, A: make([]float32, H*H), E: make([]float32, V*H), LM: make([]float32, V*H), scale: 3}
	randFill(r, st.A, 1.2/math.Sqrt(float64(H)))
	randFill(r, st.E, 1)
	randFill(r, st.LM, 1/math.Sqrt(float64(H)))
	st.scale = 30 // nearly greedy, like greedy continuations of a real target
	return st
}

// generate returns one sample: prompt tokens drawn uniformly, then a response
// sampled from the target; Final holds the state after reading each token.
func (st *synthTarget) generate(r *rand.Rand, prompt, response int) dataset.Sample {
	H, V := st.H, st.V
	T := prompt + response
	s := dataset.Sample{Tokens: make([]int32, T), LossMask: make([]bool, T), Final: make([]float32, T*H)}
	prev := make([]float64, H)
	logits := make([]float64, V)
	for t := 0; t < T; t++ {
		if t < prompt {
			s.Tokens[t] = int32(r.IntN(V))
		} else {
			s.LossMask[t] = true
			// sample from the logits of the previous state
			mx := math.Inf(-1)
			for v := 0; v < V; v++ {
				var z float64
				for i := 0; i < H; i++ {
					z += float64(st.LM[v*H+i]) * prev[i]
				}
				logits[v] = st.scale * z
				mx = math.Max(mx, logits[v])
			}
			var sum float64
			for v := range logits {
				logits[v] = math.Exp(logits[v] - mx)
				sum += logits[v]
			}
			u := r.Float64() * sum
			tok := V - 1
			for v, p := range logits {
				if u < p {
					tok = v
					break
				}
				u -= p
			}
			s.Tokens[t] = int32(tok)
		}
		cur := make([]float64, H)
		var ss float64
		for o := 0; o < H; o++ {
			z := float64(st.E[int(s.Tokens[t])*H+o])
			for i := 0; i < H; i++ {
				z += float64(st.A[o*H+i]) * prev[i]
			}
			cur[o] = math.Tanh(z)
			ss += cur[o] * cur[o]
		}
		rs := 1 / math.Sqrt(ss/float64(H)+1e-6)
		for o := range cur {
			cur[o] *= rs
			s.Final[t*H+o] = float32(cur[o])
		}
		prev = cur
	}
	return s
}

func synthData(seed uint64, H, V, n, prompt, response int) (*dataset.Memory, *synthTarget) {
	st := newSynthTarget(seed, H, V)
	r := rand.New(rand.NewPCG(seed, 7))
	d := &dataset.Memory{H: H}
	for i := 0; i < n; i++ {
		d.Samples = append(d.Samples, st.generate(r, prompt, response))
	}
	return d, st
}

// TestTrainLearnsSyntheticTarget trains with the default recipe (smaller
// batches for the small data, and 4 heads: this random process is too
// uncertain 7 tokens ahead for a sixth head to gain 0.1 top-1) and checks
// the held-out loss falls and top-1 accuracy rises well above what the
// initial heads (copies of the target's next-token head) achieve.
func TestTrainLearnsSyntheticTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for a few seconds")
	}
	data, st := synthData(1, 32, 64, 400, 4, 48)
	cfg := DefaultConfig()
	cfg.Heads = 4
	cfg.BatchTokens = 1024
	cfg.MaxEpochs = 30
	var first, last *Metrics
	cfg.Progress = func(p Progress) {
		if p.Eval != nil {
			if first == nil {
				first = p.Eval
			}
			last = p.Eval
		}
	}
	dir := t.TempDir()
	res, err := Train(context.Background(), cfg, st.LM, data, cpu.New(nil), &loop.Job{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	// Baseline: the untrained heads.
	init, _ := dmedusa.NewHeads(res.Heads.Geometry, st.LM, false)
	base := evalHeads(t, init, data, cfg)
	t.Logf("stopped %s after %d steps, %d epochs", res.Stopped, res.Steps, res.Epochs)
	t.Logf("untrained: loss %.3f top1 %.3v top5 %.3v", base.Loss, base.Top1, base.Top5)
	t.Logf("first eval: loss %.3f top1 %.3v", first.Loss, first.Top1)
	t.Logf("best: step %d loss %.3f top1 %.3v top5 %.3v acceptance %.3f", res.Best.Step, res.Best.Loss, res.Best.Top1, res.Best.Top5, res.Best.Acceptance)
	t.Logf("last: step %d loss %.3f top1 %.3v", last.Step, last.Loss, last.Top1)
	if !(res.Best.Loss < 0.7*base.Loss) {
		t.Errorf("held-out loss %.3f did not fall well below the untrained %.3f", res.Best.Loss, base.Loss)
	}
	for h := range res.Best.Top1 {
		if !(res.Best.Top1[h] > base.Top1[h]+0.1) {
			t.Errorf("head %d top-1 %.3f not above the untrained %.3f", h, res.Best.Top1[h], base.Top1[h])
		}
	}
}

// evalHeads evaluates heads on the held-out split Train uses for cfg.
func evalHeads(t *testing.T, m *dmedusa.Heads, data *dataset.Memory, cfg Config) *Metrics {
	t.Helper()
	n := data.NumSamples()
	split := sampleOrder(n, cfg.Seed, heldOutStream)
	nHeld := int(math.Round(cfg.HeldOut * float64(n)))
	rows := cfg.BatchTokens
	if rows == 0 {
		rows = 4096
	}
	ws := mustWorkspace(t, cpu.DefaultBackend(), m, rows, 0)
	b := &Batch{X: make([]float32, rows*m.Hidden), Targets: make([][]int32, m.Heads)}
	for h := range b.Targets {
		b.Targets[h] = make([]int32, rows)
	}
	mt, err := newEvaluator(rows).evaluate(ws, b, data, split[:nHeld], m.Heads, m.Hidden, m.Vocab, Weights(m.Heads, cfg.Decay), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return mt
}
