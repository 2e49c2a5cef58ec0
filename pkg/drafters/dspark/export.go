package dspark

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/pkg/drafters/layerids"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// The export layouts.
const (
	// FormatDeepSpec is DeepSpec's native layout (Qwen3DSparkModel's
	// save_pretrained), which vLLM's dense DSpark path reads: the target's
	// Qwen3-style config with DSpark's keys at the top level and
	// target_layer_ids spelled as output-of-layer ids.
	FormatDeepSpec = "deepspec"
	// FormatSpeculators is speculators' "dspark" layout: the Qwen3 layer
	// config under transformer_layer_config, aux_hidden_state_layer_ids as
	// Hugging Face indices, sample_from_anchor true.
	FormatSpeculators = "speculators"
)

// Files of an export.
const (
	weightsFile = "model.safetensors"
	// MarkovHeadType is the only Markov head this package trains and runs.
	MarkovHeadType = "vanilla"
	architecture   = "Qwen3DSparkModel"
)

// ExportOptions says how to write a draft.
type ExportOptions struct {
	// Format is FormatDeepSpec (default) or FormatSpeculators.
	Format string
	// TargetName and TargetArchitectures describe the verifier (speculators
	// layout).
	TargetName          string
	TargetArchitectures []string
}

// qwen3Config is the Qwen3 decoder geometry both layouts write.
type qwen3Config struct {
	ModelType         string   `json:"model_type"`
	HiddenSize        int      `json:"hidden_size"`
	NumHiddenLayers   int      `json:"num_hidden_layers"`
	NumAttentionHeads int      `json:"num_attention_heads"`
	NumKeyValueHeads  int      `json:"num_key_value_heads"`
	HeadDim           int      `json:"head_dim"`
	IntermediateSize  int      `json:"intermediate_size"`
	HiddenAct         string   `json:"hidden_act"`
	RMSNormEps        float64  `json:"rms_norm_eps"`
	RopeTheta         float64  `json:"rope_theta"`
	MaxPositions      int      `json:"max_position_embeddings"`
	VocabSize         int      `json:"vocab_size"`
	AttentionBias     bool     `json:"attention_bias"`
	LayerTypes        []string `json:"layer_types"`
	TieWordEmbeddings bool     `json:"tie_word_embeddings"`
}

// deepSpecConfig is FormatDeepSpec's config.json.
type deepSpecConfig struct {
	Architectures []string `json:"architectures"`
	qwen3Config
	NumTargetLayers          int    `json:"num_target_layers"`
	BlockSize                int    `json:"block_size"`
	MaskTokenID              int    `json:"mask_token_id"`
	TargetLayerIDs           []int  `json:"target_layer_ids"`
	NumAnchors               int    `json:"num_anchors"`
	MarkovRank               int    `json:"markov_rank"`
	MarkovHeadType           string `json:"markov_head_type"`
	EnableConfidenceHead     bool   `json:"enable_confidence_head"`
	ConfidenceHeadWithMarkov bool   `json:"confidence_head_with_markov"`
	TorchDType               string `json:"torch_dtype"`
}

// speculatorsConfig is FormatSpeculators' config.json. It writes
// sliding_window_non_causal true: vLLM's translator sets every layer's
// causality to its negation (absent: non-causal), and DSpark's block is
// bidirectional; false would make vLLM run every layer causal.
type speculatorsConfig struct {
	Architectures            []string     `json:"architectures"`
	SpeculatorsModelType     string       `json:"speculators_model_type"`
	TransformerLayerConfig   *qwen3Config `json:"transformer_layer_config"`
	DraftVocabSize           int          `json:"draft_vocab_size"`
	BlockSize                int          `json:"block_size"`
	NumAnchors               int          `json:"num_anchors"`
	TargetHiddenSize         int          `json:"target_hidden_size"`
	AuxHiddenStateLayerIDs   []int        `json:"aux_hidden_state_layer_ids"`
	MaskTokenID              int          `json:"mask_token_id"`
	MarkovRank               int          `json:"markov_rank"`
	MarkovHeadType           string       `json:"markov_head_type"`
	EnableConfidenceHead     bool         `json:"enable_confidence_head"`
	ConfidenceHeadWithMarkov bool         `json:"confidence_head_with_markov"`
	SampleFromAnchor         bool         `json:"sample_from_anchor"`
	SlidingWindowNonCausal   bool         `json:"sliding_window_non_causal"`
	NumTargetLayers          int          `json:"num_target_layers"`
	SpeculatorsConfig        any          `json:"speculators_config,omitempty"`
	TorchDType               string       `json:"torch_dtype"`
}

func qwen3Of(g dflash.Geometry) qwen3Config {
	lt := make([]string, g.Layers)
	for i := range lt {
		lt[i] = "full_attention"
	}
	return qwen3Config{ModelType: "qwen3", HiddenSize: g.Hidden, NumHiddenLayers: g.Layers, NumAttentionHeads: g.Heads,
		NumKeyValueHeads: g.KVHeads, HeadDim: g.HeadDim, IntermediateSize: g.Intermediate, HiddenAct: "silu",
		RMSNormEps: g.RMSNormEps, RopeTheta: g.RopeTheta, MaxPositions: g.MaxPositions, VocabSize: g.Vocab, LayerTypes: lt}
}

// views lists every exported tensor of d under its key, as views of its
// values: the backbone (DFlash's set), the draft's own embedding and
// lm_head, and the heads.
func (d *Draft) views() []dflash.Tensor[float32] {
	g := d.Geometry
	ts := d.Params.Tensors(g)
	ts = append(ts, dflash.Tensor[float32]{Name: "embed_tokens.weight", Shape: []int{g.Vocab, g.Hidden}, Data: d.Embed},
		dflash.Tensor[float32]{Name: "lm_head.weight", Shape: []int{g.Vocab, g.Hidden}, Data: d.LMHead})
	return append(ts, d.Heads.Tensors()...)
}

// tensors returns views as float32 safetensors.
func (d *Draft) tensors() []safetensors.Tensor {
	var ts []safetensors.Tensor
	for _, t := range d.views() {
		ts = append(ts, safetensors.F32Tensor(t.Name, t.Shape, t.Data))
	}
	return ts
}

// config returns the layout's config.json of d.
func (d *Draft) config(format string, opt ExportOptions) (any, error) {
	g, sh := d.Geometry, d.Heads.Shape
	switch format {
	case FormatDeepSpec:
		ids, err := layerids.Encode(layerids.DeepSpecTarget, d.LayerIDs)
		if err != nil {
			return nil, err
		}
		return deepSpecConfig{Architectures: []string{architecture}, qwen3Config: qwen3Of(g),
			NumTargetLayers: d.TargetLayers, BlockSize: g.BlockSize, MaskTokenID: g.MaskToken, TargetLayerIDs: ids,
			NumAnchors: d.NumAnchors, MarkovRank: sh.Rank, MarkovHeadType: MarkovHeadType,
			EnableConfidenceHead: sh.Confidence, ConfidenceHeadWithMarkov: sh.WithMarkov, TorchDType: "float32"}, nil
	case FormatSpeculators:
		ids, err := layerids.Encode(layerids.SpeculatorsAux, d.LayerIDs)
		if err != nil {
			return nil, err
		}
		q := qwen3Of(g)
		var verifier any
		if opt.TargetName != "" || opt.TargetArchitectures != nil {
			verifier = map[string]any{"proposal_methods": []any{map[string]any{"proposal_type": "greedy", "speculative_tokens": g.BlockSize}},
				"default_proposal_method": "greedy",
				"verifier":                map[string]any{"name_or_path": opt.TargetName, "architectures": opt.TargetArchitectures}}
		}
		return speculatorsConfig{Architectures: []string{"DSparkSpeculator"}, SpeculatorsModelType: "dspark", TransformerLayerConfig: &q,
			DraftVocabSize: g.Vocab, BlockSize: g.BlockSize, NumAnchors: d.NumAnchors, TargetHiddenSize: g.TargetHidden,
			AuxHiddenStateLayerIDs: ids, MaskTokenID: g.MaskToken, MarkovRank: sh.Rank, MarkovHeadType: MarkovHeadType,
			EnableConfidenceHead: sh.Confidence, ConfidenceHeadWithMarkov: sh.WithMarkov, SampleFromAnchor: true,
			SlidingWindowNonCausal: true, NumTargetLayers: d.TargetLayers, SpeculatorsConfig: verifier, TorchDType: "float32"}, nil
	}
	return nil, fmt.Errorf("dspark: unknown export layout %q (want %s or %s)", format, FormatDeepSpec, FormatSpeculators)
}

// Export writes d into dir in opt's layout: config.json and
// model.safetensors (float32), each atomically, the weights first. A draft
// with a NaN or infinite weight is refused before anything is written.
func Export(dir string, d *Draft, opt ExportOptions) error {
	if err := d.Validate(); err != nil {
		return err
	}
	format := opt.Format
	if format == "" {
		format = FormatDeepSpec
	}
	cfg, err := d.config(format, opt)
	if err != nil {
		return err
	}
	ts := d.tensors()
	if err := safetensors.CheckAllFinite(ts); err != nil {
		return fmt.Errorf("dspark: refusing to export: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("dspark: %w", err)
	}
	if err := drafters.RemoveSums(dir); err != nil {
		return err
	}
	if err := safetensors.WriteFile(filepath.Join(dir, weightsFile), ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("dspark: %w", err)
	}
	return atomicfile.WriteJSON(filepath.Join(dir, drafters.ConfigFile), cfg)
}

// readConfig is both layouts' config.json as read back: DeepSpec's keys at
// the top level, speculators' under their names.
type readConfig struct {
	Architectures []string `json:"architectures"`
	qwen3Config
	SpeculatorsModelType     string       `json:"speculators_model_type"`
	TransformerLayerConfig   *qwen3Config `json:"transformer_layer_config"`
	NumTargetLayers          int          `json:"num_target_layers"`
	BlockSize                int          `json:"block_size"`
	MaskTokenID              *int         `json:"mask_token_id"`
	TargetLayerIDs           []int        `json:"target_layer_ids"`
	AuxHiddenStateLayerIDs   []int        `json:"aux_hidden_state_layer_ids"`
	NumAnchors               int          `json:"num_anchors"`
	MarkovRank               *int         `json:"markov_rank"`
	MarkovHeadType           string       `json:"markov_head_type"`
	EnableConfidenceHead     *bool        `json:"enable_confidence_head"`
	ConfidenceHeadWithMarkov *bool        `json:"confidence_head_with_markov"`
	SampleFromAnchor         *bool        `json:"sample_from_anchor"`
	DraftVocabSize           int          `json:"draft_vocab_size"`
	TargetHiddenSize         int          `json:"target_hidden_size"`
}

// detect returns the layout config c is written in ("" when it is no
// DSpark export).
func (c *readConfig) layout() string {
	switch {
	case c.SpeculatorsModelType == "dspark":
		return FormatSpeculators
	case slices.Contains(c.Architectures, architecture):
		return FormatDeepSpec
	}
	return ""
}

// LoadDraft reads the export of layout in dir, checking config and weights
// against each other exactly: every tensor the config implies present with
// its shape and finite, no other tensor, the layer ids valid for the
// recorded target depth, and the switches this package runs (a vanilla
// Markov head, shifted labels).
func LoadDraft(dir, layout string) (*Draft, error) {
	cfgPath := filepath.Join(dir, drafters.ConfigFile)
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("dspark: %w", err)
	}
	var c readConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("dspark: %s: %w", cfgPath, err)
	}
	if got := c.layout(); got != layout {
		return nil, fmt.Errorf("dspark: %s is a %q export, not %q", cfgPath, got, layout)
	}
	q := c.qwen3Config
	var ids []int
	switch layout {
	case FormatSpeculators:
		if c.TransformerLayerConfig == nil {
			return nil, fmt.Errorf("dspark: %s has no transformer_layer_config", cfgPath)
		}
		q = *c.TransformerLayerConfig
		if c.SampleFromAnchor == nil || !*c.SampleFromAnchor {
			return nil, fmt.Errorf("dspark: %s: sample_from_anchor is not true: this package runs DSpark's shifted labels only (a false one is DFlash's layout, whose slots predict one token later)", cfgPath)
		}
		if c.DraftVocabSize != 0 && c.DraftVocabSize != q.VocabSize {
			return nil, fmt.Errorf("dspark: %s: draft_vocab_size %d below vocab_size %d (a d2t draft vocabulary) is not supported", cfgPath, c.DraftVocabSize, q.VocabSize)
		}
		if ids, err = layerids.Decode(layerids.SpeculatorsAux, c.AuxHiddenStateLayerIDs, c.NumTargetLayers); err != nil {
			return nil, fmt.Errorf("dspark: %s: %w", cfgPath, err)
		}
	default:
		if ids, err = layerids.Decode(layerids.DeepSpecTarget, c.TargetLayerIDs, c.NumTargetLayers); err != nil {
			return nil, fmt.Errorf("dspark: %s: %w", cfgPath, err)
		}
	}
	if c.MarkovRank == nil || c.EnableConfidenceHead == nil || c.MaskTokenID == nil {
		return nil, fmt.Errorf("dspark: %s must say markov_rank, enable_confidence_head and mask_token_id", cfgPath)
	}
	if *c.MarkovRank > 0 && c.MarkovHeadType != MarkovHeadType {
		return nil, fmt.Errorf("dspark: %s: markov_head_type %q: only %q is supported", cfgPath, c.MarkovHeadType, MarkovHeadType)
	}
	sh := HeadShape{Rank: *c.MarkovRank, Confidence: *c.EnableConfidenceHead}
	if sh.Confidence {
		if c.ConfidenceHeadWithMarkov == nil {
			return nil, fmt.Errorf("dspark: %s: enable_confidence_head needs confidence_head_with_markov", cfgPath)
		}
		sh.WithMarkov = *c.ConfidenceHeadWithMarkov
	}
	for i, t := range q.LayerTypes {
		if t != "full_attention" {
			return nil, fmt.Errorf("dspark: %s: layer %d is %q: only full-attention draft layers are supported", cfgPath, i, t)
		}
	}
	th := c.TargetHiddenSize
	if th == 0 {
		th = q.HiddenSize
	}
	g := dflash.Geometry{Hidden: q.HiddenSize, Heads: q.NumAttentionHeads, KVHeads: q.NumKeyValueHeads, HeadDim: q.HeadDim,
		Intermediate: q.IntermediateSize, Layers: q.NumHiddenLayers, RMSNormEps: q.RMSNormEps, RopeTheta: q.RopeTheta,
		MaxPositions: q.MaxPositions, Vocab: q.VocabSize, TargetHidden: th, Features: len(ids),
		BlockSize: c.BlockSize, MaskToken: *c.MaskTokenID}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, cfgPath)
	}
	heads, err := NewHeads(sh, g.Vocab, g.Hidden, nil)
	if err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, cfgPath)
	}
	d := &Draft{Geometry: g, Params: dflash.NewParams(g), Heads: heads, Embed: make([]float32, g.Vocab*g.Hidden),
		LMHead: make([]float32, g.Vocab*g.Hidden), LayerIDs: ids, TargetLayers: c.NumTargetLayers, NumAnchors: c.NumAnchors}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("dspark: loading draft weights: %w", err)
	}
	defer set.Close()
	file := strings.Join(set.Files(), ", ")
	want := d.views()
	names := make(map[string]bool, len(want))
	for _, t := range want {
		names[t.Name] = true
	}
	for _, name := range set.Names() {
		if !names[name] {
			return nil, fmt.Errorf("dspark: %s holds tensor %q, which the draft %s describes does not use", file, name, cfgPath)
		}
	}
	for _, t := range want {
		if _, ok := set.Info(t.Name); !ok {
			return nil, fmt.Errorf("dspark: %s has no tensor %q, which the draft %s describes needs", file, t.Name, cfgPath)
		}
		if err := set.ReadFinite(t.Name, t.Shape, t.Data); err != nil {
			return nil, fmt.Errorf("dspark: %w", err)
		}
	}
	return d, d.Validate()
}
