package dspark

import (
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/internal/testmodel"
)

// BenchmarkTrainStep measures one sequence's forward and backward pass at
// the default options (block 7, 3 draft layers, Markov rank 32, the
// confidence head, 64 anchors) on a 512-token sequence of a small target
// (testmodel.SmallCapture), and reports the sequence tokens and the blocks
// trained per second.
func BenchmarkTrainStep(b *testing.B) {
	o := DefaultOptions()
	o.MaskToken = 0
	c, data, embed, lmHead := testmodel.SmallCapture(512, 1)
	t, err := newTrainer(o, Inputs{Config: c, Layers: []int{4}, Embed: embed, LMHead: lmHead, Data: data})
	if err != nil {
		b.Fatal(err)
	}
	sb, err := t.read(t.TrainIdx[0], rand.New(rand.NewPCG(1, 1)))
	if err != nil || sb == nil {
		b.Fatalf("no blocks: %v", err)
	}
	for b.Loop() {
		if _, err := t.pass(sb, sb.wsum, true, nil); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(512/sec, "tokens/s")
	b.ReportMetric(float64(len(sb.blocks))/sec, "blocks/s")
}
