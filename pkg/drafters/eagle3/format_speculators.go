package eagle3

import "fmt"

// FormatSpeculators is the vLLM speculators layout (layers.0.* keys and a
// speculators_config).
const FormatSpeculators = "speculators"

// speculators is the FormatSpeculators layout.
type speculators struct{}

func (speculators) name() string   { return FormatSpeculators }
func (speculators) prefix() string { return "layers.0." }

// config writes the decoder layer's geometry as transformer_layer_config,
// the feature layers (when they are not the engines' defaults) as a
// top-level "eagle_aux_hidden_state_layer_ids": ids (HF indices), which vLLM
// passes through verbatim, and the four norm switches as top-level booleans,
// which vLLM's update_eagle3 copies into the draft's config: always
// "norm_before_residual": false (vLLM assumes true when the key is absent,
// which is not this architecture), and fc_norm, norm_before_fc and
// norm_output as trained (vLLM assumes false for each when absent, as does a
// vLLM that predates them whatever they say).
func (speculators) config(g Geometry, opt ExportOptions) map[string]any {
	k := opt.SpeculativeTokens
	if k <= 0 {
		k = 3
	}
	arch := opt.TargetArchitectures
	if arch == nil {
		arch = []string{}
	}
	layer := llamaConfig(g)
	layer["architectures"] = []string{"LlamaForCausalLM"}
	cfg := map[string]any{
		"architectures":            []string{"Eagle3Speculator"},
		"speculators_model_type":   "eagle3",
		"draft_vocab_size":         g.DraftVocab,
		"target_hidden_size":       g.Hidden,
		"transformer_layer_config": layer,
		"speculators_config": map[string]any{
			"algorithm":               "eagle3",
			"default_proposal_method": "greedy",
			"proposal_methods": []any{map[string]any{
				"proposal_type": "greedy", "speculative_tokens": k, "accept_tolerance": 0.0, "verifier_accept_k": 1,
			}},
			"verifier": map[string]any{"name_or_path": opt.TargetName, "architectures": arch},
		},
	}
	if !opt.DefaultLayers {
		cfg["eagle_aux_hidden_state_layer_ids"] = opt.LayerIDs
	}
	normsConfig(cfg, g)
	return cfg
}

// detect recognises the layout by its speculators_model_type, of which
// drafter runs eagle3 only.
func (speculators) detect(cfgPath string, c *draftConfig) (bool, error) {
	switch c.SpeculatorsType {
	case "", "dflash", "dspark": // none, or another method's (its own Detect reads it)
		return false, nil
	case "eagle3":
		return true, nil
	}
	return false, fmt.Errorf("%s: speculators_model_type %q is not supported (want eagle3)", cfgPath, c.SpeculatorsType)
}

// geometry checks the speculator's type and residual placement and returns
// its transformer_layer_config.
func (speculators) geometry(cfgPath string, c *draftConfig) (*draftConfig, error) {
	if c.SpeculatorsType != "eagle3" {
		return nil, fmt.Errorf("eagle3: %s: speculators_model_type %q is not eagle3", cfgPath, c.SpeculatorsType)
	}
	if c.Layer == nil {
		return nil, fmt.Errorf("eagle3: %s: speculators config without transformer_layer_config", cfgPath)
	}
	return c.Layer, nil
}
