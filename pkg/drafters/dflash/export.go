package dflash

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/layerids"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// The export layouts.
const (
	// FormatNative is z-lab's layout (DFlashDraftModel, dflash_config),
	// which z-lab's dflash, vLLM and SGLang read.
	FormatNative = "native"
	// FormatSpeculators is vLLM speculators' layout
	// (speculators_model_type "dflash").
	FormatSpeculators = "speculators"
)

// WeightsFile is the export's weights file.
const WeightsFile = "model.safetensors"

// NativeArchitecture is the native config's architectures entry.
const NativeArchitecture = "DFlashDraftModel"

// ExportFiles lists the files an export folder holds.
func ExportFiles() []string { return []string{drafters.ConfigFile, WeightsFile} }

// ExportOptions says how to write a draft.
type ExportOptions struct {
	// Format is FormatNative (default) or FormatSpeculators.
	Format string
	// TargetName and TargetArchitectures describe the verifier (the
	// speculators layout's speculators_config.verifier).
	TargetName          string
	TargetArchitectures []string
}

// Export writes d into dir: config.json in the chosen layout and
// model.safetensors with the draft's float32 tensors (no embedding, no
// lm_head: the engines use the target's), each written atomically. A draft
// with a non-finite weight is refused before anything is written.
func Export(dir string, d *Draft, opt ExportOptions) error {
	g := d.Geometry
	if err := checkDraft(d); err != nil {
		return err
	}
	format := opt.Format
	if format == "" {
		format = FormatNative
	}
	var cfg map[string]any
	var err error
	switch format {
	case FormatNative:
		cfg, err = nativeConfig(d)
	case FormatSpeculators:
		cfg, err = speculatorsConfig(d, opt)
	default:
		return fmt.Errorf("dflash: export format %q is not %q or %q", format, FormatNative, FormatSpeculators)
	}
	if err != nil {
		return err
	}
	var ts []safetensors.Tensor
	for _, t := range d.Params.Tensors(g) {
		ts = append(ts, safetensors.F32Tensor(t.Name, t.Shape, t.Data))
	}
	if err := safetensors.CheckAllFinite(ts); err != nil {
		return fmt.Errorf("dflash: refusing to export a draft with non-finite weights into %s (nothing written): %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("dflash: export: %w", err)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, WeightsFile), ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("dflash: export: %w", err)
	}
	return atomicfile.WriteJSON(filepath.Join(dir, drafters.ConfigFile), cfg)
}

// checkDraft checks what an export records: the geometry, the feature
// layers (one per fc input block, within the target), the params' size.
func checkDraft(d *Draft) error {
	g := d.Geometry
	if err := g.Validate(); err != nil {
		return err
	}
	if g.TargetHidden != g.Hidden {
		return fmt.Errorf("dflash: a draft of hidden_size %d over target features of width %d: the exports describe fc's input as hidden_size x the layer count, so the two must be equal", g.Hidden, g.TargetHidden)
	}
	if len(d.LayerIDs) != g.Features {
		return fmt.Errorf("dflash: %d target layer ids for fc's %d feature blocks", len(d.LayerIDs), g.Features)
	}
	if d.TargetLayers <= 0 {
		return fmt.Errorf("dflash: the target's layer count (num_target_layers) is unknown")
	}
	if _, err := layerids.Decode(layerids.SpeculatorsAux, d.LayerIDs, d.TargetLayers); err != nil {
		return fmt.Errorf("dflash: target layers %v: %w", d.LayerIDs, err)
	}
	if d.Params == nil || len(d.Params.All) != NumParams(g) {
		return errors.New("dflash: the draft's parameters do not match its geometry")
	}
	return nil
}

// qwen3Config is the decoder geometry both layouts write (the native
// layout's top level, the speculators layout's transformer_layer_config).
func qwen3Config(g Geometry) map[string]any {
	types := make([]string, g.Layers)
	for i := range types {
		types[i] = "full_attention"
	}
	return map[string]any{
		"model_type":              "qwen3",
		"hidden_size":             g.Hidden,
		"num_hidden_layers":       g.Layers,
		"num_attention_heads":     g.Heads,
		"num_key_value_heads":     g.KVHeads,
		"head_dim":                g.HeadDim,
		"intermediate_size":       g.Intermediate,
		"rms_norm_eps":            g.RMSNormEps,
		"rope_theta":              g.RopeTheta,
		"rope_scaling":            nil,
		"max_position_embeddings": g.MaxPositions,
		"layer_types":             types,
		"sliding_window":          nil,
		"use_sliding_window":      false,
		"vocab_size":              g.Vocab,
		"hidden_act":              "silu",
		"attention_bias":          false,
		"tie_word_embeddings":     false,
		"torch_dtype":             "float32",
		// is_causal is what z-lab's model and vLLM read first for every
		// layer's block attention (before dflash_config.causal and the
		// layer type): written as trained, it leaves no default to guess.
		"is_causal": g.Causal,
	}
}

// nativeConfig is z-lab's config: the Qwen3 geometry, num_target_layers,
// block_size at the top level (SGLang also reads it from dflash_config) and
// dflash_config {mask_token_id, target_layer_ids as output-of-layer ids,
// causal}. causal is what vLLM reads to override every layer's block
// attention; absent it means non-causal, which a bidirectional draft also
// writes explicitly.
func nativeConfig(d *Draft) (map[string]any, error) {
	g := d.Geometry
	ids, err := layerids.Encode(layerids.DFlashTarget, d.LayerIDs)
	if err != nil {
		return nil, fmt.Errorf("dflash: export: %w", err)
	}
	cfg := qwen3Config(g)
	cfg["architectures"] = []string{NativeArchitecture}
	cfg["num_target_layers"] = d.TargetLayers
	cfg["block_size"] = g.BlockSize
	cfg["dflash_config"] = map[string]any{"mask_token_id": g.MaskToken, "target_layer_ids": ids, "block_size": g.BlockSize, "causal": g.Causal}
	return cfg, nil
}

// speculatorsConfig is the speculators config: aux_hidden_state_layer_ids in
// HF indices (vLLM subtracts 1 to rebuild target_layer_ids),
// sliding_window_non_causal = not Causal (vLLM sets dflash_config.causal from
// it for every layer), sample_from_anchor false (DFlash drafts from slot 1
// on), the full vocabulary as draft vocabulary (no d2t).
func speculatorsConfig(d *Draft, opt ExportOptions) (map[string]any, error) {
	g := d.Geometry
	layer := qwen3Config(g)
	layer["architectures"] = []string{"Qwen3ForCausalLM"}
	arch := opt.TargetArchitectures
	if arch == nil {
		arch = []string{}
	}
	return map[string]any{
		"architectures":              []string{"DFlashSpeculator"},
		"speculators_model_type":     "dflash",
		"transformer_layer_config":   layer,
		"draft_vocab_size":           g.Vocab,
		"target_hidden_size":         g.TargetHidden,
		"block_size":                 g.BlockSize,
		"aux_hidden_state_layer_ids": slices.Clone(d.LayerIDs),
		"num_target_layers":          d.TargetLayers,
		"mask_token_id":              g.MaskToken,
		"sliding_window_non_causal":  !g.Causal,
		"sample_from_anchor":         false,
		"speculators_config": map[string]any{
			"algorithm":               "dflash",
			"default_proposal_method": "greedy",
			"proposal_methods": []any{map[string]any{
				"proposal_type": "greedy", "speculative_tokens": g.BlockSize - 1, "accept_tolerance": 0.0, "verifier_accept_k": 1,
			}},
			"verifier": map[string]any{"name_or_path": opt.TargetName, "architectures": arch},
		},
	}, nil
}

// qwen3Fields are the geometry keys read back.
type qwen3Fields struct {
	ModelType    string   `json:"model_type"`
	Hidden       int      `json:"hidden_size"`
	Layers       int      `json:"num_hidden_layers"`
	Heads        int      `json:"num_attention_heads"`
	KVHeads      int      `json:"num_key_value_heads"`
	HeadDim      int      `json:"head_dim"`
	Intermediate int      `json:"intermediate_size"`
	RMSNormEps   float64  `json:"rms_norm_eps"`
	RopeTheta    float64  `json:"rope_theta"`
	RopeScaling  any      `json:"rope_scaling"`
	MaxPositions int      `json:"max_position_embeddings"`
	LayerTypes   []string `json:"layer_types"`
	Vocab        int      `json:"vocab_size"`
	HiddenAct    string   `json:"hidden_act"`
	Bias         bool     `json:"attention_bias"`
	IsCausal     *bool    `json:"is_causal"`
}

// rawConfig is config.json in either layout.
type rawConfig struct {
	qwen3Fields
	Architectures   []string     `json:"architectures"`
	SpeculatorsType string       `json:"speculators_model_type"`
	Layer           *qwen3Fields `json:"transformer_layer_config"`
	NumTarget       int          `json:"num_target_layers"`
	BlockSize       int          `json:"block_size"`
	DFlash          *struct {
		MaskToken *int  `json:"mask_token_id"`
		IDs       []int `json:"target_layer_ids"`
		BlockSize int   `json:"block_size"`
		Causal    *bool `json:"causal"`
	} `json:"dflash_config"`
	// speculators
	AuxIDs       []int `json:"aux_hidden_state_layer_ids"`
	MaskToken    *int  `json:"mask_token_id"`
	DraftVocab   int   `json:"draft_vocab_size"`
	TargetHidden int   `json:"target_hidden_size"`
	SWNonCausal  *bool `json:"sliding_window_non_causal"`
	SampleAnchor *bool `json:"sample_from_anchor"`
}

// detectLayout names the layout of a parsed config, "" when it is not a
// DFlash draft; an error when it is one drafter cannot run.
func detectLayout(cfgPath string, c *rawConfig) (string, error) {
	switch {
	case c.SpeculatorsType == "dflash":
		return FormatSpeculators, nil
	case slices.Contains(c.Architectures, NativeArchitecture):
		return FormatNative, nil
	}
	return "", nil
}

// LoadDraft reads a DFlash export of layout from dir for a target of
// numLayers layers (0: take num_target_layers from the config). Config and
// weights must agree exactly: every tensor the geometry implies is present
// with its shape and finite, and there is no other.
func LoadDraft(dir, layout string, numLayers int) (*Draft, error) {
	cfgPath := filepath.Join(dir, drafters.ConfigFile)
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("dflash: loading draft: %w", err)
	}
	var c rawConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("dflash: %s: %w", cfgPath, err)
	}
	geo := &c.qwen3Fields
	var ids []int
	var mask *int
	block, causal := c.BlockSize, false
	L := numLayers
	if L == 0 {
		L = c.NumTarget
	}
	if c.NumTarget != 0 && numLayers != 0 && c.NumTarget != numLayers {
		return nil, fmt.Errorf("dflash: %s: num_target_layers is %d, the target has %d layers: the draft was trained for another model", cfgPath, c.NumTarget, numLayers)
	}
	switch layout {
	case FormatNative:
		if c.DFlash == nil {
			return nil, fmt.Errorf("dflash: %s: no dflash_config", cfgPath)
		}
		if ids, err = layerids.Decode(layerids.DFlashTarget, c.DFlash.IDs, L); err != nil {
			return nil, fmt.Errorf("dflash: %s: %w", cfgPath, err)
		}
		mask = c.DFlash.MaskToken
		if block == 0 {
			block = c.DFlash.BlockSize
		}
		// z-lab reads is_causal only (absent: full-attention layers are
		// bidirectional); vLLM reads is_causal, then dflash_config.causal.
		switch {
		case c.IsCausal != nil:
			causal = *c.IsCausal
		case c.DFlash.Causal != nil && *c.DFlash.Causal:
			return nil, fmt.Errorf("dflash: %s: dflash_config.causal is true without is_causal: vLLM would run causal blocks and z-lab bidirectional ones", cfgPath)
		}
	case FormatSpeculators:
		if c.Layer == nil {
			return nil, fmt.Errorf("dflash: %s: speculators config without transformer_layer_config", cfgPath)
		}
		geo = c.Layer
		if ids, err = layerids.Decode(layerids.SpeculatorsAux, c.AuxIDs, L); err != nil {
			return nil, fmt.Errorf("dflash: %s: %w", cfgPath, err)
		}
		mask = c.MaskToken
		// vLLM: causal = not sliding_window_non_causal, absent meaning
		// non-causal.
		causal = c.SWNonCausal != nil && !*c.SWNonCausal
		if geo.IsCausal != nil {
			causal = *geo.IsCausal // read before the translated flag
		}
		if c.SampleAnchor != nil && *c.SampleAnchor {
			return nil, fmt.Errorf("dflash: %s: sample_from_anchor true is not DFlash's block (slot 0 is the verified anchor)", cfgPath)
		}
		if c.DraftVocab != 0 && c.DraftVocab != geo.Vocab {
			return nil, fmt.Errorf("dflash: %s: draft_vocab_size %d differs from vocab_size %d: drafter runs DFlash drafts over the full vocabulary", cfgPath, c.DraftVocab, geo.Vocab)
		}
	default:
		return nil, fmt.Errorf("dflash: unknown export layout %q", layout)
	}
	if mask == nil {
		return nil, fmt.Errorf("dflash: %s: no mask_token_id", cfgPath)
	}
	if geo.ModelType != "" && geo.ModelType != "qwen3" {
		return nil, fmt.Errorf("dflash: %s: model_type %q, want qwen3", cfgPath, geo.ModelType)
	}
	if geo.HiddenAct != "" && geo.HiddenAct != "silu" || geo.Bias {
		return nil, fmt.Errorf("dflash: %s: hidden_act %q with attention_bias %v: drafter runs silu without biases", cfgPath, geo.HiddenAct, geo.Bias)
	}
	if geo.RopeScaling != nil {
		return nil, fmt.Errorf("dflash: %s: rope_scaling %v: drafter runs DFlash drafts with plain RoPE", cfgPath, geo.RopeScaling)
	}
	for i, t := range geo.LayerTypes {
		if t != "full_attention" {
			return nil, fmt.Errorf("dflash: %s: layer_types[%d] is %q: drafter runs full-attention DFlash layers only", cfgPath, i, t)
		}
	}
	g := Geometry{Hidden: geo.Hidden, Heads: geo.Heads, KVHeads: geo.KVHeads, HeadDim: geo.HeadDim, Intermediate: geo.Intermediate,
		Layers: geo.Layers, RMSNormEps: geo.RMSNormEps, RopeTheta: geo.RopeTheta, MaxPositions: geo.MaxPositions, Vocab: geo.Vocab,
		TargetHidden: geo.Hidden, Features: len(ids), BlockSize: block, MaskToken: *mask, Causal: causal}
	if g.HeadDim == 0 && g.Heads > 0 {
		g.HeadDim = g.Hidden / g.Heads
	}
	if g.KVHeads == 0 {
		g.KVHeads = g.Heads
	}
	if c.TargetHidden != 0 && c.TargetHidden != g.Hidden {
		return nil, fmt.Errorf("dflash: %s: target_hidden_size %d differs from hidden_size %d, which drafter does not run", cfgPath, c.TargetHidden, g.Hidden)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, cfgPath)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("dflash: loading draft weights: %w", err)
	}
	defer set.Close()
	file := strings.Join(set.Files(), ", ")
	p := NewParams(g)
	ts := p.Tensors(g)
	names := make(map[string]bool, len(ts))
	for _, t := range ts {
		names[t.Name] = true
	}
	for _, name := range set.Names() {
		if !names[name] {
			why := "it is not a DFlash draft tensor of this geometry"
			if strings.HasSuffix(name, "embed_tokens.weight") || name == "lm_head.weight" {
				why = "drafter runs the draft on the target's embedding and lm_head, as the z-lab layout ships neither"
			}
			return nil, fmt.Errorf("dflash: %s holds tensor %q, which the draft %s describes does not use: %s", file, name, cfgPath, why)
		}
	}
	for _, t := range ts {
		if _, ok := set.Info(t.Name); !ok {
			return nil, fmt.Errorf("dflash: %s has no tensor %q, which the draft %s describes needs", file, t.Name, cfgPath)
		}
		if err := set.ReadFinite(t.Name, t.Shape, t.Data); err != nil {
			return nil, fmt.Errorf("dflash: %w", err)
		}
	}
	return &Draft{Geometry: g, Params: p, LayerIDs: ids, TargetLayers: L}, nil
}
