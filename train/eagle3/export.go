package eagle3

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// Export layouts.
const (
	// FormatNative is the EAGLE / SpecForge / SGLang layout
	// (LlamaForCausalLMEagle3, midlayer.* keys), which vLLM also loads.
	FormatNative = "native"
	// FormatSpeculators is the vLLM speculators layout (layers.0.* keys and a
	// speculators_config).
	FormatSpeculators = "speculators"
)

// ExportOptions says how to write a trained draft.
type ExportOptions struct {
	// Format is FormatNative (default) or FormatSpeculators.
	Format string
	// LayerIDs are the Hugging Face hidden_states indices of the three fused
	// target features (low, mid, high). When DefaultLayers is true (they are
	// 2, L/2, L-3) the ids are left out of the config so each engine applies
	// its own default, which selects the same tensors.
	LayerIDs      []int
	DefaultLayers bool
	// TargetName and TargetArchitectures describe the verifier (speculators
	// layout: speculators_config.verifier).
	TargetName          string
	TargetArchitectures []string
	// SpeculativeTokens is the proposal length written in the speculators
	// layout (default 3, the speculators TTT length).
	SpeculativeTokens int
}

// Export writes the draft into dir: config.json and model.safetensors (float32
// weights, d2t int64 offsets, t2d bool; no embedding: the engines use the
// target's). Files are written atomically. (Train writes drafter.json beside
// the export folder, at the top of its output folder.)
//
// Layer ids when they are not the defaults, per engine convention:
//   - native layout: "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids-1}
//     in the SpecForge/EAGLE "output of layer k" convention (HF index - 1),
//     which SGLang reads and shifts by +1; and a top-level
//     "eagle_aux_hidden_state_layer_ids": ids (HF indices), which vLLM reads
//     verbatim from the draft's config.
//   - speculators layout: top-level "eagle_aux_hidden_state_layer_ids": ids (HF
//     indices), which vLLM passes through verbatim.
//
// The speculators layout always writes "norm_before_residual": false (vLLM
// assumes true when the key is absent, which is not this architecture).
func Export(dir string, g Geometry, p *Params, voc *Vocab, opt ExportOptions) error {
	if err := g.Validate(); err != nil {
		return err
	}
	if len(voc.IDs) != g.DraftVocab || len(voc.T2D) != g.Vocab {
		return fmt.Errorf("eagle3: export: vocabulary of %d ids over %d targets does not match geometry N=%d V=%d", len(voc.IDs), len(voc.T2D), g.DraftVocab, g.Vocab)
	}
	format := opt.Format
	if format == "" {
		format = FormatNative
	}
	if format != FormatNative && format != FormatSpeculators {
		return fmt.Errorf("eagle3: export format %q is not %q or %q", format, FormatNative, FormatSpeculators)
	}
	if !opt.DefaultLayers && len(opt.LayerIDs) != 3 {
		return fmt.Errorf("eagle3: export: %d layer ids given, want the 3 fused feature layers (or DefaultLayers)", len(opt.LayerIDs))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("eagle3: export: %w", err)
	}
	var ts []safetensors.Tensor
	for _, s := range specs(g) {
		name := s.name
		if format == FormatSpeculators {
			name = strings.Replace(name, "midlayer.", "layers.0.", 1)
		}
		ts = append(ts, safetensors.F32Tensor(name, s.shape, *s.field(p)))
	}
	ts = append(ts, safetensors.I64Tensor("d2t", []int{len(voc.D2T)}, voc.D2T), safetensors.BoolTensor("t2d", []int{len(voc.T2D)}, voc.T2D))
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("eagle3: export: %w", err)
	}
	var cfg map[string]any
	if format == FormatNative {
		cfg = llamaConfig(g)
		cfg["architectures"] = []string{"LlamaForCausalLMEagle3"}
		cfg["draft_vocab_size"] = g.DraftVocab
		cfg["target_hidden_size"] = g.Hidden
		if !opt.DefaultLayers {
			cfg["eagle_config"] = map[string]any{"eagle_aux_hidden_state_layer_ids": shifted(opt.LayerIDs, -1)}
			cfg["eagle_aux_hidden_state_layer_ids"] = opt.LayerIDs
		}
	} else {
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
		cfg = map[string]any{
			"architectures":            []string{"Eagle3Speculator"},
			"speculators_model_type":   "eagle3",
			"draft_vocab_size":         g.DraftVocab,
			"target_hidden_size":       g.Hidden,
			"norm_before_residual":     false,
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
	}
	return atomicfile.WriteJSON(filepath.Join(dir, "config.json"), cfg)
}

// llamaConfig is the Llama geometry block shared by both layouts.
func llamaConfig(g Geometry) map[string]any {
	c := map[string]any{
		"model_type":              "llama",
		"num_hidden_layers":       1,
		"hidden_size":             g.Hidden,
		"intermediate_size":       g.Intermediate,
		"num_attention_heads":     g.Heads,
		"num_key_value_heads":     g.KVHeads,
		"head_dim":                g.HeadDim,
		"rms_norm_eps":            g.RMSNormEps,
		"rope_theta":              g.RopeTheta,
		"max_position_embeddings": g.MaxPositions,
		"vocab_size":              g.Vocab,
		"hidden_act":              "silu",
		"tie_word_embeddings":     false,
		"attention_bias":          false,
		"mlp_bias":                false,
		"torch_dtype":             "float32",
	}
	if s := g.RopeScaling; s != nil {
		rs := map[string]any{"rope_type": s.Type, "factor": s.Factor}
		if s.Type == "llama3" {
			rs["low_freq_factor"] = s.LowFreqFactor
			rs["high_freq_factor"] = s.HighFreqFactor
			rs["original_max_position_embeddings"] = s.OriginalMaxPositions
		}
		c["rope_scaling"] = rs
	}
	return c
}

func shifted(ids []int, d int) []int {
	out := make([]int, len(ids))
	for i, v := range ids {
		out[i] = v + d
	}
	return out
}
