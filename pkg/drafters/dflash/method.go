package dflash

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/layerids"
	"github.com/drafter-ai/drafter/pkg/model"
)

// Kind names the method.
const Kind drafters.Kind = "dflash"

// Method is the DFlash method (drafters.Method).
type Method struct{}

// Kind implements drafters.Method.
func (Method) Kind() drafters.Kind { return Kind }

// Layouts implements drafters.Method: the native layout first.
func (Method) Layouts() []string { return []string{FormatNative, FormatSpeculators} }

// Detect implements drafters.Method: by the config's architectures or
// speculators_model_type.
func (Method) Detect(dir string) (string, error) {
	var c rawConfig
	found, err := drafters.ReadConfig(dir, &c)
	if err != nil || !found {
		return "", err
	}
	layout, err := detectLayout(filepath.Join(dir, drafters.ConfigFile), &c)
	if err != nil || layout == "" {
		return "", err
	}
	if !drafters.FileExists(filepath.Join(dir, WeightsFile)) {
		return "", fmt.Errorf("dflash: %s describes a DFlash draft but %s is missing", filepath.Join(dir, drafters.ConfigFile), WeightsFile)
	}
	return layout, nil
}

// Wants implements drafters.Method.
func (Method) Wants() string {
	return "DFlash drafts (config.json with architectures DFlashDraftModel or speculators_model_type dflash)"
}

// Load implements drafters.Method.
func (Method) Load(dir, layout string, m *model.Model, prov *drafters.Provenance) (drafters.Drafter, error) {
	d, err := LoadDraft(dir, layout, m.NumLayers())
	if err != nil {
		return nil, fmt.Errorf("loading the DFlash draft: %w", err)
	}
	if err := checkProvenance(prov, dir, layout, d); err != nil {
		return nil, err
	}
	dr, err := NewDrafter(d, m)
	if err != nil {
		return nil, fmt.Errorf("%w (draft from %s)", err, dir)
	}
	return dr, nil
}

// checkProvenance compares an export with the drafter.json found for it.
func checkProvenance(prov *drafters.Provenance, dir, layout string, d *Draft) error {
	if prov == nil {
		return nil
	}
	var p struct {
		drafters.Common
		Format        *string `json:"format"`
		FeatureLayers []int   `json:"feature_layers"`
		BlockSize     *int    `json:"block_size"`
		MaskToken     *int    `json:"mask_token_id"`
		DraftLayers   *int    `json:"draft_layers"`
	}
	if err := prov.Decode(&p); err != nil {
		return err
	}
	cfg := filepath.Join(dir, drafters.ConfigFile)
	g := d.Geometry
	var layers any
	if p.FeatureLayers != nil {
		layers = p.FeatureLayers
	}
	return prov.Agree([]drafters.Recorded{
		{Key: "method", Recorded: drafters.Value(p.Method), Export: string(Kind), File: dir},
		{Key: "format", Recorded: drafters.Value(p.Format), Export: layout, File: cfg},
		{Key: "hidden_size", Recorded: drafters.Value(p.Hidden), Export: g.Hidden, File: cfg},
		{Key: "vocab_size", Recorded: drafters.Value(p.Vocab), Export: g.Vocab, File: cfg},
		{Key: "feature_layers", Recorded: layers, Export: d.LayerIDs, File: cfg},
		{Key: "block_size", Recorded: drafters.Value(p.BlockSize), Export: g.BlockSize, File: cfg},
		{Key: "mask_token_id", Recorded: drafters.Value(p.MaskToken), Export: g.MaskToken, File: cfg},
		{Key: "draft_layers", Recorded: drafters.Value(p.DraftLayers), Export: g.Layers, File: cfg},
	})
}

// Shape implements drafters.Method.
func (Method) Shape(d drafters.Decoding, _ int) string {
	if !d.Sampling.Greedy() {
		return fmt.Sprintf("DFlash block: a chain of %d tokens drafted in one forward, each sampled from its slot's draft distribution", d.Depth)
	}
	return fmt.Sprintf("DFlash block: a chain of %d tokens drafted in one forward", d.Depth)
}

// Drafter is a DFlash draft loaded for a target model (drafters.Drafter).
type Drafter struct {
	m   *model.Model
	tgt Target
	d   *Draft
}

// NewDrafter wraps a draft for target m, refusing one of another width,
// vocabulary or depth.
func NewDrafter(d *Draft, m *model.Model) (*Drafter, error) {
	g := d.Geometry
	if g.TargetHidden != m.HiddenSize() || g.Vocab != m.VocabSize() {
		return nil, fmt.Errorf("the DFlash draft does not fit the target: it reads features of width %d over vocab_size %d, the target's are %d and %d (was it trained for another model?)",
			g.TargetHidden, g.Vocab, m.HiddenSize(), m.VocabSize())
	}
	if g.Hidden != m.HiddenSize() {
		return nil, fmt.Errorf("the DFlash draft's hidden_size %d differs from the target's %d, whose embedding and lm_head it uses", g.Hidden, m.HiddenSize())
	}
	for _, id := range d.LayerIDs {
		if id < 0 || id > m.NumLayers() {
			return nil, fmt.Errorf("the DFlash draft reads target hidden state %d, which a target of %d layers does not have", id, m.NumLayers())
		}
	}
	return &Drafter{m: m, tgt: ModelTarget(m), d: d}, nil
}

// Draft returns the drafter's draft.
func (d *Drafter) Draft() *Draft { return d.d }

// Kind implements drafters.Drafter.
func (d *Drafter) Kind() drafters.Kind { return Kind }

// Configure implements drafters.Drafter: a chain of Depth tokens, at most
// the block's B-1 drafts (default all of them). Trees do not apply: one
// block forward gives one token per slot.
func (d *Drafter) Configure(c drafters.Decoding) (drafters.Decoding, error) {
	if err := drafters.RequireFixed(c, "DFlash"); err != nil {
		return c, err
	}
	if c.Tree != nil || c.Mode == drafters.ModeTree {
		return c, drafters.Refuse([]drafters.Setting{drafters.SettingMode}, "DFlash drafts a chain (one token per block slot), not a tree")
	}
	if c.TopK != 0 || c.TotalTokens != 0 {
		return c, drafters.Refuse([]drafters.Setting{drafters.SettingTopK, drafters.SettingTotalTokens}, "apply to trees, not to DFlash's chain")
	}
	c.Mode = drafters.ModeChain
	B := d.d.Geometry.BlockSize
	if c.Depth == 0 {
		c.Depth = B - 1
	}
	if c.Depth < 1 || c.Depth > B-1 {
		return c, drafters.Refuse([]drafters.Setting{drafters.SettingDepth}, "a DFlash block of size %d drafts 1 to %d tokens, not %d", B, B-1, c.Depth)
	}
	return c, nil
}

// NewProposer implements drafters.Drafter.
func (d *Drafter) NewProposer(c drafters.Decoding, opt drafters.ProposerOptions) (drafters.Proposer, error) {
	return newProposer(d.d, d.tgt, d.m.NumLayers(), c, opt.Capacity, opt.RNG)
}

// DefaultDraftLayers is the draft's default depth: on stories260k 3 layers
// accepted more than 2 (docs/acceptance.md); the reference recipes use 5 on
// 8B targets.
const DefaultDraftLayers = 3

// DefaultLayers returns the Hugging Face hidden_states indices DFlash fuses
// by default for a target of L layers and a draft of n layers: z-lab's
// output-of-layer ids (layerids.DFlashDefault), read as HF indices, when
// they are distinct. On a small target z-lab's formula repeats a layer (5
// layers, 3 draft layers: ids 1, 2, 2), which no engine serves: vLLM and
// SGLang capture each target layer once, in order, so fc would get fewer
// features than it was trained on (check-export refuses such an export).
// There the n layers are spread evenly over 1..L instead (5 layers, 3 draft
// layers: 1, 3, 5, EAGLE-3's small-target layers), and the export writes
// them out. More draft layers than target layers cannot be distinct.
func DefaultLayers(L, n int) ([]int, error) {
	hf, err := layerids.Decode(layerids.DFlashTarget, layerids.DFlashDefault(L, n), L)
	if err != nil {
		return nil, fmt.Errorf("dflash: z-lab's default target layers for %d draft layers on a %d-layer target: %w", n, L, err)
	}
	if slices.IsSorted(hf) && len(slices.Compact(slices.Clone(hf))) == len(hf) {
		return hf, nil
	}
	if n > L {
		return nil, fmt.Errorf("dflash: %d draft layers need as many distinct target layers, and the target has %d; choose --draft-layers or --layers", n, L)
	}
	for i := range hf {
		hf[i] = 1 + (2*i*(L-1)+n-1)/(2*(n-1)) // 1 + round(i(L-1)/(n-1)), half up
	}
	return hf, nil
}

// Capture implements drafters.Method: the default layers of the default
// draft depth, and the final-norm state (the held-out metric's target).
func (Method) Capture(c *checkpoint.Config) drafters.CaptureNeeds {
	hf, _ := DefaultLayers(c.NumLayers, DefaultDraftLayers) // none for a target too small for them: drafter train dflash says why
	return drafters.CaptureNeeds{Layers: hf, FinalNorm: true}
}
