package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/drafter-ai/drafter/pkg/arch"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// Checkpoint is an opened model folder whose weights match its configuration.
type Checkpoint struct {
	// Dir is the folder it was opened from.
	Dir string
	// Config is the parsed config.json.
	Config *Config
	// Generation is the parsed generation_config.json, nil when the folder has none.
	Generation *GenerationConfig
	// Weights holds the memory-mapped tensors; Close releases them.
	Weights *safetensors.Set
}

// Open reads config.json and, when present, generation_config.json from dir, opens the
// safetensors weights, and checks them against the configuration (CheckWeights).
func Open(dir string) (*Checkpoint, error) {
	cfgPath := filepath.Join(dir, "config.json")
	if _, err := os.Stat(cfgPath); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: config.json is missing in %s", dir)
	}
	cfg, err := LoadConfig(cfgPath)
	if err != nil {
		return nil, err
	}
	ck := &Checkpoint{Dir: dir, Config: cfg}
	genPath := filepath.Join(dir, "generation_config.json")
	if _, err := os.Stat(genPath); err == nil {
		if ck.Generation, err = LoadGenerationConfig(genPath); err != nil {
			return nil, err
		}
	}
	if ck.Weights, err = safetensors.OpenDir(dir); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := CheckWeights(cfg, ck.Weights); err != nil {
		ck.Weights.Close()
		return nil, err
	}
	return ck, nil
}

// CheckWeights verifies that w holds every tensor of cfg.Tensors (its family's
// arch.Family.Tensors) with the right shape and a float dtype, and nothing else (see
// checkUnused for the tensors a checkpoint may hold beyond them): a config that describes fewer layers or options than the weights
// hold would otherwise run another model than the file. Errors name the tensors, the
// files and what config.json says.
func CheckWeights(cfg *Config, w *safetensors.Set) error {
	fam, ok := cfg.Family()
	if !ok {
		return fmt.Errorf("checkpoint: %s: model_type %q is not supported (supported: %s)", cfg.Path, cfg.ModelType, arch.Supported())
	}
	specs := fam.Tensors(cfg.Dims())
	for _, t := range specs {
		in, ok := w.Info(t.Name)
		if !ok {
			return fmt.Errorf("checkpoint: tensor %s is missing from %s (needed by %s with %s)",
				t.Name, strings.Join(w.Files(), ", "), cfg.ModelType, describeOptions(cfg))
		}
		if !slices.Equal(in.Shape, t.Shape) {
			return fmt.Errorf("checkpoint: tensor %s in %s has shape %s, expected %s from %s",
				t.Name, in.File, safetensors.ShapeString(in.Shape), safetensors.ShapeString(t.Shape), cfg.Path)
		}
		if mxfp4Bytes(cfg, t.Role) {
			if in.DType != safetensors.U8 {
				return fmt.Errorf("checkpoint: tensor %s in %s has dtype %s, expected U8 (MXFP4 blocks and scales, quantization_config in %s)", t.Name, in.File, in.DType, cfg.Path)
			}
		} else if !in.DType.IsFloat() {
			return fmt.Errorf("checkpoint: tensor %s in %s has dtype %s, expected F32, F16 or BF16", t.Name, in.File, in.DType)
		}
	}
	return checkUnused(cfg, fam, w, specs)
}

// mxfp4Bytes reports whether a tensor of role r is stored as MXFP4 bytes
// (gpt-oss's expert blocks and scales) under cfg.
func mxfp4Bytes(cfg *Config, r arch.Role) bool {
	switch r {
	case arch.ExpertsGateUp, arch.ExpertsGateUpScales, arch.ExpertsDown, arch.ExpertsDownScales:
		return cfg.MXFP4
	}
	return false
}

// describeOptions summarises the options that decide which tensors exist.
func describeOptions(c *Config) string {
	return fmt.Sprintf("tie_word_embeddings=%v, q/k/v bias=%v, o_proj bias=%v, qk norm=%v",
		c.TieWordEmbeddings, c.AttentionBias, c.OProjBias, c.QKNorm)
}

// Close releases the memory-mapped weights.
func (ck *Checkpoint) Close() error { return ck.Weights.Close() }

// Canonical returns the configuration as "key=value" lines in a fixed order, the form
// the model fingerprint (package fingerprint) hashes. It covers every parsed field except Path, Raw and DType.
func (c *Config) Canonical() []byte {
	var b strings.Builder
	kv := func(k, v string) { b.WriteString(k + "=" + v + "\n") }
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	ids := func(v []int) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.Itoa(x)
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	kv("model_type", c.ModelType)
	kv("architectures", strings.Join(c.Architectures, ","))
	kv("hidden_size", strconv.Itoa(c.HiddenSize))
	kv("intermediate_size", strconv.Itoa(c.IntermediateSize))
	kv("num_hidden_layers", strconv.Itoa(c.NumLayers))
	kv("num_attention_heads", strconv.Itoa(c.NumHeads))
	kv("num_key_value_heads", strconv.Itoa(c.NumKVHeads))
	kv("head_dim", strconv.Itoa(c.HeadDim))
	kv("rms_norm_eps", num(c.RMSNormEps))
	kv("rope_theta", num(c.RopeTheta))
	if r := c.RopeScaling; r != nil {
		kv("rope_scaling", fmt.Sprintf("%s,%s,%s,%s,%d", r.Type, num(r.Factor), num(r.LowFreqFactor), num(r.HighFreqFactor), r.OriginalMaxPositions))
	} else {
		kv("rope_scaling", "none")
	}
	kv("max_position_embeddings", strconv.Itoa(c.MaxPositions))
	kv("vocab_size", strconv.Itoa(c.VocabSize))
	kv("tie_word_embeddings", strconv.FormatBool(c.TieWordEmbeddings))
	kv("qkv_bias", strconv.FormatBool(c.AttentionBias))
	kv("o_proj_bias", strconv.FormatBool(c.OProjBias))
	kv("qk_norm", strconv.FormatBool(c.QKNorm))
	kv("sliding_window", strconv.Itoa(c.SlidingWindow))
	kv("hidden_act", c.HiddenAct)
	kv("bos_token_id", ids(c.BOS))
	kv("eos_token_id", ids(c.EOS))
	// The keys of the later families, only where they are set, so that the
	// fingerprints of the families before them stay what they were.
	if fam, ok := c.Family(); ok && fam.Sliding == arch.SlidingLayerTypes {
		kv("windows", ids(c.Windows))
	}
	if c.LocalRopeTheta != 0 {
		kv("local_rope_theta", num(c.LocalRopeTheta))
		if r := c.LocalRopeScaling; r != nil {
			kv("local_rope_scaling", fmt.Sprintf("%s,%s,%s,%s,%d", r.Type, num(r.Factor), num(r.LowFreqFactor), num(r.HighFreqFactor), r.OriginalMaxPositions))
		}
	}
	if c.RotaryDims != c.HeadDim {
		kv("rotary_dims", strconv.Itoa(c.RotaryDims))
	}
	if r := c.RopeScaling; r != nil && r.Type == "longrope" {
		fs := func(v []float64) string {
			s := make([]string, len(v))
			for i, x := range v {
				s[i] = num(x)
			}
			return strings.Join(s, ",")
		}
		kv("longrope", num(r.AttnFactor)+";"+fs(r.ShortFactor)+";"+fs(r.LongFactor))
	}
	if c.Experts != 0 {
		sparse := make([]string, len(c.Sparse))
		for l, sp := range c.Sparse {
			sparse[l] = strconv.FormatBool(sp)
		}
		kv("moe", fmt.Sprintf("%d,%d,%d,%v;%s", c.Experts, c.TopK, c.ExpertIntermediate, c.NormTopK, strings.Join(sparse, ",")))
		if c.Groups != 0 || c.SharedIntermediate != 0 || c.RoutedScaling != 1 {
			kv("moe_routing", fmt.Sprintf("%d,%d,%s,%d", c.Groups, c.TopKGroups, num(c.RoutedScaling), c.SharedIntermediate))
		}
	}
	if c.SwiGLULimit != 0 || c.MXFP4 {
		kv("gpt_oss", fmt.Sprintf("%s,%s,%v", num(c.SwiGLUAlpha), num(c.SwiGLULimit), c.MXFP4))
	}
	if c.KVLoraRank != 0 {
		kv("mla", fmt.Sprintf("%d,%d,%d,%d,%d,%v", c.QLoraRank, c.KVLoraRank, c.QKNope, c.QKRope, c.VHead, c.RopeInterleave))
	}
	if r := c.RopeScaling; r != nil && r.Type == "yarn" {
		kv("yarn", fmt.Sprintf("%s,%s,%s,%s,%v", num(r.AttnFactor), num(r.BetaFast), num(r.BetaSlow), num(r.MScaleAll), r.Truncate))
	}
	if c.QueryPreAttnScalar != 0 {
		kv("query_pre_attn_scalar", num(c.QueryPreAttnScalar))
	}
	if c.AttnSoftcap != 0 || c.FinalSoftcap != 0 {
		kv("softcaps", num(c.AttnSoftcap)+","+num(c.FinalSoftcap))
	}
	return []byte(b.String())
}
