package dspark

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/loop"
)

// tinyInputs is a random target of width 8 and vocabulary 13 with three
// sequences of random states, tokens and loss masks (prompt spans and
// response spans alternating, so that blocks end early).
func tinyInputs(seed uint64) Inputs { return tinyInputsN(seed, 3) }

// tinyInputsN is tinyInputs with seqs sequences (the first three are
// tinyInputs' own: the same stream, drawn in the same order, up to the
// embeddings).
func tinyInputsN(seed uint64, seqs int) Inputs {
	r := rand.New(rand.NewPCG(seed, 5))
	c := &checkpoint.Config{HiddenSize: 8, IntermediateSize: 12, NumLayers: 4, NumHeads: 2, NumKVHeads: 1, HeadDim: 4,
		RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositions: 64, VocabSize: 13}
	H, V := c.HiddenSize, c.VocabSize
	mem := &dataset.Memory{H: H}
	for n := range seqs {
		T := 14 + 3*n
		s := dataset.Sample{Tokens: make([]int32, T), LossMask: make([]bool, T), Final: testutil.RandNormal(r, T*H, 1),
			Features: [][]float32{testutil.RandNormal(r, T*H, 1), testutil.RandNormal(r, T*H, 2)}}
		for i := range T {
			s.Tokens[i] = int32(r.IntN(V - 1)) // V-1 never appears: the mask token
			s.LossMask[i] = i >= 2 && (i/5)%3 != 2
		}
		mem.Samples = append(mem.Samples, s)
	}
	return Inputs{Config: c, Layers: []int{2, 3}, Embed: testutil.RandNormal(r, V*H, 1), LMHead: testutil.RandNormal(r, V*H, 1), Data: mem}
}

// TestTrainerGradient checks a whole training pass, the backbone and the
// heads together, against float64 central finite differences of a
// reference loss: dflash's Net run in float64 (its own gradients are the
// dflash package's tests') under the reference heads and loss of
// loss_test.go, over the same blocks. It covers what the layer tests do
// not: the gradient at the backbone's output from both the lm_head and the
// confidence head, the Markov prev tokens and the target rows the trainer
// lays out, and the normalisation by the batch's Σw.
func TestTrainerGradient(t *testing.T) {
	for _, o := range []Options{DefaultOptions(), func() Options {
		o := DefaultOptions()
		o.ConfidenceWithMarkov = false
		return o
	}()} {
		o.BlockSize, o.DraftLayers, o.MarkovRank, o.Anchors, o.Seed = 4, 1, 3, 3, 9
		in := tinyInputs(2)
		tr, err := newTrainer(o, in)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(4, 4))
		// Away from the initialisation: W2 is zero there, which hides W1's
		// gradient.
		for i := range tr.hw.All {
			tr.hw.All[i] = float32(r.NormFloat64() * 0.5)
		}
		for i := range tr.w.All {
			tr.w.All[i] += float32(r.NormFloat64() * 0.1)
		}
		if err := tr.Seek(0, loop.Position{}); err != nil {
			t.Fatal(err)
		}
		var sb *seqBatch
		for sb == nil {
			if ok, err := tr.Next(); err != nil || !ok {
				t.Fatalf("no batch: %v", err)
			}
			if len(tr.batch) > 0 && tr.batch[0].wsum > 0 {
				sb = tr.batch[0]
			}
		}
		clear(tr.gw.All)
		clear(tr.hg.All)
		st, err := tr.pass(sb, sb.wsum, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		g := tr.g
		R, V, Hd, rk := len(sb.labels), g.Vocab, g.Hidden, o.MarkovRank
		pT := make([]float64, R*V)
		for i := range R {
			row := pT[i*V : (i+1)*V]
			mx := math.Inf(-1)
			for v := range V {
				var s float64
				for j := range g.TargetHidden {
					s += float64(sb.final[i*g.TargetHidden+j]) * float64(in.LMHead[v*g.TargetHidden+j])
				}
				row[v] = s
				mx = math.Max(mx, s)
			}
			var z float64
			for v := range row {
				row[v] = math.Exp(row[v] - mx)
				z += row[v]
			}
			for v := range row {
				row[v] /= z
			}
		}
		ref := &headsRef{R: R, Hd: Hd, V: V, r: rk, head: to64(in.LMHead), prev: sb.prev, labels: sb.labels, pT: pT,
			w: to64(sb.w), withMarkov: tr.hw.Shape.WithMarkov, useConf: true, lw: o.Loss}
		feat, emb := to64(sb.feat), to64(sb.emb)
		w64, h64 := to64(tr.w.All), to64(tr.hw.All)
		lossAt := func(w64, h64 []float64, alpha []float64) (float64, []float64) {
			ww, err := dflash.NewWeights[float64](g, w64)
			if err != nil {
				t.Fatal(err)
			}
			n := dflash.NewNet(g, ww, nil)
			if err := n.Context(feat, sb.pos); err != nil {
				t.Fatal(err)
			}
			if err := n.Blocks(emb, sb.blocks, n.Kc, n.Vc); err != nil {
				t.Fatal(err)
			}
			w1, w2 := h64[:V*rk], h64[V*rk:2*V*rk]
			cw := h64[2*V*rk : len(h64)-1]
			return ref.eval(n.Y, w1, w2, cw, h64[len(h64)-1:], alpha)
		}
		_, alpha := lossAt(w64, h64, make([]float64, R))
		want, _ := lossAt(w64, h64, alpha)
		if math.Abs(st.Loss-want) > 1e-4*(1+math.Abs(want)) {
			t.Fatalf("loss %.7g, float64 reference %.7g", st.Loss, want)
		}
		// Finite differences at a sample of coordinates: half anywhere,
		// half where the gradient is not zero (most of W1's rows are not
		// read by these blocks).
		worst := 0.0
		check := func(what string, got []float32, x []float64, f func([]float64) float64) {
			t.Helper()
			var live []int
			for i, v := range got {
				if v != 0 {
					live = append(live, i)
				}
			}
			if len(live) < len(got)/10 {
				t.Fatalf("%s: %d of %d gradient values are non-zero: the check shows little", what, len(live), len(got))
			}
			for probe := 0; probe < 80; probe++ {
				i := r.IntN(len(x))
				if probe%2 == 1 {
					i = live[r.IntN(len(live))]
				}
				v := x[i]
				const eps = 1e-5
				x[i] = v + eps
				up := f(x)
				x[i] = v - eps
				down := f(x)
				x[i] = v
				num := (up - down) / (2 * eps)
				d := math.Abs(float64(got[i]) - num)
				worst = max(worst, d/(1e-3+math.Abs(num)))
				if d > 1e-4*(1e-3+math.Abs(num)) {
					t.Fatalf("with markov %v: %s[%d] = %.7g, finite differences %.7g", tr.hw.Shape.WithMarkov, what, i, got[i], num)
				}
			}
		}
		check("backbone", tr.gw.All, w64, func(x []float64) float64 { l, _ := lossAt(x, h64, alpha); return l })
		check("heads", tr.hg.All, h64, func(x []float64) float64 { l, _ := lossAt(w64, x, alpha); return l })
		t.Logf("confidence with markov %v: loss %.6g over %d rows, Σw %.3g; worst gradient error %.2g relative", tr.hw.Shape.WithMarkov, st.Loss, R, sb.wsum, worst)
	}
}
