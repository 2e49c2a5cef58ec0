// Package dflash is the DFlash drafter method (z-lab, arXiv 2602.06036):
// a small Qwen3-style decoder that drafts a whole block of tokens in one
// forward pass. Its context is the target's hidden states at several layers,
// fused by fc and hidden_norm into one feature per verified position and
// injected into every draft layer as extra keys and values; its queries are
// the target's embeddings of the block [last verified token, mask, mask, ...]
// at their absolute positions, attending bidirectionally within the block;
// its logits come from the target's lm_head. See
// ../shared/docs/methods.md section 3.
//
// The package holds the draft's parameters and their export keys, the
// forward and backward passes (net.go, generic over float32 and float64 so
// that the trainer's gradients can be checked against float64 finite
// differences), the inference session with its per-layer context KV cache,
// the proposer that drafts during speculative decoding, and the two export
// layouts (z-lab native, which vLLM, SGLang and z-lab read; speculators)
// with their writers, detectors and loaders.
//
// The passes run on the host in plain Go, not on a tensor.Device: a draft of
// the target's width is small next to the target, and the masks of block
// training (strict context prefix, block-local keys) are not among the
// device's attention ops.
package dflash

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
)

// Geometry is the draft's shape: its decoder layers' geometry (which is the
// target's unless chosen otherwise), how many layers, the target features it
// fuses, the block it drafts and the attention within a block.
type Geometry struct {
	// Hidden is the draft's width Hd; Heads, KVHeads and HeadDim its
	// attention's head layout; Intermediate its MLP width.
	Hidden, Heads, KVHeads, HeadDim, Intermediate int
	// Layers is the number of draft decoder layers n.
	Layers int
	// RMSNormEps and RopeTheta are the norms' epsilon and the RoPE base;
	// MaxPositions the max_position_embeddings written in the config.
	RMSNormEps, RopeTheta float64
	MaxPositions          int
	// Vocab is the target's vocabulary V (embedding and lm_head rows).
	Vocab int
	// TargetHidden is the target's hidden size H, the width of each
	// feature; Features the number of target layers fused (fc's input is
	// Features*TargetHidden wide).
	TargetHidden, Features int
	// BlockSize is B: slot 0 holds the last verified token, slots 1..B-1
	// the mask token, and one forward drafts B-1 tokens.
	BlockSize int
	// MaskToken is the token id whose target embedding fills slots 1..B-1.
	MaskToken int
	// Causal makes attention within a block causal (slot k sees slots
	// 0..k); false is DFlash's bidirectional block, which every engine runs
	// on full-attention layers.
	Causal bool
}

// Validate checks that the geometry describes a draft this package runs.
func (g Geometry) Validate() error {
	switch {
	case g.Hidden <= 0 || g.Heads <= 0 || g.KVHeads <= 0 || g.HeadDim <= 0 || g.Intermediate <= 0 || g.Layers <= 0:
		return fmt.Errorf("dflash: geometry needs positive hidden_size, heads, kv heads, head_dim, intermediate_size and layers, got %+v", g)
	case g.Heads%g.KVHeads != 0:
		return fmt.Errorf("dflash: %d attention heads are not a multiple of %d key/value heads", g.Heads, g.KVHeads)
	case g.HeadDim%2 != 0:
		return fmt.Errorf("dflash: head_dim %d must be even for RoPE", g.HeadDim)
	case g.Vocab <= 0 || g.TargetHidden <= 0 || g.Features <= 0:
		return fmt.Errorf("dflash: need positive vocab_size (%d), target hidden size (%d) and feature count (%d)", g.Vocab, g.TargetHidden, g.Features)
	case g.BlockSize < 2:
		return fmt.Errorf("dflash: block size %d drafts nothing: it must be at least 2 (the anchor and one draft)", g.BlockSize)
	case g.MaskToken < 0 || g.MaskToken >= g.Vocab:
		return fmt.Errorf("dflash: mask token id %d is outside the vocabulary [0, %d)", g.MaskToken, g.Vocab)
	case g.RMSNormEps <= 0 || g.RopeTheta <= 0:
		return fmt.Errorf("dflash: rms_norm_eps (%g) and rope_theta (%g) must be positive", g.RMSNormEps, g.RopeTheta)
	}
	return nil
}

// QDim is the width of the queries: heads x head_dim.
func (g Geometry) QDim() int { return g.Heads * g.HeadDim }

// KVDim is the width of keys and values: key/value heads x head_dim.
func (g Geometry) KVDim() int { return g.KVHeads * g.HeadDim }

// FCIn is fc's input width: the fused features.
func (g Geometry) FCIn() int { return g.Features * g.TargetHidden }

// TargetGeometry is the draft geometry that copies the target's decoder
// layer (config c): layers draft layers fusing features target layers, a
// block of blockSize and mask token maskToken. Rope scaling is not carried
// over: the draft's config has none, so that every engine rotates the draft
// as training did.
func TargetGeometry(c *checkpoint.Config, layers, features, blockSize, maskToken int) Geometry {
	return Geometry{Hidden: c.HiddenSize, Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
		Intermediate: c.IntermediateSize, Layers: layers, RMSNormEps: c.RMSNormEps, RopeTheta: c.RopeTheta,
		MaxPositions: c.MaxPositions, Vocab: c.VocabSize, TargetHidden: c.HiddenSize, Features: features,
		BlockSize: blockSize, MaskToken: maskToken}
}

// Float is the element type the passes run in: float32 for training and
// inference, float64 for the finite-difference checks.
type Float interface{ ~float32 | ~float64 }

// LayerWeights are one draft decoder layer's tensors (views into
// Weights.All), in Hugging Face Linear layout ([out, in]).
type LayerWeights[T Float] struct {
	InputNorm    []T // [Hd]
	Q            []T // [nq*hd, Hd]
	K            []T // [nkv*hd, Hd]
	V            []T // [nkv*hd, Hd]
	O            []T // [Hd, nq*hd]
	QNorm, KNorm []T // [hd]
	PostNorm     []T // [Hd]
	Gate, Up     []T // [I, Hd]
	Down         []T // [Hd, I]
}

// Weights are the draft's trainable tensors, each a view into All: fc and
// hidden_norm (the context feature), the layers and the final norm. The
// target's embedding and lm_head are not among them: they stay frozen and
// are not exported.
type Weights[T Float] struct {
	FC         []T // [Hd, Features*H]
	HiddenNorm []T // [Hd]
	Norm       []T // [Hd]
	Layers     []LayerWeights[T]
	// All is the backing slice holding every tensor above.
	All []T
}

// Params are the draft's parameters in float32.
type Params = Weights[float32]

// Spec names one tensor: its export key (the same in both layouts) and
// shape.
type Spec struct {
	Name  string
	Shape []int
}

// specs lists the tensors of g in their fixed order (the order of All and of
// a trainer's optimiser state), with a function that finds each one's view.
func specs[T Float](g Geometry) ([]Spec, func(w *Weights[T], i int) *[]T) {
	h, q, kv, hd, in := g.Hidden, g.QDim(), g.KVDim(), g.HeadDim, g.Intermediate
	ss := []Spec{{"fc.weight", []int{h, g.FCIn()}}, {"hidden_norm.weight", []int{h}}, {"norm.weight", []int{h}}}
	for l := range g.Layers {
		p := fmt.Sprintf("layers.%d.", l)
		ss = append(ss,
			Spec{p + "input_layernorm.weight", []int{h}},
			Spec{p + "self_attn.q_proj.weight", []int{q, h}},
			Spec{p + "self_attn.k_proj.weight", []int{kv, h}},
			Spec{p + "self_attn.v_proj.weight", []int{kv, h}},
			Spec{p + "self_attn.o_proj.weight", []int{h, q}},
			Spec{p + "self_attn.q_norm.weight", []int{hd}},
			Spec{p + "self_attn.k_norm.weight", []int{hd}},
			Spec{p + "post_attention_layernorm.weight", []int{h}},
			Spec{p + "mlp.gate_proj.weight", []int{in, h}},
			Spec{p + "mlp.up_proj.weight", []int{in, h}},
			Spec{p + "mlp.down_proj.weight", []int{h, in}},
		)
	}
	field := func(w *Weights[T], i int) *[]T {
		switch i {
		case 0:
			return &w.FC
		case 1:
			return &w.HiddenNorm
		case 2:
			return &w.Norm
		}
		lw := &w.Layers[(i-3)/11]
		return [...]*[]T{&lw.InputNorm, &lw.Q, &lw.K, &lw.V, &lw.O, &lw.QNorm, &lw.KNorm, &lw.PostNorm, &lw.Gate, &lw.Up, &lw.Down}[(i-3)%11]
	}
	return ss, field
}

// Specs lists g's tensors in their fixed order with their export keys.
func Specs(g Geometry) []Spec {
	ss, _ := specs[float32](g)
	return ss
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// NumParams is the number of values of g's tensors.
func NumParams(g Geometry) int {
	n := 0
	for _, s := range Specs(g) {
		n += numel(s.Shape)
	}
	return n
}

// NewWeights carves the views of g's tensors out of all (NumParams(g)
// values; nil allocates zeroed ones).
func NewWeights[T Float](g Geometry, all []T) (*Weights[T], error) {
	n := NumParams(g)
	if all == nil {
		all = make([]T, n)
	}
	if len(all) != n {
		return nil, fmt.Errorf("dflash: %d parameter values for a geometry of %d", len(all), n)
	}
	w := &Weights[T]{All: all, Layers: make([]LayerWeights[T], g.Layers)}
	ss, field := specs[T](g)
	off := 0
	for i, s := range ss {
		k := numel(s.Shape)
		*field(w, i) = all[off : off+k : off+k]
		off += k
	}
	return w, nil
}

// NewParams allocates zeroed float32 parameters of geometry g.
func NewParams(g Geometry) *Params {
	w, _ := NewWeights[float32](g, nil) // sized by NumParams: cannot fail
	return w
}

// Tensor is one parameter tensor: its export key, shape and values (a view
// into Weights.All).
type Tensor[T Float] struct {
	Name  string
	Shape []int
	Data  []T
}

// Tensors lists w's tensors (of geometry g) in their fixed order.
func (w *Weights[T]) Tensors(g Geometry) []Tensor[T] {
	ss, field := specs[T](g)
	out := make([]Tensor[T], len(ss))
	for i, s := range ss {
		out[i] = Tensor[T]{Name: s.Name, Shape: s.Shape, Data: *field(w, i)}
	}
	return out
}
