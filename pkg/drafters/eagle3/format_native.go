package eagle3

import (
	"slices"
)

// FormatNative is the EAGLE / SpecForge / SGLang layout
// (LlamaForCausalLMEagle3, midlayer.* keys), which vLLM also loads.
const FormatNative = "native"

// native is the FormatNative layout.
type native struct{}

func (native) name() string   { return FormatNative }
func (native) prefix() string { return nativePrefix }

// config writes the feature layers, when they are not the engines'
// defaults, both as "eagle_config": {"eagle_aux_hidden_state_layer_ids":
// ids-1} in the SpecForge/EAGLE "output of layer k" convention (HF index -
// 1), which SGLang reads and shifts by +1, and as a top-level
// "eagle_aux_hidden_state_layer_ids": ids (HF indices), which vLLM reads
// verbatim from the draft's config. It writes the four norm switches as
// top-level booleans (fc_norm, norm_before_fc, norm_output,
// norm_before_residual), which vLLM (getattr on the draft's config), SGLang
// and TensorRT-LLM (fc_norm, norm_output) read, and for an EAGLE-3.1 draft
// also TensorRT-LLM's eagle_config.norm_before_fc and
// eagle_config.return_hidden_post_norm.
func (native) config(g Geometry, opt ExportOptions) map[string]any {
	cfg := llamaConfig(g)
	cfg["architectures"] = []string{"LlamaForCausalLMEagle3"}
	cfg["draft_vocab_size"] = g.DraftVocab
	cfg["target_hidden_size"] = g.Hidden
	eagle := map[string]any{}
	if !opt.DefaultLayers {
		eagle["eagle_aux_hidden_state_layer_ids"] = shifted(opt.LayerIDs, -1)
		cfg["eagle_aux_hidden_state_layer_ids"] = opt.LayerIDs
	}
	normsConfig(cfg, g)
	if g.Any() {
		// TensorRT-LLM reads norm_before_fc only from eagle_config, and the
		// post-norm feedback from eagle_config.return_hidden_post_norm or
		// the top-level norm_output. A plain EAGLE-3 draft leaves them out:
		// absent, every engine reads false.
		eagle["norm_before_fc"] = g.NormBeforeFC
		eagle["return_hidden_post_norm"] = g.NormOutput
	}
	if len(eagle) > 0 {
		cfg["eagle_config"] = eagle
	}
	return cfg
}

// detect recognises the layout by its architecture.
func (native) detect(_ string, c *draftConfig) (bool, error) {
	return slices.Contains(c.Architectures, "LlamaForCausalLMEagle3"), nil
}

// geometry: the native config is the decoder layer's own.
func (native) geometry(_ string, c *draftConfig) (*draftConfig, error) { return c, nil }
