package model

import (
	"math/rand/v2"
	"strings"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Bench60MConfig returns the geometry of the benchmark model: a Llama with
// hidden size 512, intermediate size 1536, 8 layers, 8 heads, 4 KV heads,
// head_dim 64, vocabulary 32000 and an untied LM head (about 58M parameters).
func Bench60MConfig() *checkpoint.Config {
	return &checkpoint.Config{
		ModelType: "llama", HiddenSize: 512, IntermediateSize: 1536, NumLayers: 8,
		NumHeads: 8, NumKVHeads: 4, HeadDim: 64, RMSNormEps: 1e-5, RopeTheta: 10000,
		MaxPositions: 2048, VocabSize: 32000, BOS: []int{1}, EOS: []int{2},
	}
}

// NewRandom builds a model of geometry cfg with deterministic random weights
// drawn from seed: linear weights and biases uniform with standard deviation
// 0.02, norm weights around 1. It is meant for benchmarks and tests; the same
// (cfg, seed) always gives the same weights. be may be nil for tensor.CPU().
func NewRandom(cfg *checkpoint.Config, seed uint64, be tensor.Backend) (*Model, error) {
	m, err := newModel(cfg, be)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	const a = 0.02 * 1.7320508 // uniform on [-a, a] has standard deviation 0.02
	err = m.fill(m.bindings(), func(b binding, dst []float32) error {
		norm := strings.HasSuffix(b.name, "norm.weight")
		for i := range dst {
			u := float32(rng.Float64()*2-1) * a
			if norm {
				u = 1 + 5*u
			}
			dst[i] = u
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// RandomWeights returns the tensors NewRandom would build for (cfg, seed), by
// checkpoint name, so tests can write them to a checkpoint or feed them to an
// independent implementation.
func RandomWeights(cfg *checkpoint.Config, seed uint64) (map[string][]float32, map[string][]int, error) {
	m, err := NewRandom(cfg, seed, nil)
	if err != nil {
		return nil, nil, err
	}
	defer m.Close()
	w, shapes := map[string][]float32{}, map[string][]int{}
	for _, b := range m.bindings() {
		w[b.name] = *b.dst
		shapes[b.name] = b.shape
	}
	return w, shapes, nil
}
