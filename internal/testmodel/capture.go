package testmodel

import (
	"math/rand/v2"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/train/dataset"
)

// SmallCapture is a random capture of a small target (hidden 256,
// vocabulary 4096, 8 layers) for the trainers' benchmarks: two sequences
// of T tokens (one for a held-out split), responses from position T/8 on,
// token 0 never used (a mask token), with features random states for
// features layers and the final-norm state; embed and lmHead are the
// target's [V, H] tables.
func SmallCapture(T, features int) (c *checkpoint.Config, data *dataset.Memory, embed, lmHead []float32) {
	c = &checkpoint.Config{HiddenSize: 256, NumHeads: 4, NumKVHeads: 2, HeadDim: 64, IntermediateSize: 688,
		RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositions: 4096, VocabSize: 4096, NumLayers: 8}
	r := rand.New(rand.NewPCG(7, 7))
	H, V := c.HiddenSize, c.VocabSize
	data = &dataset.Memory{H: H}
	for range 2 {
		s := dataset.Sample{Tokens: make([]int32, T), LossMask: make([]bool, T), Final: testutil.RandNormal(r, T*H, 1)}
		for i := range T {
			s.Tokens[i] = int32(1 + r.IntN(V-1))
			s.LossMask[i] = i >= T/8
		}
		for range features {
			s.Features = append(s.Features, testutil.RandNormal(r, T*H, 1))
		}
		data.Samples = append(data.Samples, s)
	}
	return c, data, testutil.RandNormal(r, V*H, 0.05), testutil.RandNormal(r, V*H, 0.05)
}
