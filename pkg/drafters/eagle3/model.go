// Package eagle3 trains an EAGLE-3 draft layer on captured target hidden states,
// exports it in the layouts vLLM, SGLang and speculators load, and runs it as a
// drafter at evaluation time.
//
// The draft layer is one Llama decoder layer with the target's geometry whose
// attention reads the 2H concatenation [input_layernorm(embedding),
// hidden_norm(h)] (embedding first), fed at the first step by fc over the fused
// three-layer target feature and afterwards by its own previous pre-norm output;
// it scores a reduced draft vocabulary with its own lm_head. Training unrolls
// the draft for several steps ("training-time test", TTT) with gradients
// flowing through the unroll. Forward and backward sit side by side in the
// style of llm.c; parameters, gradients and activations are carved once from
// contiguous buffers, so a training step allocates nothing.
package eagle3

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/drafter-ai/drafter/pkg/nn"
)

// Geometry is the draft layer's shape, which is the target's: hidden size H,
// attention heads, key/value heads, head dimension, MLP intermediate size, RMS
// norm epsilon, RoPE base and scaling, the target vocabulary V and the draft
// vocabulary N.
type Geometry struct {
	Hidden       int
	Heads        int
	KVHeads      int
	HeadDim      int
	Intermediate int
	RMSNormEps   float64
	RopeTheta    float64
	RopeScaling  *nn.RopeScaling
	MaxPositions int
	Vocab        int
	DraftVocab   int
}

// Validate checks that the geometry describes a layer this package can build.
func (g Geometry) Validate() error {
	switch {
	case g.Hidden <= 0 || g.Heads <= 0 || g.KVHeads <= 0 || g.HeadDim <= 0 || g.Intermediate <= 0:
		return fmt.Errorf("eagle3: geometry needs positive hidden_size, heads, kv heads, head_dim and intermediate_size, got %+v", g)
	case g.Heads%g.KVHeads != 0:
		return fmt.Errorf("eagle3: %d attention heads are not a multiple of %d key/value heads", g.Heads, g.KVHeads)
	case g.HeadDim%2 != 0:
		return fmt.Errorf("eagle3: head_dim %d must be even for RoPE", g.HeadDim)
	case g.Vocab <= 0 || g.DraftVocab <= 0 || g.DraftVocab > g.Vocab:
		return fmt.Errorf("eagle3: need 0 < draft vocabulary (%d) <= target vocabulary (%d)", g.DraftVocab, g.Vocab)
	case g.RMSNormEps <= 0 || g.RopeTheta <= 0:
		return fmt.Errorf("eagle3: rms_norm_eps (%g) and rope_theta (%g) must be positive", g.RMSNormEps, g.RopeTheta)
	}
	return nil
}

func (g Geometry) qDim() int  { return g.Heads * g.HeadDim }
func (g Geometry) kvDim() int { return g.KVHeads * g.HeadDim }

// Params are the draft layer's trainable tensors, each a view into one
// contiguous allocation, in Hugging Face Linear layout ([out, in]).
type Params struct {
	FC         []float32 // [H, 3H]
	HiddenNorm []float32 // [H]
	InputNorm  []float32 // [H]
	Q          []float32 // [nq*hd, 2H]
	K          []float32 // [nkv*hd, 2H]
	V          []float32 // [nkv*hd, 2H]
	O          []float32 // [H, nq*hd]
	PostNorm   []float32 // [H]
	Gate       []float32 // [I, H]
	Up         []float32 // [I, H]
	Down       []float32 // [H, I]
	Norm       []float32 // [H]
	LMHead     []float32 // [N, H]

	// All is the backing slice holding every tensor above.
	All []float32
}

// paramSpec names one tensor: its native export key and shape.
type paramSpec struct {
	name  string
	shape []int
	field func(p *Params) *[]float32
}

// specs lists the parameters in a fixed order (the order of All and of the
// optimiser state), with their native-format keys.
func specs(g Geometry) []paramSpec {
	h, q, kv, i, n := g.Hidden, g.qDim(), g.kvDim(), g.Intermediate, g.DraftVocab
	return []paramSpec{
		{"fc.weight", []int{h, 3 * h}, func(p *Params) *[]float32 { return &p.FC }},
		{"midlayer.hidden_norm.weight", []int{h}, func(p *Params) *[]float32 { return &p.HiddenNorm }},
		{"midlayer.input_layernorm.weight", []int{h}, func(p *Params) *[]float32 { return &p.InputNorm }},
		{"midlayer.self_attn.q_proj.weight", []int{q, 2 * h}, func(p *Params) *[]float32 { return &p.Q }},
		{"midlayer.self_attn.k_proj.weight", []int{kv, 2 * h}, func(p *Params) *[]float32 { return &p.K }},
		{"midlayer.self_attn.v_proj.weight", []int{kv, 2 * h}, func(p *Params) *[]float32 { return &p.V }},
		{"midlayer.self_attn.o_proj.weight", []int{h, q}, func(p *Params) *[]float32 { return &p.O }},
		{"midlayer.post_attention_layernorm.weight", []int{h}, func(p *Params) *[]float32 { return &p.PostNorm }},
		{"midlayer.mlp.gate_proj.weight", []int{i, h}, func(p *Params) *[]float32 { return &p.Gate }},
		{"midlayer.mlp.up_proj.weight", []int{i, h}, func(p *Params) *[]float32 { return &p.Up }},
		{"midlayer.mlp.down_proj.weight", []int{h, i}, func(p *Params) *[]float32 { return &p.Down }},
		{"norm.weight", []int{h}, func(p *Params) *[]float32 { return &p.Norm }},
		{"lm_head.weight", []int{n, h}, func(p *Params) *[]float32 { return &p.LMHead }},
	}
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// newParams allocates one zeroed buffer for every tensor and carves the views.
func newParams(g Geometry) *Params {
	ss := specs(g)
	total := 0
	for _, s := range ss {
		total += numel(s.shape)
	}
	p := &Params{All: make([]float32, total)}
	off := 0
	for _, s := range ss {
		n := numel(s.shape)
		*s.field(p) = p.All[off : off+n : off+n]
		off += n
	}
	return p
}

// initParams initialises the draft layer the way SpecForge's draft model comes
// out of its constructor: RMSNorm weights one, every Linear with PyTorch's
// default (kaiming_uniform with a = sqrt(5), i.e. U(-1/sqrt(fan_in),
// 1/sqrt(fan_in))), drawn here from a PCG generator seeded with seed in the
// fixed parameter order. The lm_head instead starts from the target lm_head's
// rows of the draft vocabulary (targetHead is [V, H]; vocab.IDs picks rows), so
// the draft begins by predicting like the target's head applied to its state.
func initParams(p *Params, g Geometry, seed uint64, targetHead []float32, vocab *Vocab) {
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
	uniform(p.O, g.qDim())
	uniform(p.Gate, h)
	uniform(p.Up, h)
	uniform(p.Down, g.Intermediate)
	for _, w := range [][]float32{p.HiddenNorm, p.InputNorm, p.PostNorm, p.Norm} {
		for i := range w {
			w[i] = 1
		}
	}
	for i, id := range vocab.IDs {
		copy(p.LMHead[i*h:(i+1)*h], targetHead[int(id)*h:(int(id)+1)*h])
	}
}
