// Package checkpoint reads a Hugging Face causal-LM checkpoint folder: config.json,
// generation_config.json and the safetensors weights, for the architecture families
// pkg/arch describes. It validates the configuration, checks that every
// tensor the architecture needs is present with the right shape and that the weights
// hold nothing else, so that the model run (and fingerprinted, pkg/fingerprint) is the
// one the files describe.
package checkpoint

import (
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
	// MaxPositions is max_position_embeddings.
	MaxPositions int
	// VocabSize is the number of embedding rows and logits.
	VocabSize int
	// TieWordEmbeddings means the output projection reuses model.embed_tokens.weight
	// (default false for all four families).
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
	// SlidingWindow is the attention window in tokens for every layer, 0 for none
	// (mistral's sliding_window).
	SlidingWindow int
	// HiddenAct is the MLP activation; only the family's (arch.Family.Activation) is accepted.
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
	// Type is "llama3" or "linear".
	Type string
	// Factor divides the rotation frequencies (linear) or the low frequencies (llama3).
	Factor float64
	// LowFreqFactor and HighFreqFactor bound llama3's smooth interpolation band.
	LowFreqFactor, HighFreqFactor float64
	// OriginalMaxPositions is llama3's original_max_position_embeddings.
	OriginalMaxPositions int
}

// LoadConfig reads and validates a config.json.
func LoadConfig(path string) (*Config, error) {
	m, err := readObject(path)
	if err != nil {
		return nil, err
	}
	return parseConfig(path, m)
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
	if err := parseRope(f, c); err != nil {
		return nil, err
	}
	if c.TieWordEmbeddings, err = f.bool("tie_word_embeddings", false); err != nil {
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
	if c.HiddenAct, err = f.string("hidden_act", fam.Activation); err != nil {
		return nil, err
	}
	if c.HiddenAct != fam.Activation {
		return nil, f.errorf("hidden_act", "%q is not supported (only %s for model_type %s)", c.HiddenAct, fam.Activation, c.ModelType)
	}
	if err := parseSliding(f, c, fam); err != nil {
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

// parseSliding reads the sliding-window keys as the family's Sliding rule
// says: mistral's window for every layer, Qwen's keys only to turn sliding
// layers off.
func parseSliding(f fields, c *Config, fam arch.Family) error {
	switch fam.Sliding {
	case arch.NoSliding:
		return nil
	case arch.SlidingAllLayers:
		w, err := f.int("sliding_window", 4096, false)
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

// parseRope reads rope_theta and rope_scaling (or Transformers 5's rope_parameters).
func parseRope(f fields, c *Config) error {
	params := fields{f.path, nil}
	if f.present("rope_parameters") {
		p, ok := f.m["rope_parameters"].(map[string]any)
		if !ok {
			return f.errorf("rope_parameters", "expected an object, got %v", f.m["rope_parameters"])
		}
		params.m = p
	}
	var err error
	if f.present("rope_theta") || params.m == nil {
		c.RopeTheta, err = f.float("rope_theta", 10000)
	} else {
		c.RopeTheta, err = params.float("rope_theta", 10000)
	}
	if err != nil {
		return err
	}
	if !(c.RopeTheta > 0) {
		return f.errorf("rope_theta", "must be positive, got %v", c.RopeTheta)
	}
	key, obj := "rope_scaling", map[string]any(nil)
	switch {
	case f.present("rope_scaling"):
		o, ok := f.m["rope_scaling"].(map[string]any)
		if !ok {
			return f.errorf("rope_scaling", "expected an object or null, got %v", f.m["rope_scaling"])
		}
		obj = o
	case params.m != nil:
		key, obj = "rope_parameters", params.m
	default:
		return nil
	}
	s := fields{f.path, obj}
	typ, err := s.string("rope_type", "")
	if err != nil {
		return f.errorf(key, "rope_type: expected a string, got %v", obj["rope_type"])
	}
	if old, err := s.string("type", ""); err != nil {
		return f.errorf(key, "type: expected a string, got %v", obj["type"])
	} else if old != "" {
		if typ != "" && typ != old {
			return f.errorf(key, "rope_type %q and type %q disagree", typ, old)
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
			return f.errorf(key, "has no rope_type (supported: llama3, linear, default, or null for none)")
		}
		return nil
	case "linear":
		r := &RopeScaling{Type: typ}
		if r.Factor, err = num("factor"); err != nil {
			return err
		}
		if !(r.Factor >= 1) {
			return f.errorf(key, "factor must be at least 1, got %v", r.Factor)
		}
		c.RopeScaling = r
	case "llama3":
		r := &RopeScaling{Type: typ}
		if r.Factor, err = num("factor"); err != nil {
			return err
		}
		if r.LowFreqFactor, err = num("low_freq_factor"); err != nil {
			return err
		}
		if r.HighFreqFactor, err = num("high_freq_factor"); err != nil {
			return err
		}
		orig, err := num("original_max_position_embeddings")
		if err != nil {
			return err
		}
		r.OriginalMaxPositions = int(orig)
		if float64(r.OriginalMaxPositions) != orig || orig <= 0 {
			return f.errorf(key, "original_max_position_embeddings must be a positive integer, got %v", orig)
		}
		if !(r.Factor >= 1) {
			return f.errorf(key, "factor must be at least 1, got %v", r.Factor)
		}
		if !(r.LowFreqFactor > 0 && r.HighFreqFactor > r.LowFreqFactor) {
			return f.errorf(key, "needs 0 < low_freq_factor < high_freq_factor, got %v and %v", r.LowFreqFactor, r.HighFreqFactor)
		}
		c.RopeScaling = r
	default:
		return f.errorf(key, "rope type %q is not supported (supported: llama3, linear, default, or null for none)", typ)
	}
	return nil
}

// EAGLE3Layers returns the Hugging Face hidden_states indices EAGLE-3 reads by default:
// 2, L/2 and L-3 (integer division), as every engine computes them. Index k >= 1 is the
// residual stream after decoder layer k-1. For small models indices can repeat (L=5
// gives 2, 2, 2), and for L < 4 the last is below 1 (the embedding output or
// negative), which callers must refuse.
func (c *Config) EAGLE3Layers() [3]int {
	return [3]int{2, c.NumLayers / 2, c.NumLayers - 3}
}

// EAGLE3DraftLayers returns the hidden_states indices drafter captures and
// fuses by default: EAGLE3Layers when they are three distinct indices in
// [1, L] (every model of 7 layers or more), else low, middle and last: 1,
// (L+1)/2 and L (index L being the last layer's output before the final
// norm). On a small model the engines' formula repeats a layer (L=5 gives
// 2, 2, 2: one feature three times) or leaves the model; on stories260k the
// distinct layers 1, 3, 5 accepted 0.05-0.13 more in drafter eval. An
// export whose layers differ from EAGLE3Layers writes them out, so every
// engine reads the same ones.
func (c *Config) EAGLE3DraftLayers() [3]int {
	d := c.EAGLE3Layers()
	L := c.NumLayers
	if d[0] >= 1 && d[0] < d[1] && d[1] < d[2] && d[2] <= L {
		return d
	}
	return [3]int{1, (L + 1) / 2, L}
}
