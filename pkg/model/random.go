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
// (cfg, seed) always gives the same weights. dev may be nil for the CPU device.
func NewRandom(cfg *checkpoint.Config, seed uint64, dev tensor.Device) (*Model, error) {
	return NewRandomAs(cfg, seed, tensor.F32, dev)
}

// NewRandomAs is NewRandom as a checkpoint of dtype dt holds it: every
// value rounded to bf16 or f16 (nearest, ties to even, as pkg/safetensors'
// writer rounds), the matrices (embedding, projections, lm_head) held in dt
// in one allocation, in the model's order, and the norm weights and biases
// widened back to float32, as a loaded checkpoint keeps them. Its outputs
// equal those of the model Load builds from NewRandom's weights written as
// dt (where the file's order fuses fewer matrices, row for row the same
// products).
func NewRandomAs(cfg *checkpoint.Config, seed uint64, dt tensor.DType, dev tensor.Device) (*Model, error) {
	m, err := newModel(cfg, dev)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	binds := m.bindings()
	var half []tensor.Matrix
	var vecs map[string][]float32 // the vectors' values, drawn in order with the matrices when dt is 16-bit
	if dt != tensor.F32 {
		// Draw every tensor in binding order (the float32 model's order),
		// rounding the matrices into one allocation.
		n := 0
		for _, b := range binds {
			if b.mat != nil {
				n += product(b.shape)
			}
		}
		all := make([]uint16, n)
		half, vecs = make([]tensor.Matrix, len(binds)), map[string][]float32{}
		off := 0
		for i, b := range binds {
			v := make([]float32, product(b.shape))
			drawRandom(rng, b, v)
			var dst []uint16
			if b.mat != nil {
				dst = all[off : off+len(v)]
				off += len(v)
			} else {
				dst = make([]uint16, len(v))
			}
			if dt == tensor.BF16 {
				tensor.F32ToBF16(dst, v)
			} else {
				tensor.F32ToF16(dst, v)
			}
			m := tensor.HalfMatrix(dt, dst, 1, len(dst))
			if b.mat == nil {
				vecs[b.name] = m.Float32()
				continue
			}
			half[i] = tensor.HalfMatrix(dt, dst, matRows(b.shape), b.shape[len(b.shape)-1])
		}
	}
	err = m.fill(binds, half, func(b binding, dst []float32) error {
		if vecs != nil {
			copy(dst, vecs[b.name])
			return nil
		}
		drawRandom(rng, b, dst)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// drawRandom fills dst with NewRandom's values for b.
func drawRandom(rng *rand.Rand, b binding, dst []float32) {
	const a = 0.02 * 1.7320508 // uniform on [-a, a] has standard deviation 0.02
	norm := strings.HasSuffix(b.name, "norm.weight")
	for i := range dst {
		u := float32(rng.Float64()*2-1) * a
		if norm {
			u = 1 + 5*u
		}
		dst[i] = u
	}
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
		if b.mat != nil {
			w[b.name] = b.mat.F32
		} else {
			w[b.name] = *b.vec
		}
		shapes[b.name] = b.shape
	}
	return w, shapes, nil
}
