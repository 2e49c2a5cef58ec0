// Package model runs the frozen target model: a decoder-only transformer of
// one of the families pkg/arch describes, its weights held in the checkpoint's
// dtype (float32, or bf16 and f16 read in place from the mapped file), with a
// per-sequence KV cache, batched prefill and decode over many sequences in
// one pass, tree verification for speculative decoding, hidden-state taps and
// pruned logits.
//
// The architecture, as every one of these checkpoints computes it (the
// bracketed steps where the family's arch.Family hooks ask for them):
//
//	h = embed(tokens) [· √H]
//	for each layer:
//	    a  = RMSNorm(h) · input_layernorm              (Gemma: · (1+w), every norm)
//	    q, k, v = a·Wq^T (+bq), a·Wk^T (+bk), a·Wv^T (+bv)
//	    q, k = [RMSNorm per head (Qwen3, Gemma-3)], then rotate_half RoPE
//	           at each position (the sliding layers' own base: Gemma-3)
//	    s  = q·k^T·scale [→ c·tanh(s/c)] + causal mask [+ window mask]
//	    o  = softmax(s)·v · Wo^T                        (grouped-query attention)
//	    h += o [normed by post_attention_layernorm: Gemma]
//	    m  = RMSNorm(h) · post_attention_layernorm      (Gemma: pre_feedforward_layernorm)
//	    h += (act(m·Wg^T) * (m·Wu^T)) · Wd^T [normed by post_feedforward_layernorm]
//	logits = RMSNorm(h) · norm · lm_head^T [→ c·tanh(logits/c)]
//
// with scale head_dim^-½ (Gemma: query_pre_attn_scalar^-½) and act silu
// (Gemma: GELU-tanh).
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
	// Sinks are gpt-oss's per-head sink logits [heads], nil elsewhere.
	Sinks []float32
	// QKV is the checkpoint's fused q/k/v matrix (Phi-3's qkv_proj), whose
	// rows Q, K and V view; empty where they are stored apart.
	QKV tensor.Matrix

	// nn is the block on the device: the four layers, Q.W, K.W and V.W as
	// one [qDim+2·kvDim, H] matrix (QKV) where they lie back to back, and
	// QNorm and KNorm on the device (or empty).
	nn nn.Attention
	// at is the block's attention over the pass's caches at its layer.
	at cacheAttention
}

// MLP is the gated feed-forward block (SwiGLU, or GELU-tanh for Gemma).
type MLP struct {
	Gate, Up, Down Linear
	// GateUp is the checkpoint's fused gate/up matrix (Phi-3's
	// gate_up_proj), whose rows Gate and Up view; empty where they are
	// stored apart.
	GateUp tensor.Matrix

	// nn is the block on the device: the three layers, and Gate.W and
	// Up.W as one [2·I, H] matrix (GateUp) where they lie back to back.
	nn nn.MLP
}

// MoE is a sparse layer's mixture of experts: the router, one logit per
// expert, and the experts, gated MLPs of which each token runs the TopK its
// router's softmax ranks first, their outputs summed weighted by those
// probabilities (renormalised to sum to one where the config says so).
type MoE struct {
	Router  Linear // [experts, H]
	Experts []MLP
	// Bias is DeepSeek's e_score_correction_bias [experts], added to the
	// sigmoid scores that choose the experts (not to their weights); nil
	// elsewhere. Shared is the MLP every token runs besides (DeepSeek's
	// shared experts), nil where none.
	Bias   []float32
	Shared *MLP
	// GateUp, Down, GateUpBias and DownBias are the experts as a
	// checkpoint stores them stacked (gpt-oss: [experts·hidden,
	// 2·intermediate] input-major with gate and up interleaved by column,
	// [experts·intermediate, hidden], and their biases), which Experts
	// hold rearranged; empty elsewhere.
	GateUp, Down         tensor.Matrix
	GateUpBias, DownBias []float32
	// GateUpBlocks, GateUpScales, DownBlocks and DownScales are those
	// matrices as gpt-oss's MXFP4 checkpoints store them ([experts, out,
	// in/32, 16] and [experts, out, in/32] bytes, viewing the mapped file),
	// which Experts hold as MXFP4 matrices.
	GateUpBlocks, GateUpScales, DownBlocks, DownScales []uint8

	bias tensor.Tensor
}

// Layer is one decoder layer. Norm weights are as the checkpoint stores
// them (Gemma's as offsets from 1).
type Layer struct {
	AttnNorm []float32 // input_layernorm.weight [H]
	Attn     Attention
	// AttnOutNorm normalizes the attention's output before the residual
	// add (Gemma: post_attention_layernorm.weight [H]); nil elsewhere.
	AttnOutNorm []float32
	MLPNorm     []float32 // post_attention_layernorm.weight [H] (Gemma: pre_feedforward_layernorm)
	MLP         MLP
	// MoE is a sparse layer's mixture of experts, which runs instead of
	// MLP; nil for a dense layer.
	MoE *MoE
	// MLA is DeepSeek's latent attention, which runs instead of Attn; nil
	// elsewhere.
	MLA *MLA
	// MLPOutNorm normalizes the MLP's output before the residual add
	// (Gemma: post_feedforward_layernorm.weight [H]); nil elsewhere.
	MLPOutNorm []float32

	// The norms on the device, the family's NormOffset added.
	attnNorm, mlpNorm, attnOutNorm, mlpOutNorm tensor.Tensor
	window                                     int // attention window, 0 for global
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

	fam arch.Family    // Config's architecture family
	dev tensor.Device  // where the activations and caches live and every op runs
	rot *tensor.Rotary // the RoPE tables on dev of the global layers
	// rotLocal is the sliding layers' when they rotate apart (Gemma-3),
	// else rot.
	rotLocal *tensor.Rotary
	// embedScale multiplies the embedding rows (Gemma: √H), 1 elsewhere;
	// attnSoftcap and finalSoftcap cap the scores and the logits, 0 off.
	embedScale, attnSoftcap, finalSoftcap float32
	eps                                   float32
	h                                     int // hidden size
	hd                                    int // head dimension
	nHeads                                int
	nKV                                   int
	qDim                                  int // nHeads*hd
	kvDim                                 int // nKV*hd
	inter                                 int // intermediate size
	vocab                                 int
	maxPos                                int // max_position_embeddings
	// longFrom is longrope's original_max_position_embeddings (0 without
	// it): a sequence's pass that reaches it turns by the long factors.
	longFrom int
	scale    float32 // the queries' scale: head_dim^-½ or query_pre_attn_scalar^-½
	s        scratch
	rowExact rowExact // the device of tree passes (see Forward)
	p        pass     // the views of the pass in flight
	res      Result
	graph    graphPass // the pass as a CUDA graph (graph.go)
}

// Device returns the device the model computes on.
func (m *Model) Device() tensor.Device { return m.dev }

// HostMemory reports whether the model's device computes in host memory
// (the CPU device), where a pass's results are read in place; a device with
// memory of its own (a GPU) copies what the host reads, so callers keep
// bulky results such as logits there (Options.DeviceLogits).
func (m *Model) HostMemory() bool {
	_, ok := m.dev.HostF32(m.norm)
	return ok
}

// NumLayers returns the number of decoder layers L; hidden-state tap indices run
// from 0 to L.
func (m *Model) NumLayers() int { return len(m.Layers) }

// HiddenSize returns H, the width of every tap row.
func (m *Model) HiddenSize() int { return m.h }

// VocabSize returns V, the width of every logits row.
func (m *Model) VocabSize() int { return m.vocab }

// MaxPositions returns the longest sequence the model can attend over: the
// model's max_position_embeddings (sliding-window layers attend to their
// window within it).
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
		if b.raw != nil {
			mem.Bytes[tensor.MXFP4] += int64(product(b.shape))
			mem.Mapped += int64(product(b.shape))
			continue
		}
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
		switch {
		case b.raw != nil:
			mem.Bytes[tensor.MXFP4] += int64(len(*b.raw))
		case b.mat != nil:
			mem.Bytes[b.mat.DType] += b.mat.Bytes()
		default:
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
	m := &Model{
		Config: cfg, fam: fam, Layers: make([]Layer, cfg.NumLayers), eps: float32(cfg.RMSNormEps),
		h: cfg.HiddenSize, hd: cfg.HeadDim, nHeads: cfg.NumHeads, nKV: cfg.NumKVHeads,
		qDim: cfg.NumHeads * cfg.HeadDim, kvDim: cfg.NumKVHeads * cfg.HeadDim,
		inter: cfg.IntermediateSize, vocab: cfg.VocabSize, maxPos: cfg.MaxPositions,
		embedScale: 1, attnSoftcap: float32(cfg.AttnSoftcap), finalSoftcap: float32(cfg.FinalSoftcap),
	}
	for l := range m.Layers {
		m.Layers[l].window = cfg.Window(l)
	}
	if fam.MLA {
		// One cached head of the latent and the rotated key part, which
		// every query head attends to with a query of the same width.
		w := cfg.KVLoraRank + cfg.QKRope
		m.hd, m.nKV, m.kvDim, m.qDim = w, 1, w, cfg.NumHeads*w
	}
	if fam.EmbedScale == arch.ScaleSqrtHidden {
		m.embedScale = float32(math.Sqrt(float64(m.h)))
	}
	scalar := float64(m.hd)
	if cfg.QueryPreAttnScalar > 0 {
		scalar = cfg.QueryPreAttnScalar
	}
	m.scale = float32(1 / math.Sqrt(scalar))
	if fam.MLA {
		// Transformers' DeepSeek scale: the query-key width's, times
		// yarn's mscale_all_dim factor squared where the config has it.
		sc := 1 / math.Sqrt(float64(cfg.QKNope+cfg.QKRope))
		if r := cfg.RopeScaling; r != nil && r.Type == "yarn" && r.MScaleAll != 0 && r.Factor > 1 {
			ms := 0.1*r.MScaleAll*math.Log(r.Factor) + 1
			sc *= ms * ms
		}
		m.scale = float32(sc)
	}
	m.dev = cpu.SiblingOf(dev)
	if err := m.rotaries(); err != nil {
		return nil, err
	}
	return m, nil
}

// rotaries builds the RoPE tables on the model's device: the global
// layers', and the sliding layers' where they rotate apart.
func (m *Model) rotaries() error {
	cfg := m.Config
	var err error
	if m.rot, err = m.rotary(cfg.RopeTheta, cfg.RopeScaling, cfg.RotaryDims); err != nil {
		return err
	}
	m.rotLocal = m.rot
	if m.fam.LocalRope {
		if m.rotLocal, err = m.rotary(cfg.LocalRopeTheta, cfg.LocalRopeScaling, cfg.RotaryDims); err != nil {
			return err
		}
	}
	return nil
}

// rotary builds RoPE tables on the model's device for a base, a scaling
// and the rotated values per head (dims) of config.json: for the positions
// most sequences use (positions past the table are computed on the fly).
func (m *Model) rotary(theta float64, s *checkpoint.RopeScaling, dims int) (*tensor.Rotary, error) {
	var rs *nn.RopeScaling
	var opt nn.RoPEOptions
	hd := m.hd
	if m.fam.MLA {
		hd = dims // the rotated parts are compacted before RoPE
	}
	if dims != hd {
		opt.RotaryDims = dims
	}
	if s != nil {
		switch s.Type {
		case "", "default":
		case "linear", "llama3", "longrope", "yarn":
			rs = &nn.RopeScaling{Type: s.Type, Factor: s.Factor, LowFreqFactor: s.LowFreqFactor,
				HighFreqFactor: s.HighFreqFactor, OriginalMaxPositions: s.OriginalMaxPositions,
				ShortFactor: s.ShortFactor, LongFactor: s.LongFactor,
				BetaFast: s.BetaFast, BetaSlow: s.BetaSlow, Truncate: s.Truncate}
			if s.Type == "longrope" || s.Type == "yarn" {
				opt.AttnFactor = s.AttnFactor
			}
		default:
			return nil, fmt.Errorf("model: config.json rope_scaling type %q is not supported (supported: linear, llama3, longrope, yarn)", s.Type)
		}
	}
	table := min(m.maxPos, 32768)
	if rs != nil && rs.Type == "longrope" {
		table = m.maxPos // its long range is read from the table only
	}
	rope, err := nn.NewRoPEWith(hd, theta, rs, table, opt)
	if err != nil {
		return nil, fmt.Errorf("model: config.json rope settings: %w", err)
	}
	if lf := rope.LongFrom(); lf > 0 {
		m.longFrom = lf
	}
	rot, err := rope.On(m.dev)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return rot, nil
}

// implements refuses a family whose hooks ask for computation the forward
// pass does not have (an activation, embedding scale or sliding rule it
// does not know), so that no hook is silently ignored.
func implements(f arch.Family) error {
	var missing []string
	switch f.Activation {
	case "silu", "gelu_pytorch_tanh":
	default:
		missing = append(missing, fmt.Sprintf("activation %q (only silu, gelu_pytorch_tanh)", f.Activation))
	}
	switch f.EmbedScale {
	case arch.Unscaled, arch.ScaleSqrtHidden:
	default:
		missing = append(missing, fmt.Sprintf("embedding scale %d", f.EmbedScale))
	}
	switch f.Sliding {
	case arch.NoSliding, arch.SlidingAllLayers, arch.SlidingOff, arch.SlidingLayerTypes:
	default:
		missing = append(missing, fmt.Sprintf("sliding rule %d", f.Sliding))
	}
	if len(missing) > 0 {
		return fmt.Errorf("model: model_type %s needs %s, which pkg/model does not implement yet", f.ModelType, strings.Join(missing, ", "))
	}
	return nil
}
