package eagle3

import (
	"math/rand/v2"
	"testing"
	"time"

	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
)

// BenchmarkTrainStep measures one TTT training step (7 steps unrolled, 1024
// tokens in 4 sequences of 256) at H=512, 8 heads, 4 kv heads, I=1536,
// V=N=32000, and reports tokens/s, the achieved GFLOP/s (FLOPsPerToken) and the
// raw sgemm rate of an lm_head-shaped product measured in the same run.
func BenchmarkTrainStep(b *testing.B) {
	g := deagle3.Geometry{Hidden: 512, Heads: 8, KVHeads: 4, HeadDim: 64, Intermediate: 1536, RMSNormEps: 1e-5,
		RopeTheta: 10000, MaxPositions: 2048, Vocab: 32000, DraftVocab: 32000}
	const steps, seqs, seqLen = 7, 4, 256
	be := cpu.DefaultBackend()
	r := rand.New(rand.NewPCG(1, 1))
	rnd := func(n int, s float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * s)
		}
		return x
	}
	embed, head := rnd(g.Vocab*g.Hidden, 0.02), rnd(g.Vocab*g.Hidden, 0.02)
	var samples []*dataset.Sample
	for s := 0; s < seqs; s++ {
		smp := &dataset.Sample{Tokens: make([]int32, seqLen), LossMask: make([]bool, seqLen), Final: rnd(seqLen*g.Hidden, 1), Features: make([][]float32, deagle3.Features)}
		for c := range smp.Features {
			smp.Features[c] = rnd(seqLen*g.Hidden, 1)
		}
		for i := range smp.Tokens {
			smp.Tokens[i] = int32(r.IntN(g.Vocab))
			smp.LossMask[i] = true
		}
		samples = append(samples, smp)
	}
	counts := make([]int64, g.Vocab)
	voc, _ := deagle3.BuildVocab(counts, g.DraftVocab)
	p := deagle3.NewParams(g)
	initParams(p, g, 1, head, voc)
	n, err := newNet(g, steps, 0.8, cpu.New(be), p, embed, head, voc, seqs*seqLen, seqLen, true)
	if err != nil {
		b.Fatal(err)
	}
	if err := n.load(samples); err != nil {
		b.Fatal(err)
	}
	// Raw sgemm rate on the dominant shape (rows x N x H).
	x, w, out := rnd(n.rows*g.Hidden, 1), rnd(g.DraftVocab*g.Hidden, 1), make([]float32, n.rows*g.DraftVocab)
	mul := func() {
		be.Sgemm(false, true, n.rows, g.DraftVocab, g.Hidden, 1, x, g.Hidden, w, g.Hidden, 0, out, g.DraftVocab)
	}
	mul()
	t0 := time.Now()
	const reps = 5
	for i := 0; i < reps; i++ {
		mul()
	}
	sgemm := reps * 2 * float64(n.rows) * float64(g.DraftVocab) * float64(g.Hidden) / time.Since(t0).Seconds() / 1e9

	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for _, gt := range n.grW.Named(g) {
			n.dev.Zero(gt.Tensor)
		}
		n.forward(true)
		n.backward()
	}
	sec := time.Since(start).Seconds() / float64(b.N)
	tps := float64(n.rows) / sec
	gf := FLOPsPerToken(g, steps) * tps / 1e9
	b.Logf("backend %s: %.1f tokens/s, %.1f GFLOP/s against %.1f raw sgemm GFLOP/s", be.Name(), tps, gf, sgemm)
	b.ReportMetric(tps, "tokens/s")
	b.ReportMetric(gf, "GFLOP/s")
	b.ReportMetric(sgemm, "sgemm-GFLOP/s")
	b.ReportMetric(gf/sgemm, "efficiency")
}
