package eagle3

import (
	"math"
	"math/rand/v2"

	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
)

// initParams initialises the draft layer the way SpecForge's draft model comes
// out of its constructor: RMSNorm weights one, every Linear with PyTorch's
// default (kaiming_uniform with a = sqrt(5), i.e. U(-1/sqrt(fan_in),
// 1/sqrt(fan_in))), drawn here from a PCG generator seeded with seed in the
// fixed parameter order. The lm_head instead starts from the target lm_head's
// rows of the draft vocabulary (targetHead is [V, H]; vocab.IDs picks rows), so
// the draft begins by predicting like the target's head applied to its state.
func initParams(p *deagle3.Params, g deagle3.Geometry, seed uint64, targetHead []float32, vocab *deagle3.Vocab) {
	r := rand.New(rand.NewPCG(seed, 0x6561676c6533)) // "eagle3"
	uniform := func(w []float32, fanIn int) {
		b := 1 / math.Sqrt(float64(fanIn))
		for i := range w {
			w[i] = float32((2*r.Float64() - 1) * b)
		}
	}
	h := g.Hidden
	uniform(p.FC, 3*h)
	uniform(p.Q, 2*h)
	uniform(p.K, 2*h)
	uniform(p.V, 2*h)
	uniform(p.O, g.QDim())
	uniform(p.Gate, h)
	uniform(p.Up, h)
	uniform(p.Down, g.Intermediate)
	// The EAGLE-3.1 norms (nil when off) start as identities too, as the
	// engines' and speculators' RMSNorm modules do.
	for _, w := range [][]float32{p.HiddenNorm, p.InputNorm, p.PostNorm, p.Norm, p.FCNorm[0], p.FCNorm[1], p.FCNorm[2], p.FCInputNorm} {
		for i := range w {
			w[i] = 1
		}
	}
	for i, id := range vocab.IDs {
		copy(p.LMHead[i*h:(i+1)*h], targetHead[int(id)*h:(int(id)+1)*h])
	}
}
