// Package model runs the frozen target model: a decoder-only transformer of
// one of the families pkg/arch describes, its weights held in the checkpoint's
// dtype (float32, or bf16 and f16 read in place from the mapped file), with a
// per-sequence KV cache, batched prefill and decode over many sequences in
// one pass, tree verification for speculative decoding, hidden-state taps and
// pruned logits.
//
// The architecture, as every one of these checkpoints computes it:
//
//	h = embed(tokens)
//	for each layer:
//	    a  = RMSNorm(h) · input_layernorm
//	    q, k, v = a·Wq^T (+bq), a·Wk^T (+bk), a·Wv^T (+bv)
//	    q, k = RMSNorm per head (Qwen3 only), then rotate_half RoPE at each position
//	    h += softmax(q·k^T/√d + mask)·v · Wo^T        (grouped-query attention)
//	    m  = RMSNorm(h) · post_attention_layernorm
//	    h += (silu(m·Wg^T) * (m·Wu^T)) · Wd^T
//	logits = RMSNorm(h) · norm · lm_head^T
//
// Weight products run through cpu.Products, which chooses the kernels
// (few-row kernels, the backend's GEMM for large float32 products, pkg/tensor's
// 16-bit kernels for bf16 and f16 weights), the weights' layouts and the
// split over the CPU workers; see matmul.go. A Model holds the weights and
// the scratch space of one forward pass; it is not safe for concurrent use.
package model

import (
	"fmt"
	"math"
	"strings"

	"github.com/drafter-ai/drafter/pkg/arch"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// Linear is a Hugging Face Linear layer: W is [Out, In] row-major in the
// checkpoint's dtype, B is nil or [Out] (float32).
type Linear struct {
	W       tensor.Matrix
	B       []float32
	In, Out int

	nn *nn.Linear // the layer on the device, frozen (see prepare)
}

// Attention is one self-attention block's weights. QNorm and KNorm are the
// per-head RMSNorm weights [HeadDim] of Qwen3, nil elsewhere.
type Attention struct {
	Q, K, V, O   Linear
	QNorm, KNorm []float32

	// nn is the block on the device: the four layers, Q.W, K.W and V.W as
	// one [qDim+2·kvDim, H] matrix (QKV) where they lie back to back, and
	// QNorm and KNorm on the device (or empty).
	nn nn.Attention
	// at is the block's attention over the pass's caches at its layer.
	at cacheAttention
}

// MLP is the SwiGLU feed-forward block.
type MLP struct {
	Gate, Up, Down Linear

	// nn is the block on the device: the three layers, and Gate.W and
	// Up.W as one [2·I, H] matrix (GateUp) where they lie back to back.
	nn nn.MLP
}

// Layer is one decoder layer.
type Layer struct {
	AttnNorm []float32 // input_layernorm.weight [H]
	Attn     Attention
	MLPNorm  []float32 // post_attention_layernorm.weight [H]
	MLP      MLP

	attnNorm, mlpNorm tensor.Tensor // the norms on the device
}

// Model is a loaded target model. The weight fields are bound to the
// tensors of its architecture family (arch.Family.Tensors) in one place,
// bindings (load.go). They are read-only once the
// model is built: the products may keep other layouts of its matrices
// (cpu.Products.Prepare: transposed copies of a small model's), which
// would not see a change.
type Model struct {
	Config *checkpoint.Config

	Embed  tensor.Matrix // model.embed_tokens.weight [V, H]
	Layers []Layer
	Norm   []float32     // model.norm.weight [H]
	LMHead tensor.Matrix // lm_head.weight [V, H]; the same values as Embed when tied

	lm    tensor.Weight // LMHead as products run it (see prepare)
	embed tensor.Weight // Embed, gathered from
	norm  tensor.Tensor // Norm on the device

	weights WeightSource // the store 16-bit matrices are read from in place, or nil
	mapped  int64        // bytes of the matrices read in place from weights

	fam    arch.Family   // Config's architecture family
	dev    tensor.Device // where the activations and caches live and every op runs
	rope   *nn.RoPE
	rot    *tensor.Rotary // rope's tables on dev
	eps    float32
	h      int // hidden size
	hd     int // head dimension
	nHeads int
	nKV    int
	qDim   int // nHeads*hd
	kvDim  int // nKV*hd
	inter  int // intermediate size
	vocab  int
	maxPos int // max_position_embeddings (and sliding window, when smaller)
	scale  float32
	s      scratch
	p      pass // the views of the pass in flight
	res    Result
}

// Device returns the device the model computes on.
func (m *Model) Device() tensor.Device { return m.dev }

// NumLayers returns the number of decoder layers L; hidden-state tap indices run
// from 0 to L.
func (m *Model) NumLayers() int { return len(m.Layers) }

// HiddenSize returns H, the width of every tap row.
func (m *Model) HiddenSize() int { return m.h }

// VocabSize returns V, the width of every logits row.
func (m *Model) VocabSize() int { return m.vocab }

// MaxPositions returns the longest sequence the model can attend over: the
// model's max_position_embeddings, or its sliding window when that is smaller.
func (m *Model) MaxPositions() int { return m.maxPos }

// Close releases the model: the checkpoint files it reads 16-bit weights
// from (it holds no goroutines: its workers are tensor.Parallel's shared
// ones). The model, and any Matrix taken from it, must not be used after.
// Closing twice is harmless.
func (m *Model) Close() error {
	w := m.weights
	if w == nil {
		return nil
	}
	m.weights = nil
	if err := w.Close(); err != nil {
		return fmt.Errorf("model: closing the weights: %w", err)
	}
	return nil
}

// Memory describes the memory a model's weights occupy.
type Memory struct {
	// Bytes is the total per dtype the weights are held in (a tied
	// lm_head counted once).
	Bytes map[tensor.DType]int64
	// Mapped is the part of Bytes read in place from the checkpoint's
	// memory-mapped files (resident as the pages are read, shared with the
	// page cache).
	Mapped int64
}

// Total returns the bytes of every dtype together.
func (m Memory) Total() int64 {
	var n int64
	for _, b := range m.Bytes {
		n += b
	}
	return n
}

// Footprint returns the Memory a model FromWeights builds from w would
// hold, without building it (w stays the caller's): 16-bit matrices at
// their size in the files, counted as mapped (a file whose data the host
// cannot view in place, which writers do not make, is copied instead), every
// other tensor at float32's four bytes a value. Tensors w lacks count as
// float32 too.
func Footprint(cfg *checkpoint.Config, w interface {
	Info(name string) (safetensors.Info, bool)
}) (Memory, error) {
	fam, ok := cfg.Family()
	if !ok {
		return Memory{}, fmt.Errorf("model: config.json model_type %q is not supported (supported: %s)", cfg.ModelType, arch.Supported())
	}
	if err := implements(fam); err != nil {
		return Memory{}, err
	}
	// Only the bindings are needed: no backend, RoPE tables or validation
	// of what running the model would need.
	m := &Model{Config: cfg, fam: fam, Layers: make([]Layer, max(cfg.NumLayers, 0))}
	mem := Memory{Bytes: map[tensor.DType]int64{}}
	for _, b := range m.bindings() {
		n := int64(product(b.shape))
		if in, ok := w.Info(b.name); ok && b.mat != nil {
			if dt, half := halfDType(in.DType); half {
				mem.Bytes[dt] += 2 * n
				mem.Mapped += 2 * n
				continue
			}
		}
		mem.Bytes[tensor.F32] += 4 * n
	}
	return mem, nil
}

// Memory returns the memory the model's weights occupy, in their dtypes.
// Other layouts the products keep (transposed copies of a small float32
// model's matrices, see prepare) are not counted.
func (m *Model) Memory() Memory {
	mem := Memory{Bytes: map[tensor.DType]int64{}}
	mem.Mapped = m.mapped
	// bindings lists lm_head only when it is not tied to the embedding.
	for _, b := range m.bindings() {
		if b.mat != nil {
			mem.Bytes[b.mat.DType] += b.mat.Bytes()
		} else {
			mem.Bytes[tensor.F32] += 4 * int64(len(*b.vec))
		}
	}
	return mem
}

// newModel validates cfg and sets up everything but the weights.
func newModel(cfg *checkpoint.Config, dev tensor.Device) (*Model, error) {
	if cfg == nil {
		return nil, fmt.Errorf("model: nil config")
	}
	fam, ok := cfg.Family()
	if !ok {
		return nil, fmt.Errorf("model: config.json model_type %q is not supported (supported: %s)", cfg.ModelType, arch.Supported())
	}
	if err := implements(fam); err != nil {
		return nil, err
	}
	pos := func(name string, v int) error {
		if v <= 0 {
			return fmt.Errorf("model: config.json %s = %d, want a positive integer", name, v)
		}
		return nil
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"hidden_size", cfg.HiddenSize}, {"intermediate_size", cfg.IntermediateSize}, {"num_hidden_layers", cfg.NumLayers},
		{"num_attention_heads", cfg.NumHeads}, {"num_key_value_heads", cfg.NumKVHeads}, {"head_dim", cfg.HeadDim},
		{"vocab_size", cfg.VocabSize}, {"max_position_embeddings", cfg.MaxPositions}} {
		if err := pos(c.name, c.v); err != nil {
			return nil, err
		}
	}
	if cfg.NumHeads%cfg.NumKVHeads != 0 {
		return nil, fmt.Errorf("model: config.json num_attention_heads %d is not a multiple of num_key_value_heads %d", cfg.NumHeads, cfg.NumKVHeads)
	}
	if cfg.HeadDim%2 != 0 {
		return nil, fmt.Errorf("model: config.json head_dim %d must be even for rotary embeddings", cfg.HeadDim)
	}
	if !(cfg.RMSNormEps > 0) {
		return nil, fmt.Errorf("model: config.json rms_norm_eps %g must be positive", cfg.RMSNormEps)
	}
	if act := cfg.HiddenAct; act != "" && act != fam.Activation {
		return nil, fmt.Errorf("model: config.json hidden_act %q is not supported (only %s for model_type %s)", act, fam.Activation, cfg.ModelType)
	}
	// The model attends over the whole sequence: it is exact within every
	// layer's sliding window.
	maxPos := fam.Context(cfg.NumLayers, cfg.MaxPositions, cfg.SlidingWindow)
	var rs *nn.RopeScaling
	if s := cfg.RopeScaling; s != nil {
		switch s.Type {
		case "", "default":
		case "linear", "llama3":
			rs = &nn.RopeScaling{Type: s.Type, Factor: s.Factor, LowFreqFactor: s.LowFreqFactor,
				HighFreqFactor: s.HighFreqFactor, OriginalMaxPositions: s.OriginalMaxPositions}
		default:
			return nil, fmt.Errorf("model: config.json rope_scaling type %q is not supported (supported: linear, llama3)", s.Type)
		}
	}
	// Precompute cos/sin tables for the positions most sequences use; RoPE
	// computes positions past the table on the fly.
	table := maxPos
	if table > 32768 {
		table = 32768
	}
	rope, err := nn.NewRoPE(cfg.HeadDim, cfg.RopeTheta, rs, table)
	if err != nil {
		return nil, fmt.Errorf("model: config.json rope settings: %w", err)
	}
	m := &Model{
		Config: cfg, fam: fam, Layers: make([]Layer, cfg.NumLayers), rope: rope, eps: float32(cfg.RMSNormEps),
		h: cfg.HiddenSize, hd: cfg.HeadDim, nHeads: cfg.NumHeads, nKV: cfg.NumKVHeads,
		qDim: cfg.NumHeads * cfg.HeadDim, kvDim: cfg.NumKVHeads * cfg.HeadDim,
		inter: cfg.IntermediateSize, vocab: cfg.VocabSize, maxPos: maxPos,
	}
	m.scale = float32(1 / math.Sqrt(float64(m.hd)))
	m.dev = cpu.SiblingOf(dev)
	if m.rot, err = rope.On(m.dev); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return m, nil
}

// implements refuses a family whose hooks ask for computation the forward
// pass does not have yet (arch.Family: each hook's zero value is what it
// computes), so that no hook is silently ignored.
func implements(f arch.Family) error {
	var missing []string
	if f.Activation != "silu" {
		missing = append(missing, fmt.Sprintf("activation %q (only silu)", f.Activation))
	}
	if f.EmbedScale != arch.Unscaled {
		missing = append(missing, "a scaled embedding")
	}
	if f.NormOffset != 0 {
		missing = append(missing, fmt.Sprintf("RMSNorm weights offset by %g", f.NormOffset))
	}
	if len(f.ExtraNorms) > 0 {
		missing = append(missing, "extra norms "+strings.Join(f.ExtraNorms, ", "))
	}
	if f.AttnSoftcap != 0 {
		missing = append(missing, fmt.Sprintf("attention soft-capping at %g", f.AttnSoftcap))
	}
	if f.FinalSoftcap != 0 {
		missing = append(missing, fmt.Sprintf("final logit soft-capping at %g", f.FinalSoftcap))
	}
	if len(missing) > 0 {
		return fmt.Errorf("model: model_type %s needs %s, which pkg/model does not implement yet", f.ModelType, strings.Join(missing, ", "))
	}
	return nil
}
