package medusa

import (
	"math/rand/v2"
	"testing"
	"time"

	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// BenchmarkTrainStep measures one forward+backward at H=512, V=32000, 4 heads,
// 1 layer, 1024 positions, and reports the achieved GFLOP/s next to the raw
// sgemm rate of the dominant lm_head product measured in the same run.
func BenchmarkTrainStep(b *testing.B) {
	g := dmedusa.Geometry{Hidden: 512, Vocab: 32000, Heads: 4, Layers: 1}
	rows := 1024
	r := rand.New(rand.NewPCG(1, 1))
	target := make([]float32, g.Vocab*g.Hidden)
	randFill(r, target, 0.05)
	m, err := dmedusa.NewHeads(g, target, true)
	if err != nil {
		b.Fatal(err)
	}
	ws := mustWorkspace(b, cpu.DefaultBackend(), m, rows, 0)
	batch := &Batch{Rows: rows, X: make([]float32, rows*g.Hidden)}
	randFill(r, batch.X, 1)
	for h := 0; h < g.Heads; h++ {
		tg := make([]int32, rows)
		for i := range tg {
			tg[i] = int32(r.IntN(g.Vocab))
		}
		batch.Targets = append(batch.Targets, tg)
	}
	be := cpu.DefaultBackend()
	w := Weights(g.Heads, 0.8)
	// Raw sgemm rate on the lm_head shape (chunk rows x V x H).
	c := ws.Chunk
	out := make([]float32, c*g.Vocab)
	mul := func() {
		be.Sgemm(false, true, c, g.Vocab, g.Hidden, 1, batch.X, g.Hidden, target, g.Hidden, 0, out, g.Vocab)
	}
	mul()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ws.n.ZeroGrad()
		ws.TrainStep(batch, w)
	}
	b.StopTimer()
	sec := b.Elapsed().Seconds() / float64(b.N)
	flops := 6 * float64(rows*g.Heads) * float64(g.Hidden*g.Hidden*g.Layers+g.Hidden*g.Vocab)
	b.ReportMetric(flops/sec/1e9, "GFLOP/s")
	b.ReportMetric(float64(rows)/sec, "tokens/s")
	reps := 5
	start := nowSeconds()
	for i := 0; i < reps; i++ {
		mul()
	}
	raw := 2 * float64(c*g.Vocab*g.Hidden) * float64(reps) / (nowSeconds() - start) / 1e9
	b.ReportMetric(raw, "sgemm-GFLOP/s")
}

func nowSeconds() float64 { return float64(time.Now().UnixNano()) / 1e9 }
