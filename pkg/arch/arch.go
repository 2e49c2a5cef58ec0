// Package arch describes the architecture families drafter runs, one Family
// per config.json model_type: how its config.json is read, which tensors its
// checkpoints hold (names, shapes, biases, norms), its activation, and the
// hooks where families compute differently (embedding scale, norm offset,
// sandwich norms, activation, query scale, soft-capping, sliding windows and
// their RoPE). It is the one place that knows them:
// pkg/checkpoint derives its config checks and its required and unused
// tensors from a Family, pkg/model binds its weights from Family.Tensors in
// one generic pass and refuses what it does not implement, and every
// "supported" message names Supported.
//
// Adding a family whose computation the hooks describe is one file here (a
// function returning its Family, listed in Families); a new hook also needs
// its branch in pkg/checkpoint (reading its keys) and pkg/model.
package arch

import (
	"fmt"
	"strconv"
	"strings"
)

// Family describes one architecture family.
type Family struct {
	// ModelType is config.json's model_type; Architecture is the one
	// architectures entry its checkpoints may carry.
	ModelType, Architecture string

	// DefaultKVHeads, DefaultHeadDim and DefaultMaxPositions are the values
	// the family's Transformers config class gives num_key_value_heads,
	// head_dim and max_position_embeddings when config.json leaves them out
	// (DefaultKVHeads 0: num_attention_heads; DefaultHeadDim 0:
	// hidden_size / num_attention_heads).
	DefaultKVHeads, DefaultHeadDim, DefaultMaxPositions int
	// DefaultRopeTheta is rope_theta when config.json leaves it out (0:
	// 10000); DefaultTied is tie_word_embeddings'.
	DefaultRopeTheta float64
	DefaultTied      bool

	// QKVBias and OBias say when q_proj, k_proj and v_proj, and o_proj,
	// carry a bias.
	QKVBias, OBias Bias
	// FusedQKV means a checkpoint holds q, k and v as one matrix,
	// self_attn.qkv_proj.weight [heads·head_dim + 2·kv_heads·head_dim,
	// hidden], and FusedGateUp gate and up as one, mlp.gate_up_proj.weight
	// [2·intermediate, hidden], gate first (Phi-3).
	FusedQKV, FusedGateUp bool
	// QKNorm means per-head RMSNorms (self_attn.q_norm and k_norm,
	// [head_dim]) apply to the queries and keys before RoPE.
	QKNorm bool
	// Activation is the gated MLP's activation ("silu" or
	// "gelu_pytorch_tanh"): config.json's ActivationKey when absent, and the
	// only value accepted.
	Activation string
	// ActivationKey is the config.json key naming the activation:
	// "hidden_act", or Gemma's "hidden_activation" (whose Transformers
	// classes ignore hidden_act).
	ActivationKey string
	// Sliding says how config.json describes sliding-window attention;
	// SlidingPeriod is, for SlidingLayerTypes, the layer period when
	// config.json has neither layer_types nor sliding_window_pattern (every
	// SlidingPeriod-th layer attends globally, the others slide).
	Sliding       Sliding
	SlidingPeriod int
	// DefaultSlidingWindow is sliding_window when config.json leaves it
	// out (0: none).
	DefaultSlidingWindow int
	// PartialRotary means partial_rotary_factor (config.json or
	// rope_parameters) says how much of each head RoPE rotates (Phi-3);
	// elsewhere a factor other than 1 is refused.
	PartialRotary bool
	// LocalRope means sliding layers rotate with their own RoPE base
	// (rope_local_base_freq, or rope_parameters.sliding_attention) and no
	// scaling, global layers with rope_theta and rope_scaling (Gemma-3).
	LocalRope bool
	// Buffers are name suffixes of tensors a checkpoint may hold that are
	// computed, not learned, and that loading ignores (the rotary inverse
	// frequencies older Transformers saved with the weights).
	Buffers []string

	// EmbedScale multiplies the embedding output.
	EmbedScale EmbedScale
	// NormOffset is added to every RMSNorm weight: x·(NormOffset+w)
	// (Gemma's 1+w), q/k norms included.
	NormOffset float32
	// SandwichNorms means four norms per layer (Gemma-2, Gemma-3):
	// input_layernorm before attention, post_attention_layernorm on the
	// attention's output before the residual add, pre_feedforward_layernorm
	// before the MLP and post_feedforward_layernorm on its output. Without
	// it post_attention_layernorm is the MLP's input norm (Llama).
	SandwichNorms bool
	// QueryPreAttnScalar means attention scores are scaled by
	// query_pre_attn_scalar^-½ (DefaultQueryPreAttnScalar when absent)
	// instead of head_dim^-½.
	QueryPreAttnScalar        bool
	DefaultQueryPreAttnScalar float64
	// Softcaps means config.json's attn_logit_softcapping and
	// final_logit_softcapping (null: off) cap the attention scores and the
	// final logits at c·tanh(x/c); DefaultAttnSoftcap and
	// DefaultFinalSoftcap are the values when a key is absent (0: off).
	Softcaps                                bool
	DefaultAttnSoftcap, DefaultFinalSoftcap float64

	// MoE describes the family's mixture-of-experts layers; nil for a
	// dense family.
	MoE *MoE
	// AttnSinks means each attention head has a learned sink logit
	// (self_attn.sinks [heads]) joining its softmax without a value
	// (gpt-oss).
	AttnSinks bool
	// MLA means DeepSeek's multi-head latent attention replaces the
	// q/k/v projections (see MLATensors' names); the KV cache then holds
	// each position's normed latent and its rotated key part.
	MLA bool
	// ExtraLayersKey names a config.json count of layers a checkpoint
	// holds past num_hidden_layers that inference does not run (DeepSeek's
	// num_nextn_predict_layers: multi-token-prediction modules), whose
	// tensors loading ignores.
	ExtraLayersKey string
}

// MoE is how a family's checkpoints hold and config.json describes its
// mixture-of-experts layers: a router (a linear layer of one logit per
// expert) choosing, per token, the experts whose gated MLPs run and whose
// outputs are summed, weighted by the router's softmax probabilities.
type MoE struct {
	// Block is the name of a sparse layer's MoE block after the layer
	// prefix ("block_sparse_moe." for Mixtral, "mlp." for Qwen3-MoE): its
	// router is Block+"gate.weight" [experts, hidden] and expert e's
	// weights Block+"experts.e."+Gate/Up/Down+".weight".
	Block            string
	Gate, Up, Down   string
	ExpertsKeys      []string // config.json keys of the number of experts, the first present read
	IntermediateKey  string   // config.json key of an expert's MLP width
	RenormalizeTopK  bool     // the chosen experts' probabilities always sum to one (Mixtral)
	NormTopKKey      string   // else this config.json key says whether they do (Qwen3-MoE's norm_topk_prob)
	DefaultNormTopK  bool     // its value when absent
	SparseLayersKeys bool     // mlp_only_layers and decoder_sparse_step choose the sparse layers (Qwen3-MoE)
	FirstDenseKey    string   // else, when set, this key counts the dense layers before the sparse ones (DeepSeek's first_k_dense_replace); else every layer is sparse

	// SigmoidGroups means DeepSeek-V3's router: sigmoid scores plus a
	// learned correction bias (gate.e_score_correction_bias [experts])
	// choose the experts within the n_group groups of the topk_group best
	// groups (a group ranked by the sum of its two best corrected scores);
	// the chosen experts weigh by their uncorrected scores, renormalised
	// where norm_topk_prob, times routed_scaling_factor. Else the router's
	// softmax ranks and weighs the experts.
	SigmoidGroups bool
	// Stacked means the experts are stored as gpt-oss stores them: all in
	// Block+"experts.gate_up_proj" [experts, hidden, 2·intermediate]
	// (input-major, gate and up interleaved by column: gate j is column
	// 2j, up j column 2j+1) and "experts.down_proj" [experts,
	// intermediate, hidden], each with a bias per expert
	// ("..._bias" [experts, out]).
	Stacked bool
	// Router is the router's name after Block ("gate." when empty) and
	// RouterBias whether it has a bias (Router+"bias").
	Router     string
	RouterBias bool
	// SoftmaxTopK means the chosen experts weigh by the softmax of their
	// router logits alone (gpt-oss: the top k logits, then their softmax).
	SoftmaxTopK bool
	// ClampedSwiGLU means gpt-oss's expert activation: gate clamped above
	// and up clamped both sides at swiglu_limit, (up+1)·gate·σ(α·gate) with
	// α swiglu_alpha.
	ClampedSwiGLU bool
	// Shared is the name, after Block, of the MLP every token runs beside
	// its routed experts ("shared_experts." with gate_proj, up_proj and
	// down_proj, n_shared_experts times the expert width), "" for none.
	Shared string
}

// Bias says when a projection carries a bias.
type Bias uint8

const (
	// NoBias: never.
	NoBias Bias = iota
	// AlwaysBias: always, whatever config.json says (Qwen2's q/k/v).
	AlwaysBias
	// ConfigBias: when config.json's attention_bias is true.
	ConfigBias
)

// Present reports whether the projection has a bias, given config.json's
// attention_bias.
func (b Bias) Present(attentionBias bool) bool {
	return b == AlwaysBias || (b == ConfigBias && attentionBias)
}

// Sliding says how a family's config.json describes sliding-window attention.
type Sliding uint8

const (
	// NoSliding: the family has no sliding-window attention and reads no
	// key for it.
	NoSliding Sliding = iota
	// SlidingAllLayers: sliding_window (null for none) is the window of
	// every layer (Mistral, Phi-3).
	SlidingAllLayers
	// SlidingOff: use_sliding_window and layer_types may only say that no
	// layer slides (Qwen2, Qwen3: their sliding layers are not supported).
	SlidingOff
	// SlidingLayerTypes: layer_types names each layer "sliding_attention"
	// or "full_attention" (or, without it, sliding_window_pattern or the
	// family's SlidingPeriod does), and sliding_window is the sliding
	// layers' window (Gemma-2, Gemma-3).
	SlidingLayerTypes
)

// EmbedScale is what multiplies the embedding output.
type EmbedScale uint8

const (
	// Unscaled: the embedding rows as stored (scale 1).
	Unscaled EmbedScale = iota
	// ScaleSqrtHidden: by √hidden_size (Gemma).
	ScaleSqrtHidden
)

// Families returns every supported family, in the order messages list them.
func Families() []Family {
	return []Family{Llama(), Mistral(), Qwen2(), Qwen3(), Gemma2(), Gemma3Text(), Phi3(), Mixtral(), Qwen3MoE(), DeepseekV3(), GptOss()}
}

// Lookup returns the family of a config.json model_type.
func Lookup(modelType string) (Family, bool) {
	for _, f := range Families() {
		if f.ModelType == modelType {
			return f, true
		}
	}
	return Family{}, false
}

// Supported lists the supported model_type values, for messages:
// "llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3, mixtral, qwen3_moe, deepseek_v3, gpt_oss".
func Supported() string {
	return list(func(f Family) string { return f.ModelType })
}

// SupportedArchitectures lists the supported architectures entries, for
// messages.
func SupportedArchitectures() string {
	return list(func(f Family) string { return f.Architecture })
}

func list(field func(Family) string) string {
	var s []string
	for _, f := range Families() {
		s = append(s, field(f))
	}
	return strings.Join(s, ", ")
}

// Dims are what decides a checkpoint's tensors besides its family: the
// sizes of config.json and which biases it has (the family's Bias rules
// applied to attention_bias), and for a mixture of experts its experts,
// their width and which layers are sparse.
type Dims struct {
	Hidden, Intermediate, Layers, Heads, KVHeads, HeadDim, Vocab int
	// Experts and ExpertIntermediate are a MoE family's experts per sparse
	// layer and their MLP width; Sparse[l] says whether layer l is one;
	// SharedIntermediate the width of its shared MLP (0: none).
	Experts, ExpertIntermediate, SharedIntermediate int
	Sparse                                          []bool
	// MXFP4 means a Stacked family's expert matrices are stored as gpt-oss
	// ships them: MXFP4 blocks and scales, [out, in] (see ExpertsGateUp).
	MXFP4 bool
	// QLoraRank (0: a plain q_proj), KVLoraRank, QKNope, QKRope and VHead
	// are an MLA family's attention widths.
	QLoraRank, KVLoraRank, QKNope, QKRope, VHead int
	// TiedEmbeddings means the output layer is the embedding (no
	// lm_head.weight).
	TiedEmbeddings bool
	// QKVBias and OBias say whether q/k/v_proj and o_proj carry biases.
	QKVBias, OBias bool
}

// Role is what a tensor is to the forward pass.
type Role uint8

// The roles. Linear weights use the Hugging Face [out, in] layout.
const (
	Embed               Role = iota // model.embed_tokens.weight [vocab, hidden]
	AttnNorm                        // input_layernorm.weight [hidden]
	QProj                           // self_attn.q_proj.weight [heads·head_dim, hidden]
	KProj                           // self_attn.k_proj.weight [kv_heads·head_dim, hidden]
	VProj                           // self_attn.v_proj.weight [kv_heads·head_dim, hidden]
	QBias                           // self_attn.q_proj.bias [heads·head_dim]
	KBias                           // self_attn.k_proj.bias [kv_heads·head_dim]
	VBias                           // self_attn.v_proj.bias [kv_heads·head_dim]
	OProj                           // self_attn.o_proj.weight [hidden, heads·head_dim]
	OProjBias                       // self_attn.o_proj.bias [hidden]
	QNorm                           // self_attn.q_norm.weight [head_dim]
	KNorm                           // self_attn.k_norm.weight [head_dim]
	MLPNorm                         // post_attention_layernorm.weight [hidden] (SandwichNorms: pre_feedforward_layernorm)
	AttnOutNorm                     // SandwichNorms: post_attention_layernorm.weight [hidden]
	MLPOutNorm                      // SandwichNorms: post_feedforward_layernorm.weight [hidden]
	QKVProj                         // FusedQKV: self_attn.qkv_proj.weight [heads·head_dim + 2·kv_heads·head_dim, hidden]
	GateUpProj                      // FusedGateUp: mlp.gate_up_proj.weight [2·intermediate, hidden]
	Router                          // MoE: the sparse layer's router [experts, hidden]
	RouterBias                      // MoE (SigmoidGroups): gate.e_score_correction_bias [experts]
	RouterLinearBias                // MoE (MoE.RouterBias): the router's bias [experts]
	ExpertsGateUp                   // MoE (Stacked): experts.gate_up_proj [experts, hidden, 2·intermediate]; with Dims.MXFP4 gate_up_proj_blocks [experts, 2·intermediate, hidden/32, 16] (uint8)
	ExpertsGateUpScales             // MoE (Stacked, MXFP4): experts.gate_up_proj_scales [experts, 2·intermediate, hidden/32] (uint8)
	ExpertsDownScales               // MoE (Stacked, MXFP4): experts.down_proj_scales [experts, hidden, intermediate/32] (uint8)
	ExpertsGateUpBias               // MoE (Stacked): experts.gate_up_proj_bias [experts, 2·intermediate]
	ExpertsDown                     // MoE (Stacked): experts.down_proj [experts, intermediate, hidden]; with Dims.MXFP4 down_proj_blocks [experts, hidden, intermediate/32, 16]
	ExpertsDownBias                 // MoE (Stacked): experts.down_proj_bias [experts, hidden]
	Sinks                           // AttnSinks: self_attn.sinks [heads]
	SharedGate                      // MoE: the shared MLP's gate [shared intermediate, hidden]
	SharedUp                        // MoE: its up [shared intermediate, hidden]
	SharedDown                      // MoE: its down [hidden, shared intermediate]
	QAProj                          // MLA: self_attn.q_a_proj.weight [q_lora_rank, hidden]
	QANorm                          // MLA: self_attn.q_a_layernorm.weight [q_lora_rank]
	QBProj                          // MLA: self_attn.q_b_proj.weight [heads·(nope+rope), q_lora_rank]
	KVAProj                         // MLA: self_attn.kv_a_proj_with_mqa.weight [kv_lora_rank+rope, hidden]
	KVANorm                         // MLA: self_attn.kv_a_layernorm.weight [kv_lora_rank]
	KVBProj                         // MLA: self_attn.kv_b_proj.weight [heads·(nope+v), kv_lora_rank]
	ExpertGate                      // MoE: expert Tensor.Expert's gate weight [expert intermediate, hidden]
	ExpertUp                        // MoE: its up weight [expert intermediate, hidden]
	ExpertDown                      // MoE: its down weight [hidden, expert intermediate]
	GateProj                        // mlp.gate_proj.weight [intermediate, hidden]
	UpProj                          // mlp.up_proj.weight [intermediate, hidden]
	DownProj                        // mlp.down_proj.weight [hidden, intermediate]
	FinalNorm                       // model.norm.weight [hidden]
	LMHead                          // lm_head.weight [vocab, hidden]
)

// Tensor is one tensor of a checkpoint.
type Tensor struct {
	// Name is the checkpoint name; Shape the shape config.json implies.
	Name  string
	Shape []int
	// Role is what the tensor is; Layer its decoder layer, -1 for the
	// embedding, the final norm and lm_head; Expert its expert (MoE
	// expert roles only).
	Role          Role
	Layer, Expert int
}

// Checkpoint names of the tensors outside the decoder layers, and the prefix
// of those inside layer N ("model.layers.N.").
const (
	EmbedName     = "model.embed_tokens.weight"
	FinalNormName = "model.norm.weight"
	LMHeadName    = "lm_head.weight"
	layerPrefix   = "model.layers."
)

// layerName is the name of a per-layer role after the layer prefix.
func (f *Family) layerName(r Role) string {
	switch r {
	case AttnNorm:
		return "input_layernorm.weight"
	case QProj:
		return "self_attn.q_proj.weight"
	case KProj:
		return "self_attn.k_proj.weight"
	case VProj:
		return "self_attn.v_proj.weight"
	case QBias:
		return "self_attn.q_proj.bias"
	case KBias:
		return "self_attn.k_proj.bias"
	case VBias:
		return "self_attn.v_proj.bias"
	case OProj:
		return "self_attn.o_proj.weight"
	case OProjBias:
		return "self_attn.o_proj.bias"
	case QNorm:
		return "self_attn.q_norm.weight"
	case KNorm:
		return "self_attn.k_norm.weight"
	case MLPNorm:
		if f.SandwichNorms {
			return "pre_feedforward_layernorm.weight"
		}
		return "post_attention_layernorm.weight"
	case AttnOutNorm:
		return "post_attention_layernorm.weight"
	case MLPOutNorm:
		return "post_feedforward_layernorm.weight"
	case QAProj:
		return "self_attn.q_a_proj.weight"
	case QANorm:
		return "self_attn.q_a_layernorm.weight"
	case QBProj:
		return "self_attn.q_b_proj.weight"
	case KVAProj:
		return "self_attn.kv_a_proj_with_mqa.weight"
	case KVANorm:
		return "self_attn.kv_a_layernorm.weight"
	case KVBProj:
		return "self_attn.kv_b_proj.weight"
	case QKVProj:
		return "self_attn.qkv_proj.weight"
	case GateUpProj:
		return "mlp.gate_up_proj.weight"
	case GateProj:
		return "mlp.gate_proj.weight"
	case UpProj:
		return "mlp.up_proj.weight"
	case DownProj:
		return "mlp.down_proj.weight"
	}
	panic(fmt.Sprintf("arch: role %d has no per-layer name", r))
}

// Tensors lists every tensor a checkpoint of the family with dims holds, in
// forward order: the embedding; per layer its input norm, the q, k and v
// weights back to back and then their biases, o_proj (and its bias), the
// q/k norms, the attention output norm (SandwichNorms), the MLP input norm
// and the MLP output norm (SandwichNorms), the gate and up weights back to
// back, down_proj; the final norm; lm_head unless tied. pkg/model lays
// its weights out in this order, so that the matrices that share an input
// (q/k/v, gate/up) are adjacent and multiply as one.
func (f *Family) Tensors(d Dims) []Tensor {
	h, q, kv, in := d.Hidden, d.Heads*d.HeadDim, d.KVHeads*d.HeadDim, d.Intermediate
	out := make([]Tensor, 0, 3+d.Layers*19)
	out = append(out, Tensor{Name: EmbedName, Shape: []int{d.Vocab, h}, Role: Embed, Layer: -1})
	for l := 0; l < d.Layers; l++ {
		p := layerPrefix + strconv.Itoa(l) + "."
		add := func(r Role, shape ...int) {
			out = append(out, Tensor{Name: p + f.layerName(r), Shape: shape, Role: r, Layer: l})
		}
		add(AttnNorm, h)
		if f.MLA {
			qk := d.QKNope + d.QKRope
			if d.QLoraRank > 0 {
				add(QAProj, d.QLoraRank, h)
				add(QANorm, d.QLoraRank)
				add(QBProj, d.Heads*qk, d.QLoraRank)
			} else {
				add(QProj, d.Heads*qk, h)
			}
			add(KVAProj, d.KVLoraRank+d.QKRope, h)
			add(KVANorm, d.KVLoraRank)
			add(KVBProj, d.Heads*(d.QKNope+d.VHead), d.KVLoraRank)
			add(OProj, h, d.Heads*d.VHead)
		} else if f.FusedQKV {
			add(QKVProj, q+2*kv, h)
		} else {
			add(QProj, q, h)
			add(KProj, kv, h)
			add(VProj, kv, h)
		}
		if d.QKVBias && !f.MLA {
			add(QBias, q)
			add(KBias, kv)
			add(VBias, kv)
		}
		if !f.MLA {
			add(OProj, h, q)
		}
		if d.OBias && !f.MLA {
			add(OProjBias, h)
		}
		if f.QKNorm {
			add(QNorm, d.HeadDim)
			add(KNorm, d.HeadDim)
		}
		if f.AttnSinks {
			out = append(out, Tensor{Name: p + "self_attn.sinks", Shape: []int{d.Heads}, Role: Sinks, Layer: l})
		}
		if f.SandwichNorms {
			add(AttnOutNorm, h)
		}
		add(MLPNorm, h)
		if f.SandwichNorms {
			add(MLPOutNorm, h)
		}
		switch {
		case f.MoE != nil && l < len(d.Sparse) && d.Sparse[l]:
			out = f.MoE.tensors(out, p, l, h, d)
		case f.FusedGateUp:
			add(GateUpProj, 2*in, h)
			add(DownProj, h, in)
		default:
			add(GateProj, in, h)
			add(UpProj, in, h)
			add(DownProj, h, in)
		}
	}
	out = append(out, Tensor{Name: FinalNormName, Shape: []int{h}, Role: FinalNorm, Layer: -1})
	if !d.TiedEmbeddings {
		out = append(out, Tensor{Name: LMHeadName, Shape: []int{d.Vocab, h}, Role: LMHead, Layer: -1})
	}
	return out
}

// tensors appends a sparse layer's tensors (prefix p): the router, then
// each expert's gate, up and down weights (gate and up back to back, as
// the dense layers').
func (m *MoE) tensors(out []Tensor, p string, l, h int, d Dims) []Tensor {
	router := m.Router
	if router == "" {
		router = "gate."
	}
	out = append(out, Tensor{Name: p + m.Block + router + "weight", Shape: []int{d.Experts, h}, Role: Router, Layer: l})
	if m.RouterBias {
		out = append(out, Tensor{Name: p + m.Block + router + "bias", Shape: []int{d.Experts}, Role: RouterLinearBias, Layer: l})
	}
	if m.Stacked && d.MXFP4 {
		ep, in, E := p+m.Block+"experts.", d.ExpertIntermediate, d.Experts
		return append(out,
			Tensor{Name: ep + "gate_up_proj_blocks", Shape: []int{E, 2 * in, h / 32, 16}, Role: ExpertsGateUp, Layer: l},
			Tensor{Name: ep + "gate_up_proj_scales", Shape: []int{E, 2 * in, h / 32}, Role: ExpertsGateUpScales, Layer: l},
			Tensor{Name: ep + "gate_up_proj_bias", Shape: []int{E, 2 * in}, Role: ExpertsGateUpBias, Layer: l},
			Tensor{Name: ep + "down_proj_blocks", Shape: []int{E, h, in / 32, 16}, Role: ExpertsDown, Layer: l},
			Tensor{Name: ep + "down_proj_scales", Shape: []int{E, h, in / 32}, Role: ExpertsDownScales, Layer: l},
			Tensor{Name: ep + "down_proj_bias", Shape: []int{E, h}, Role: ExpertsDownBias, Layer: l})
	}
	if m.Stacked {
		ep, in := p+m.Block+"experts.", d.ExpertIntermediate
		return append(out,
			Tensor{Name: ep + "gate_up_proj", Shape: []int{d.Experts, h, 2 * in}, Role: ExpertsGateUp, Layer: l},
			Tensor{Name: ep + "gate_up_proj_bias", Shape: []int{d.Experts, 2 * in}, Role: ExpertsGateUpBias, Layer: l},
			Tensor{Name: ep + "down_proj", Shape: []int{d.Experts, in, h}, Role: ExpertsDown, Layer: l},
			Tensor{Name: ep + "down_proj_bias", Shape: []int{d.Experts, h}, Role: ExpertsDownBias, Layer: l})
	}
	if m.SigmoidGroups {
		out = append(out, Tensor{Name: p + m.Block + "gate.e_score_correction_bias", Shape: []int{d.Experts}, Role: RouterBias, Layer: l})
	}
	in := d.ExpertIntermediate
	for e := 0; e < d.Experts; e++ {
		ep := p + m.Block + "experts." + strconv.Itoa(e) + "."
		out = append(out,
			Tensor{Name: ep + m.Gate + ".weight", Shape: []int{in, h}, Role: ExpertGate, Layer: l, Expert: e},
			Tensor{Name: ep + m.Up + ".weight", Shape: []int{in, h}, Role: ExpertUp, Layer: l, Expert: e},
			Tensor{Name: ep + m.Down + ".weight", Shape: []int{h, in}, Role: ExpertDown, Layer: l, Expert: e})
	}
	if m.Shared != "" && d.SharedIntermediate > 0 {
		sp, si := p+m.Block+m.Shared, d.SharedIntermediate
		out = append(out,
			Tensor{Name: sp + "gate_proj.weight", Shape: []int{si, h}, Role: SharedGate, Layer: l},
			Tensor{Name: sp + "up_proj.weight", Shape: []int{si, h}, Role: SharedUp, Layer: l},
			Tensor{Name: sp + "down_proj.weight", Shape: []int{h, si}, Role: SharedDown, Layer: l})
	}
	return out
}

// IsBuffer reports whether name is a computed buffer of the family
// (Buffers) that loading ignores.
func (f *Family) IsBuffer(name string) bool {
	for _, s := range f.Buffers {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// LayerOf splits a per-layer tensor name "model.layers.N.rest" into N and
// rest.
func LayerOf(name string) (layer int, rest string, ok bool) {
	s, ok := strings.CutPrefix(name, layerPrefix)
	if !ok {
		return 0, "", false
	}
	num, rest, ok := strings.Cut(s, ".")
	if !ok {
		return 0, "", false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, "", false
	}
	return n, rest, true
}

// LayerPattern names tensors of layer N by pattern: "model.layers.N.*" for
// rest "*", "model.layers.*.rest" for N < 0.
func LayerPattern(layer int, rest string) string {
	n := "*"
	if layer >= 0 {
		n = strconv.Itoa(layer)
	}
	return layerPrefix + n + "." + rest
}
