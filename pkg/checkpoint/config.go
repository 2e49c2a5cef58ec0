// Package checkpoint reads a Hugging Face causal-LM checkpoint folder: config.json,
// generation_config.json and the safetensors weights, for the architecture families
// pkg/arch describes. It validates the configuration, checks that every
// tensor the architecture needs is present with the right shape and that the weights
// hold nothing else, so that the model run (and fingerprinted, pkg/fingerprint) is the
// one the files describe.
package checkpoint

import (
	"math"
	"slices"

	"github.com/drafter-ai/drafter/pkg/arch"
)

// Config is the parsed config.json of a supported decoder-only model. Defaults for
// absent optional keys follow the Hugging Face Transformers config classes.
type Config struct {
	// Path is the file the configuration was read from.
	Path string
	// ModelType is the model_type of a family of pkg/arch (arch.Supported).
	ModelType string
	// Architectures is the config's architectures list (may be empty).
	Architectures []string
	// HiddenSize is the residual width H.
	HiddenSize int
	// IntermediateSize is the SwiGLU MLP width.
	IntermediateSize int
	// NumLayers is num_hidden_layers (L).
	NumLayers int
	// NumHeads is the number of query heads.
	NumHeads int
	// NumKVHeads is the number of key/value heads (grouped-query attention).
	NumKVHeads int
	// HeadDim is the per-head width (hidden/heads when absent; 128 for qwen3, as
	// Qwen3Config defaults).
	HeadDim int
	// RMSNormEps is the RMSNorm epsilon (default 1e-6).
	RMSNormEps float64
	// RopeTheta is the RoPE base (default 10000).
	RopeTheta float64
	// RopeScaling is the RoPE frequency scaling, nil when none.
	RopeScaling *RopeScaling
	// RotaryDims is the number of values per head RoPE rotates: HeadDim, or
	// head_dim·partial_rotary_factor (Phi-3, Phi-4), the rest passed as
	// they are.
	RotaryDims int
	// MaxPositions is max_position_embeddings.
	MaxPositions int
	// VocabSize is the number of embedding rows and logits.
	VocabSize int
	// TieWordEmbeddings means the output projection reuses model.embed_tokens.weight
	// (default arch.Family.DefaultTied: true for Gemma, false for the others).
	TieWordEmbeddings bool
	// AttentionBias means q_proj, k_proj and v_proj carry a bias: always for qwen2,
	// attention_bias for llama and qwen3, never for mistral.
	AttentionBias bool
	// OProjBias means o_proj carries a bias: attention_bias for llama and qwen3, never
	// for qwen2 and mistral.
	OProjBias bool
	// QKNorm means per-head RMSNorms q_norm and k_norm are applied to queries and keys
	// before RoPE (qwen3).
	QKNorm bool
	// SlidingWindow is sliding_window, the window in tokens of the layers that
	// slide, 0 for none.
	SlidingWindow int
	// Windows is each layer's attention window, SlidingWindow or 0 (global):
	// every layer's for mistral, layer_types' sliding_attention layers for
	// gemma2 and gemma3_text. Read it through Window.
	Windows []int
	// LocalRopeTheta and LocalRopeScaling are the sliding layers' RoPE base
	// and scaling when their family rotates them apart (arch.Family.LocalRope:
	// gemma3_text's rope_local_base_freq); LocalRopeTheta is 0 otherwise.
	LocalRopeTheta   float64
	LocalRopeScaling *RopeScaling
	// QueryPreAttnScalar scales attention scores by its inverse square root
	// (gemma2, gemma3_text); 0 means head_dim.
	QueryPreAttnScalar float64
	// AttnSoftcap and FinalSoftcap are attn_logit_softcapping and
	// final_logit_softcapping (gemma2: 50 and 30 unless set), 0 for none.
	AttnSoftcap, FinalSoftcap float64
	// Experts, TopK and ExpertIntermediate describe a mixture-of-experts
	// family's sparse layers (arch.Family.MoE): experts per layer, experts
	// chosen per token (num_experts_per_tok) and an expert's MLP width;
	// NormTopK says the chosen experts' probabilities are renormalised to
	// sum to one; Sparse[l] whether layer l is sparse (else a dense MLP of
	// IntermediateSize). All zero for a dense family.
	Experts, TopK, ExpertIntermediate int
	NormTopK                          bool
	Sparse                            []bool
	// SharedIntermediate is the width of the MLP every token runs beside
	// its experts (DeepSeek: n_shared_experts·moe_intermediate_size), 0
	// for none. Groups and TopKGroups are DeepSeek's n_group and
	// topk_group, RoutedScaling its routed_scaling_factor (1 elsewhere).
	SharedIntermediate, Groups, TopKGroups int
	RoutedScaling                          float64
	// QLoraRank (0: q_proj), KVLoraRank, QKNope, QKRope and VHead are
	// DeepSeek's multi-head latent attention widths (arch.Family.MLA);
	// RopeInterleave means its rotary values are stored in pairs (x0, x1),
	// (x2, x3), ... rather than halves. ExtraLayers counts the layers a
	// checkpoint holds past NumLayers that are not run
	// (num_nextn_predict_layers).
	QLoraRank, KVLoraRank, QKNope, QKRope, VHead int
	RopeInterleave                               bool
	ExtraLayers                                  int
	// SwiGLUAlpha and SwiGLULimit are gpt-oss's clamped SwiGLU
	// (swiglu_alpha, swiglu_limit: 1.702 and 7 by default), 0 elsewhere;
	// MXFP4 means its experts are stored as MXFP4 blocks and scales
	// (quantization_config.quant_method "mxfp4").
	SwiGLUAlpha, SwiGLULimit float64
	MXFP4                    bool
	// HiddenAct is the MLP activation (hidden_act, or the family's
	// arch.Family.ActivationKey); only the family's Activation is accepted.
	HiddenAct string
	// DType is torch_dtype (or dtype), e.g. "bfloat16"; empty when absent.
	DType string
	// BOS and EOS are bos_token_id and eos_token_id (nil when null or absent).
	BOS, EOS []int
	// Raw is the whole decoded config.json; numbers are json.Number.
	Raw map[string]any
}

// RopeScaling is a supported rope_scaling entry.
type RopeScaling struct {
	// Type is "llama3", "linear" or "longrope".
	Type string
	// Factor divides the rotation frequencies (linear) or the low
	// frequencies (llama3); for longrope, max_position_embeddings over
	// original_max_position_embeddings unless given.
	Factor float64
	// LowFreqFactor and HighFreqFactor bound llama3's smooth interpolation band.
	LowFreqFactor, HighFreqFactor float64
	// OriginalMaxPositions is llama3's and longrope's
	// original_max_position_embeddings.
	OriginalMaxPositions int
	// ShortFactor and LongFactor are longrope's per-frequency divisors
	// (RotaryDims/2 each): the short ones for positions below
	// OriginalMaxPositions, the long ones from there on.
	ShortFactor, LongFactor []float64
	// AttnFactor multiplies longrope's and yarn's cos and sin:
	// attention_factor, or longrope's √(1 + ln(Factor)/ln(OriginalMaxPositions))
	// (1 when Factor <= 1), or yarn's mscale ratio, as Transformers derives
	// them.
	AttnFactor float64
	// BetaFast and BetaSlow bound yarn's interpolation ramp (32 and 1 by
	// default); Truncate rounds its ends outwards (default true). MScaleAll
	// is yarn's mscale_all_dim: DeepSeek's attention multiplies its softmax
	// scale by (0.1·MScaleAll·ln(Factor)+1)² when it is set.
	BetaFast, BetaSlow, MScaleAll float64
	Truncate                      bool
}

// LoadConfig reads and validates a config.json.
func LoadConfig(path string) (*Config, error) {
	m, err := readObject(path)
	if err != nil {
		return nil, err
	}
	return parseConfig(path, m)
}

// ParseConfig validates the config.json text data as LoadConfig does a
// file's; name stands for the file in errors and in Config.Path. It is
// for configurations made in memory (drafter bench's random shapes), which
// then parse exactly as the same text written to a checkpoint would.
func ParseConfig(name string, data []byte) (*Config, error) {
	m, err := decodeObject(name, data)
	if err != nil {
		return nil, err
	}
	return parseConfig(name, m)
}

// parseConfig interprets a decoded config.json; path names it in errors.
func parseConfig(path string, m map[string]any) (*Config, error) {
	f := fields{path, m}
	c := &Config{Path: path, Raw: m}
	var err error
	if c.ModelType, err = f.string("model_type", ""); err != nil {
		return nil, err
	}
	if c.ModelType == "" {
		return nil, f.errorf("model_type", "missing (supported: %s)", arch.Supported())
	}
	fam, ok := arch.Lookup(c.ModelType)
	if !ok {
		return nil, f.errorf("model_type", "%q is not supported (supported: %s)", c.ModelType, arch.Supported())
	}
	if f.present("architectures") {
		list, ok := m["architectures"].([]any)
		if !ok {
			return nil, f.errorf("architectures", "expected a list of strings, got %v", m["architectures"])
		}
		for _, a := range list {
			s, ok := a.(string)
			if !ok {
				return nil, f.errorf("architectures", "expected a list of strings, got %v", m["architectures"])
			}
			if s != fam.Architecture {
				return nil, f.errorf("architectures", "%q is not supported for model_type %q (supported: %s)", s, c.ModelType, arch.SupportedArchitectures())
			}
			c.Architectures = append(c.Architectures, s)
		}
	}

	ints := []struct {
		key      string
		dst      *int
		def      int
		required bool
	}{
		{"hidden_size", &c.HiddenSize, 0, true},
		{"intermediate_size", &c.IntermediateSize, 0, true},
		{"num_hidden_layers", &c.NumLayers, 0, true},
		{"num_attention_heads", &c.NumHeads, 0, true},
		{"vocab_size", &c.VocabSize, 0, true},
		{"max_position_embeddings", &c.MaxPositions, fam.DefaultMaxPositions, false},
	}
	for _, it := range ints {
		if *it.dst, err = f.int(it.key, it.def, it.required); err != nil {
			return nil, err
		}
		if *it.dst <= 0 {
			return nil, f.errorf(it.key, "must be positive, got %d", *it.dst)
		}
	}
	defKV := fam.DefaultKVHeads
	if defKV == 0 {
		defKV = c.NumHeads
	}
	if c.NumKVHeads, err = f.int("num_key_value_heads", defKV, false); err != nil {
		return nil, err
	}
	if c.NumKVHeads <= 0 {
		return nil, f.errorf("num_key_value_heads", "must be positive, got %d", c.NumKVHeads)
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return nil, f.errorf("num_key_value_heads", "%d does not divide num_attention_heads %d", c.NumKVHeads, c.NumHeads)
	}
	defHD := fam.DefaultHeadDim
	if defHD == 0 {
		if !f.present("head_dim") && c.HiddenSize%c.NumHeads != 0 {
			return nil, f.errorf("head_dim", "missing, and hidden_size %d is not divisible by num_attention_heads %d", c.HiddenSize, c.NumHeads)
		}
		defHD = c.HiddenSize / c.NumHeads
	}
	if c.HeadDim, err = f.int("head_dim", defHD, false); err != nil {
		return nil, err
	}
	if c.HeadDim <= 0 || c.HeadDim%2 != 0 {
		return nil, f.errorf("head_dim", "must be positive and even (RoPE rotates pairs), got %d", c.HeadDim)
	}
	if c.RMSNormEps, err = f.float("rms_norm_eps", 1e-6); err != nil {
		return nil, err
	}
	if !(c.RMSNormEps > 0) {
		return nil, f.errorf("rms_norm_eps", "must be positive, got %v", c.RMSNormEps)
	}
	if err := parseRope(f, c, fam); err != nil {
		return nil, err
	}
	if c.TieWordEmbeddings, err = f.bool("tie_word_embeddings", fam.DefaultTied); err != nil {
		return nil, err
	}
	attnBias, err := f.bool("attention_bias", false)
	if err != nil {
		return nil, err
	}
	c.AttentionBias, c.OProjBias, c.QKNorm = fam.QKVBias.Present(attnBias), fam.OBias.Present(attnBias), fam.QKNorm
	if mlpBias, err := f.bool("mlp_bias", false); err != nil {
		return nil, err
	} else if mlpBias {
		return nil, f.errorf("mlp_bias", "true is not supported (MLP projections with bias)")
	}
	if c.HiddenAct, err = f.string(fam.ActivationKey, fam.Activation); err != nil {
		return nil, err
	}
	if c.HiddenAct != fam.Activation {
		return nil, f.errorf(fam.ActivationKey, "%q is not supported (only %s for model_type %s)", c.HiddenAct, fam.Activation, c.ModelType)
	}
	if err := parseSliding(f, c, fam); err != nil {
		return nil, err
	}
	if err := parseGemmaKeys(f, c, fam); err != nil {
		return nil, err
	}
	if err := parseMoE(f, c, fam); err != nil {
		return nil, err
	}
	if err := parseMLA(f, c, fam); err != nil {
		return nil, err
	}
	if c.DType, err = f.string("torch_dtype", ""); err != nil {
		return nil, err
	}
	if c.DType == "" {
		if c.DType, err = f.string("dtype", ""); err != nil {
			return nil, err
		}
	}
	if c.BOS, err = f.ids("bos_token_id"); err != nil {
		return nil, err
	}
	if c.EOS, err = f.ids("eos_token_id"); err != nil {
		return nil, err
	}
	for _, id := range c.BOS {
		if id >= c.VocabSize {
			return nil, f.errorf("bos_token_id", "%d is outside the vocabulary (vocab_size %d)", id, c.VocabSize)
		}
	}
	for _, id := range c.EOS {
		if id >= c.VocabSize {
			return nil, f.errorf("eos_token_id", "%d is outside the vocabulary (vocab_size %d)", id, c.VocabSize)
		}
	}
	return c, nil
}

// Window returns layer l's attention window, 0 for global attention: its
// Windows entry, or 0 past them (a Config built in code without windows).
func (c *Config) Window(l int) int {
	if l < len(c.Windows) {
		return c.Windows[l]
	}
	return 0
}

// parseSliding reads the sliding-window keys as the family's Sliding rule
// says (mistral's window for every layer, Gemma's layer_types, Qwen's keys
// only to turn sliding layers off) into SlidingWindow and Windows.
func parseSliding(f fields, c *Config, fam arch.Family) error {
	c.Windows = make([]int, c.NumLayers)
	switch fam.Sliding {
	case arch.NoSliding:
		return nil
	case arch.SlidingAllLayers, arch.SlidingLayerTypes:
		w, err := f.int("sliding_window", fam.DefaultSlidingWindow, false)
		if err != nil {
			return err
		}
		if !f.present("sliding_window") {
			if _, set := f.m["sliding_window"]; set { // explicit null: no window
				w = 0
			}
		}
		if w < 0 {
			return f.errorf("sliding_window", "must not be negative, got %d", w)
		}
		c.SlidingWindow = w
		if fam.Sliding == arch.SlidingAllLayers {
			for l := range c.Windows {
				c.Windows[l] = w
			}
			return nil
		}
		sliding, err := layerTypes(f, c.NumLayers, fam.SlidingPeriod)
		if err != nil {
			return err
		}
		for l, s := range sliding {
			if s {
				c.Windows[l] = w
			}
		}
		return nil
	}
	use, err := f.bool("use_sliding_window", false)
	if err != nil {
		return err
	}
	if use {
		return f.errorf("use_sliding_window", "true is not supported (sliding-window attention on some layers)")
	}
	if f.present("layer_types") {
		list, ok := f.m["layer_types"].([]any)
		if !ok {
			return f.errorf("layer_types", "expected a list of strings, got %v", f.m["layer_types"])
		}
		for i, t := range list {
			if t != "full_attention" {
				return f.errorf("layer_types", "layer %d is %v; only full_attention is supported", i, t)
			}
		}
	}
	return nil
}

// layerTypes returns which of n layers slide: layer_types' entries
// ("sliding_attention" or "full_attention", one per layer), else every
// period-th layer global and the others sliding, period being
// sliding_window_pattern when present (older Gemma-3 configs).
func layerTypes(f fields, n, period int) ([]bool, error) {
	sliding := make([]bool, n)
	if f.present("layer_types") {
		list, ok := f.m["layer_types"].([]any)
		if !ok || len(list) != n {
			return nil, f.errorf("layer_types", "expected a list of %d strings (one per layer), got %v", n, f.m["layer_types"])
		}
		for i, t := range list {
			switch t {
			case "sliding_attention":
				sliding[i] = true
			case "full_attention":
			default:
				return nil, f.errorf("layer_types", "layer %d is %v; want sliding_attention or full_attention", i, t)
			}
		}
		return sliding, nil
	}
	p, err := f.int("sliding_window_pattern", period, false)
	if err != nil {
		return nil, err
	}
	if p <= 0 {
		return nil, f.errorf("sliding_window_pattern", "must be positive, got %d", p)
	}
	for i := range sliding {
		sliding[i] = (i+1)%p != 0
	}
	return sliding, nil
}

// parseMoE reads a mixture-of-experts family's keys (arch.Family.MoE).
func parseMoE(f fields, c *Config, fam arch.Family) error {
	moe := fam.MoE
	if moe == nil {
		return nil
	}
	key := moe.ExpertsKeys[0]
	for _, k := range moe.ExpertsKeys {
		if f.present(k) {
			key = k
			break
		}
	}
	var err error
	for _, it := range []struct {
		key string
		dst *int
	}{{key, &c.Experts}, {"num_experts_per_tok", &c.TopK}, {moe.IntermediateKey, &c.ExpertIntermediate}} {
		if *it.dst, err = f.int(it.key, 0, true); err != nil {
			return err
		}
		if *it.dst <= 0 {
			return f.errorf(it.key, "must be positive, got %d", *it.dst)
		}
	}
	if c.TopK > c.Experts {
		return f.errorf("num_experts_per_tok", "%d exceeds the %d experts (%s)", c.TopK, c.Experts, key)
	}
	c.NormTopK = moe.RenormalizeTopK
	if moe.NormTopKKey != "" {
		if c.NormTopK, err = f.bool(moe.NormTopKKey, moe.DefaultNormTopK); err != nil {
			return err
		}
	}
	c.RoutedScaling = 1
	if moe.ClampedSwiGLU {
		if c.SwiGLUAlpha, err = f.float("swiglu_alpha", 1.702); err != nil {
			return err
		}
		if c.SwiGLULimit, err = f.float("swiglu_limit", 7); err != nil {
			return err
		}
		if !(c.SwiGLUAlpha > 0 && c.SwiGLULimit > 0) {
			return f.errorf("swiglu_limit", "swiglu_alpha %v and swiglu_limit %v must be positive", c.SwiGLUAlpha, c.SwiGLULimit)
		}
	}
	if err := parseQuantization(f, c, moe); err != nil {
		return err
	}
	if moe.SigmoidGroups {
		if err := parseGroups(f, c); err != nil {
			return err
		}
	}
	if moe.Shared != "" {
		n, err := f.int("n_shared_experts", 0, false)
		if err != nil {
			return err
		}
		if n < 0 {
			return f.errorf("n_shared_experts", "must not be negative, got %d", n)
		}
		c.SharedIntermediate = n * c.ExpertIntermediate
	}
	c.Sparse = make([]bool, c.NumLayers)
	for l := range c.Sparse {
		c.Sparse[l] = true
	}
	if moe.FirstDenseKey != "" {
		k, err := f.int(moe.FirstDenseKey, 0, false)
		if err != nil {
			return err
		}
		if k < 0 {
			return f.errorf(moe.FirstDenseKey, "must not be negative, got %d", k)
		}
		for l := range min(k, c.NumLayers) {
			c.Sparse[l] = false
		}
		return nil
	}
	if !moe.SparseLayersKeys {
		return nil
	}
	step, err := f.int("decoder_sparse_step", 1, false)
	if err != nil {
		return err
	}
	if step <= 0 {
		return f.errorf("decoder_sparse_step", "must be positive, got %d", step)
	}
	var dense []int
	if f.present("mlp_only_layers") {
		list, ok := f.m["mlp_only_layers"].([]any)
		if !ok {
			return f.errorf("mlp_only_layers", "expected a list of layer indices, got %s", describe(f.m["mlp_only_layers"]))
		}
		for _, v := range list {
			l, ok := toInt(v)
			if !ok || l < 0 || l >= c.NumLayers {
				return f.errorf("mlp_only_layers", "expected layer indices in [0, %d), got %s", c.NumLayers, describe(v))
			}
			dense = append(dense, l)
		}
	}
	for l := range c.Sparse {
		c.Sparse[l] = (l+1)%step == 0 && !slices.Contains(dense, l)
	}
	return nil
}

// parseQuantization reads quantization_config: none, or (for gpt-oss's
// stacked experts) quant_method "mxfp4", whose expert matrices are MXFP4
// blocks and scales with hidden and intermediate sizes multiples of 32.
// Any other quantization is refused rather than read as float weights.
func parseQuantization(f fields, c *Config, moe *arch.MoE) error {
	if !f.present("quantization_config") {
		return nil
	}
	q, ok := f.m["quantization_config"].(map[string]any)
	if !ok {
		return f.errorf("quantization_config", "expected an object, got %s", describe(f.m["quantization_config"]))
	}
	method, _ := q["quant_method"].(string)
	if method != "mxfp4" || !moe.Stacked {
		return f.errorf("quantization_config", "quant_method %q is not supported (only mxfp4, for gpt_oss)", method)
	}
	if c.HiddenSize%32 != 0 || c.ExpertIntermediate%32 != 0 {
		return f.errorf("quantization_config", "mxfp4 needs hidden_size %d and the expert width %d to be multiples of 32", c.HiddenSize, c.ExpertIntermediate)
	}
	c.MXFP4 = true
	return nil
}

// parseGroups reads DeepSeek's group-limited routing: n_group groups of
// equal size, topk_group of them kept, and routed_scaling_factor.
func parseGroups(f fields, c *Config) error {
	var err error
	if c.Groups, err = f.int("n_group", 1, false); err != nil {
		return err
	}
	if c.TopKGroups, err = f.int("topk_group", 1, false); err != nil {
		return err
	}
	if c.Groups <= 0 || c.Experts%c.Groups != 0 || c.Experts/c.Groups < 2 {
		return f.errorf("n_group", "%d groups must divide the %d experts into groups of at least 2", c.Groups, c.Experts)
	}
	if c.TopKGroups <= 0 || c.TopKGroups > c.Groups || c.TopKGroups*(c.Experts/c.Groups) < c.TopK {
		return f.errorf("topk_group", "%d of %d groups of %d experts cannot hold num_experts_per_tok %d", c.TopKGroups, c.Groups, c.Experts/c.Groups, c.TopK)
	}
	if c.RoutedScaling, err = f.float("routed_scaling_factor", 1); err != nil {
		return err
	}
	if !(c.RoutedScaling > 0) {
		return f.errorf("routed_scaling_factor", "must be positive, got %v", c.RoutedScaling)
	}
	return nil
}

// parseMLA reads the multi-head latent attention's widths (arch.Family.MLA):
// q_lora_rank (null: a plain q_proj), kv_lora_rank, qk_nope_head_dim,
// qk_rope_head_dim, v_head_dim and rope_interleave; and the layers past
// num_hidden_layers the checkpoint holds (arch.Family.ExtraLayersKey).
func parseMLA(f fields, c *Config, fam arch.Family) error {
	var err error
	if fam.ExtraLayersKey != "" {
		if c.ExtraLayers, err = f.int(fam.ExtraLayersKey, 0, false); err != nil {
			return err
		}
		if c.ExtraLayers < 0 {
			return f.errorf(fam.ExtraLayersKey, "must not be negative, got %d", c.ExtraLayers)
		}
	}
	if !fam.MLA {
		return nil
	}
	if c.QLoraRank, err = f.int("q_lora_rank", 0, false); err != nil {
		return err
	}
	for _, it := range []struct {
		key string
		dst *int
	}{{"kv_lora_rank", &c.KVLoraRank}, {"qk_nope_head_dim", &c.QKNope}, {"qk_rope_head_dim", &c.QKRope}, {"v_head_dim", &c.VHead}} {
		if *it.dst, err = f.int(it.key, 0, true); err != nil {
			return err
		}
		if *it.dst <= 0 {
			return f.errorf(it.key, "must be positive, got %d", *it.dst)
		}
	}
	if c.QLoraRank < 0 {
		return f.errorf("q_lora_rank", "must be positive or null, got %d", c.QLoraRank)
	}
	if c.QKRope%2 != 0 {
		return f.errorf("qk_rope_head_dim", "must be even (RoPE rotates pairs), got %d", c.QKRope)
	}
	if c.NumKVHeads != c.NumHeads {
		return f.errorf("num_key_value_heads", "%d differs from num_attention_heads %d; latent attention has one key and value per query head", c.NumKVHeads, c.NumHeads)
	}
	// Transformers rotates qk_rope_head_dim values (its head_dim for
	// DeepSeek); the model computes the latent attention's other widths
	// itself.
	c.HeadDim, c.RotaryDims = c.QKRope, c.QKRope
	c.RopeInterleave, err = f.bool("rope_interleave", true)
	return err
}

// parseGemmaKeys reads query_pre_attn_scalar and the soft-capping keys of
// the families that have them (arch.Family.QueryPreAttnScalar, Softcaps).
func parseGemmaKeys(f fields, c *Config, fam arch.Family) error {
	if fam.QueryPreAttnScalar {
		v, err := f.float("query_pre_attn_scalar", fam.DefaultQueryPreAttnScalar)
		if err != nil {
			return err
		}
		if !(v > 0) {
			return f.errorf("query_pre_attn_scalar", "must be positive, got %v", v)
		}
		c.QueryPreAttnScalar = v
	}
	if !fam.Softcaps {
		return nil
	}
	for _, k := range []struct {
		key string
		def float64
		dst *float64
	}{{"attn_logit_softcapping", fam.DefaultAttnSoftcap, &c.AttnSoftcap}, {"final_logit_softcapping", fam.DefaultFinalSoftcap, &c.FinalSoftcap}} {
		v, err := f.float(k.key, k.def)
		if err != nil {
			return err
		}
		if _, set := f.m[k.key]; set && !f.present(k.key) { // explicit null: off
			v = 0
		}
		if v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return f.errorf(k.key, "must be a positive number or null, got %v", v)
		}
		*k.dst = v
	}
	return nil
}

// parseRope reads rope_theta and rope_scaling (or Transformers 5's
// rope_parameters), and for a family whose sliding layers rotate apart
// (arch.Family.LocalRope) rope_local_base_freq, or rope_parameters'
// full_attention and sliding_attention entries.
func parseRope(f fields, c *Config, fam arch.Family) error {
	defTheta := fam.DefaultRopeTheta
	if defTheta == 0 {
		defTheta = 10000
	}
	params := fields{f.path, nil}
	if f.present("rope_parameters") {
		p, ok := f.m["rope_parameters"].(map[string]any)
		if !ok {
			return f.errorf("rope_parameters", "expected an object, got %v", f.m["rope_parameters"])
		}
		params.m = p
	}
	if err := parsePartialRotary(f, params, c, fam); err != nil {
		return err
	}
	if fam.LocalRope {
		if err := parseLocalRope(f, params, c, defTheta); err != nil {
			return err
		}
		if params.present("full_attention") {
			return nil
		}
	}
	var err error
	if f.present("rope_theta") || params.m == nil {
		c.RopeTheta, err = f.float("rope_theta", defTheta)
	} else {
		c.RopeTheta, err = params.float("rope_theta", defTheta)
	}
	if err != nil {
		return err
	}
	if !(c.RopeTheta > 0) {
		return f.errorf("rope_theta", "must be positive, got %v", c.RopeTheta)
	}
	switch {
	case f.present("rope_scaling"):
		o, ok := f.m["rope_scaling"].(map[string]any)
		if !ok {
			return f.errorf("rope_scaling", "expected an object or null, got %v", f.m["rope_scaling"])
		}
		c.RopeScaling, err = ropeScaling(f, c, "rope_scaling", o)
	case params.m != nil:
		c.RopeScaling, err = ropeScaling(f, c, "rope_parameters", params.m)
	}
	return err
}

// parsePartialRotary sets RotaryDims from partial_rotary_factor (in
// config.json or rope_parameters) for a family that has it
// (arch.Family.PartialRotary), and refuses a factor other than 1 elsewhere
// rather than rotate every value.
func parsePartialRotary(f, params fields, c *Config, fam arch.Family) error {
	key, src := "partial_rotary_factor", f
	if !f.present(key) && params.present(key) {
		key, src = "rope_parameters.partial_rotary_factor", params
	}
	p, err := src.float("partial_rotary_factor", 1)
	if err != nil {
		return err
	}
	c.RotaryDims = c.HeadDim
	if p == 1 {
		return nil
	}
	if !fam.PartialRotary {
		return f.errorf(key, "%v is not supported for model_type %s (only 1: every value rotated)", p, c.ModelType)
	}
	d := int(float64(c.HeadDim) * p)
	if !(p > 0 && p <= 1) || d < 2 || d%2 != 0 {
		return f.errorf(key, "%v of head_dim %d gives %d rotary dims; want a factor in (0, 1] giving an even number", p, c.HeadDim, d)
	}
	c.RotaryDims = d
	return nil
}

// parseLocalRope reads the RoPE of a family whose sliding layers rotate
// apart: Transformers 5's rope_parameters {full_attention: {...},
// sliding_attention: {...}} (each a rope object with its rope_theta), or
// rope_local_base_freq (default 10000, no scaling) beside the global keys,
// which parseRope then reads.
func parseLocalRope(f, params fields, c *Config, defTheta float64) error {
	if params.present("full_attention") || params.present("sliding_attention") {
		for _, e := range []struct {
			key   string
			def   float64
			theta *float64
			scale **RopeScaling
		}{{"full_attention", defTheta, &c.RopeTheta, &c.RopeScaling}, {"sliding_attention", 10000, &c.LocalRopeTheta, &c.LocalRopeScaling}} {
			o, ok := params.m[e.key].(map[string]any)
			if !ok {
				return f.errorf("rope_parameters", "%s: expected an object, got %v", e.key, params.m[e.key])
			}
			sub := fields{f.path, o}
			var err error
			if *e.theta, err = sub.float("rope_theta", e.def); err != nil {
				return f.errorf("rope_parameters", "%s.rope_theta: %v", e.key, err)
			}
			if !(*e.theta > 0) {
				return f.errorf("rope_parameters", "%s.rope_theta must be positive, got %v", e.key, *e.theta)
			}
			if *e.scale, err = ropeScaling(f, c, "rope_parameters."+e.key, o); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if c.LocalRopeTheta, err = f.float("rope_local_base_freq", 10000); err != nil {
		return err
	}
	if !(c.LocalRopeTheta > 0) {
		return f.errorf("rope_local_base_freq", "must be positive, got %v", c.LocalRopeTheta)
	}
	return nil
}

// ropeScaling reads a rope_scaling object (or rope_parameters, whose
// rope_theta the caller reads), key naming it in errors: nil for the
// default rotation.
func ropeScaling(f fields, c *Config, key string, obj map[string]any) (*RopeScaling, error) {
	s := fields{f.path, obj}
	typ, err := s.string("rope_type", "")
	if err != nil {
		return nil, f.errorf(key, "rope_type: expected a string, got %v", obj["rope_type"])
	}
	if old, err := s.string("type", ""); err != nil {
		return nil, f.errorf(key, "type: expected a string, got %v", obj["type"])
	} else if old != "" {
		if typ != "" && typ != old {
			return nil, f.errorf(key, "rope_type %q and type %q disagree", typ, old)
		}
		typ = old
	}
	num := func(name string) (float64, error) {
		if !s.present(name) {
			return 0, f.errorf(key, "%s scaling needs %s", typ, name)
		}
		v, err := s.float(name, 0)
		if err != nil {
			return 0, f.errorf(key, "%s: expected a number, got %v", name, obj[name])
		}
		return v, nil
	}
	switch typ {
	case "", "default":
		if key == "rope_scaling" && typ == "" {
			return nil, f.errorf(key, "has no rope_type (supported: llama3, linear, default, or null for none)")
		}
		return nil, nil
	case "linear":
		r := &RopeScaling{Type: typ}
		if r.Factor, err = num("factor"); err != nil {
			return nil, err
		}
		if !(r.Factor >= 1) {
			return nil, f.errorf(key, "factor must be at least 1, got %v", r.Factor)
		}
		return r, nil
	case "llama3":
		r := &RopeScaling{Type: typ}
		if r.Factor, err = num("factor"); err != nil {
			return nil, err
		}
		if r.LowFreqFactor, err = num("low_freq_factor"); err != nil {
			return nil, err
		}
		if r.HighFreqFactor, err = num("high_freq_factor"); err != nil {
			return nil, err
		}
		orig, err := num("original_max_position_embeddings")
		if err != nil {
			return nil, err
		}
		r.OriginalMaxPositions = int(orig)
		if float64(r.OriginalMaxPositions) != orig || orig <= 0 {
			return nil, f.errorf(key, "original_max_position_embeddings must be a positive integer, got %v", orig)
		}
		if !(r.Factor >= 1) {
			return nil, f.errorf(key, "factor must be at least 1, got %v", r.Factor)
		}
		if !(r.LowFreqFactor > 0 && r.HighFreqFactor > r.LowFreqFactor) {
			return nil, f.errorf(key, "needs 0 < low_freq_factor < high_freq_factor, got %v and %v", r.LowFreqFactor, r.HighFreqFactor)
		}
		return r, nil
	case "longrope", "su":
		return longRope(f, c, key, s)
	case "yarn":
		return yarnRope(f, c, key, s)
	}
	return nil, f.errorf(key, "rope type %q is not supported (supported: llama3, linear, longrope, yarn, default, or null for none)", typ)
}

// yarnMScale is YaRN's 0.1·m·ln(scale)+1 (1 for scale <= 1).
func yarnMScale(scale, m float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*m*math.Log(scale) + 1
}

// yarnRope reads a yarn scaling as Transformers computes it: factor (or the
// ratio of max_position_embeddings to original_max_position_embeddings),
// the ramp's beta_fast and beta_slow, and the attention factor from
// attention_factor, or mscale and mscale_all_dim.
func yarnRope(f fields, c *Config, key string, s fields) (*RopeScaling, error) {
	r := &RopeScaling{Type: "yarn"}
	orig, err := s.int("original_max_position_embeddings", 0, false)
	if err == nil && orig == 0 {
		orig, err = f.int("original_max_position_embeddings", 0, false)
	}
	if err != nil {
		return nil, err
	}
	if orig <= 0 {
		return nil, f.errorf(key, "yarn scaling needs original_max_position_embeddings (in the object or config.json)")
	}
	r.OriginalMaxPositions = orig
	if r.Factor, err = s.float("factor", float64(c.MaxPositions)/float64(orig)); err != nil {
		return nil, f.errorf(key, "factor: %v", err)
	}
	if !(r.Factor > 0) {
		return nil, f.errorf(key, "factor must be positive, got %v", r.Factor)
	}
	ms, err := s.float("mscale", 0)
	if err != nil {
		return nil, f.errorf(key, "mscale: %v", err)
	}
	if r.MScaleAll, err = s.float("mscale_all_dim", 0); err != nil {
		return nil, f.errorf(key, "mscale_all_dim: %v", err)
	}
	def := yarnMScale(r.Factor, 1)
	if ms != 0 && r.MScaleAll != 0 {
		def = yarnMScale(r.Factor, ms) / yarnMScale(r.Factor, r.MScaleAll)
	}
	if r.AttnFactor, err = s.float("attention_factor", def); err != nil {
		return nil, f.errorf(key, "attention_factor: %v", err)
	}
	if r.BetaFast, err = s.float("beta_fast", 32); err != nil {
		return nil, f.errorf(key, "beta_fast: %v", err)
	}
	if r.BetaSlow, err = s.float("beta_slow", 1); err != nil {
		return nil, f.errorf(key, "beta_slow: %v", err)
	}
	if r.BetaFast == 0 {
		r.BetaFast = 32 // Transformers reads a 0 as absent ("or 32")
	}
	if r.BetaSlow == 0 {
		r.BetaSlow = 1
	}
	if r.Truncate, err = s.bool("truncate", true); err != nil {
		return nil, f.errorf(key, "truncate: %v", err)
	}
	if !(r.AttnFactor > 0) {
		return nil, f.errorf(key, "attention_factor must be positive, got %v", r.AttnFactor)
	}
	return r, nil
}

// longRope reads a longrope scaling (Phi-3's "su" is its older name) as
// Transformers computes it: original_max_position_embeddings from the
// object or config.json, factor from the object or the ratio of the two
// maxima, attention_factor from the object or from factor, and
// short_factor and long_factor of RotaryDims/2 numbers each.
func longRope(f fields, c *Config, key string, s fields) (*RopeScaling, error) {
	r := &RopeScaling{Type: "longrope"}
	orig, err := s.int("original_max_position_embeddings", 0, false)
	if err == nil && orig == 0 {
		orig, err = f.int("original_max_position_embeddings", 0, false)
	}
	if err != nil {
		return nil, err
	}
	if orig <= 1 {
		return nil, f.errorf(key, "longrope scaling needs original_max_position_embeddings above 1 (in the object or config.json), got %d", orig)
	}
	r.OriginalMaxPositions = orig
	if r.Factor, err = s.float("factor", float64(c.MaxPositions)/float64(orig)); err != nil {
		return nil, f.errorf(key, "factor: %v", err)
	}
	def := 1.0
	if r.Factor > 1 {
		def = math.Sqrt(1 + math.Log(r.Factor)/math.Log(float64(orig)))
	}
	if r.AttnFactor, err = s.float("attention_factor", def); err != nil {
		return nil, f.errorf(key, "attention_factor: %v", err)
	}
	if !(r.AttnFactor > 0) {
		return nil, f.errorf(key, "attention_factor must be positive, got %v", r.AttnFactor)
	}
	for _, l := range []struct {
		name string
		dst  *[]float64
	}{{"short_factor", &r.ShortFactor}, {"long_factor", &r.LongFactor}} {
		list, ok := s.m[l.name].([]any)
		if !ok || len(list) != c.RotaryDims/2 {
			return nil, f.errorf(key, "%s: expected a list of %d numbers (rotary dims %d / 2), got %v", l.name, c.RotaryDims/2, c.RotaryDims, s.m[l.name])
		}
		for i, v := range list {
			x, err := (fields{f.path, map[string]any{"x": v}}).float("x", 0)
			if err != nil || !(x > 0) {
				return nil, f.errorf(key, "%s[%d]: expected a positive number, got %v", l.name, i, v)
			}
			*l.dst = append(*l.dst, x)
		}
	}
	return r, nil
}
