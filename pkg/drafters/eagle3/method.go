package eagle3

import (
	"fmt"
	"path/filepath"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/model"
)

// Kind names the method.
const Kind drafters.Kind = "eagle3"

// Defaults of a decoding setup's zero fields (Drafter.Configure).
const (
	DefaultChainDepth = 4  // tokens of a chain
	DefaultTreeDepth  = 7  // expansion rounds of EAGLE-2's tree
	DefaultTreeTopK   = 8  // children per expanded node
	DefaultTreeTotal  = 60 // nodes of the tree, its root included
)

// EngineDefaultLayers are the Hugging Face hidden_states indices the engines
// fuse when a draft names none: 2, L/2 and L-3 for a target of L layers
// (integer division). Index k >= 1 is the residual stream after decoder
// layer k-1. For small models they repeat (L=5 gives 2, 2, 2), and below 4
// layers the last is the embedding output or negative.
func EngineDefaultLayers(L int) []int { return []int{2, L / 2, L - 3} }

// DefaultLayers returns the hidden_states indices drafter fuses by default
// for a target of L layers: EngineDefaultLayers when they are three distinct
// indices in [1, L] (every model of 7 layers or more), else low, middle and
// last: 1, (L+1)/2 and L (index L being the last layer's output before the
// final norm). On a small model the engines' formula repeats a layer or
// leaves the model; on stories260k the distinct layers 1, 3, 5 accepted
// 0.05-0.13 more in drafter eval. An export whose layers differ from the
// engines' defaults writes them out, so every engine reads the same ones.
func DefaultLayers(L int) [3]int {
	d := EngineDefaultLayers(L)
	if d[0] >= 1 && d[0] < d[1] && d[1] < d[2] && d[2] <= L {
		return [3]int(d)
	}
	return [3]int{1, (L + 1) / 2, L}
}

// Method is the EAGLE-3 method (drafters.Method).
type Method struct{}

// Kind implements drafters.Method.
func (Method) Kind() drafters.Kind { return Kind }

// Layouts implements drafters.Method: the native layout first.
func (Method) Layouts() []string { return []string{FormatNative, FormatSpeculators} }

// Detect implements drafters.Method: the layout is in config.json.
func (Method) Detect(dir string) (string, error) {
	var c draftConfig
	found, err := drafters.ReadConfig(dir, &c)
	if err != nil || !found {
		return "", err
	}
	cfgPath := filepath.Join(dir, drafters.ConfigFile)
	for _, f := range formats() {
		ok, err := f.detect(cfgPath, &c)
		if err != nil {
			return "", err
		}
		if ok {
			return f.name(), nil
		}
	}
	return "", nil
}

// Wants implements drafters.Method.
func (Method) Wants() string {
	return "EAGLE-3 drafts (config.json with architectures LlamaForCausalLMEagle3 or speculators_model_type eagle3)"
}

// Load implements drafters.Method: the export's config and weights must
// agree exactly (see LoadDraft), the drafter.json found for it must describe
// it (method, layout, sizes, feature layers, variant and norm switches) and
// it must fit the target.
func (Method) Load(dir, layout string, m *model.Model, prov *drafters.Provenance) (drafters.Drafter, error) {
	f := formatNamed(layout)
	if f == nil {
		return nil, fmt.Errorf("eagle3: unknown export layout %q", layout)
	}
	dr, err := loadDraft(dir, f, m.Embed, m.Device())
	if err != nil {
		return nil, fmt.Errorf("loading the EAGLE-3 draft: %w", err)
	}
	if err := checkProvenance(prov, dir, layout, dr); err != nil {
		return nil, err
	}
	d, err := NewDrafter(dr, m)
	if err != nil {
		return nil, fmt.Errorf("%w (draft from %s)", err, dir)
	}
	return d, nil
}

// checkProvenance compares an export of layout in dir with the drafter.json
// found for it (nil: nothing to compare).
func checkProvenance(prov *drafters.Provenance, dir, layout string, d *Draft) error {
	if prov == nil {
		return nil
	}
	var p struct {
		drafters.Common
		Format        *string `json:"format"`
		DraftVocab    *int    `json:"draft_vocab_size"`
		FeatureLayers []int   `json:"feature_layers"`
		DefaultLayers *bool   `json:"default_feature_layers"`
		Variant       *string `json:"variant"`
		FCNorm        *bool   `json:"fc_norm"`
		NormBeforeFC  *bool   `json:"norm_before_fc"`
		NormOutput    *bool   `json:"norm_output"`
	}
	if err := prov.Decode(&p); err != nil {
		return err
	}
	cfg := filepath.Join(dir, drafters.ConfigFile)
	g := d.Geometry
	var layers any
	switch {
	case p.DefaultLayers != nil && *p.DefaultLayers:
		layers = []int(nil)
	case p.FeatureLayers != nil:
		layers = p.FeatureLayers
	}
	return prov.Agree([]drafters.Recorded{
		{Key: "method", Recorded: drafters.Value(p.Method), Export: string(Kind), File: dir},
		{Key: "format", Recorded: drafters.Value(p.Format), Export: layout, File: cfg},
		{Key: "hidden_size", Recorded: drafters.Value(p.Hidden), Export: g.Hidden, File: cfg},
		{Key: "vocab_size", Recorded: drafters.Value(p.Vocab), Export: g.Vocab, File: cfg},
		{Key: "draft_vocab_size", Recorded: drafters.Value(p.DraftVocab), Export: g.DraftVocab, File: cfg},
		{Key: "feature_layers", Recorded: layers, Export: d.LayerIDs, File: cfg},
		// A drafter.json written before the EAGLE-3.1 switches has none of
		// these: its draft is plain EAGLE-3, which LoadDraft's reading of a
		// config without them also gives.
		{Key: "variant", Recorded: drafters.Value(p.Variant), Export: g.Variant(), File: cfg},
		{Key: fcNormKey, Recorded: drafters.Value(p.FCNorm), Export: g.FCNorm, File: cfg},
		{Key: normBeforeFCKey, Recorded: drafters.Value(p.NormBeforeFC), Export: g.NormBeforeFC, File: cfg},
		{Key: normOutputKey, Recorded: drafters.Value(p.NormOutput), Export: g.NormOutput, File: cfg},
	})
}

// Capture implements drafters.Method: the three feature layers
// (DefaultLayers) and the final-norm state the target's distribution is
// computed from.
func (Method) Capture(c *checkpoint.Config) drafters.CaptureNeeds {
	l := DefaultLayers(c.NumLayers)
	return drafters.CaptureNeeds{Layers: l[:], FinalNorm: true}
}

// Shape implements drafters.Method.
func (Method) Shape(d drafters.Decoding, _ int) string {
	switch {
	case d.Mode == drafters.ModeChain && !d.Sampling.Greedy():
		return fmt.Sprintf("EAGLE-3 chain of %d tokens, each sampled from the draft distribution", d.Depth)
	case d.Mode == drafters.ModeChain:
		return fmt.Sprintf("EAGLE-3 chain of %d tokens", d.Depth)
	}
	return fmt.Sprintf("EAGLE-2 dynamic tree: depth %d, top-k %d, %d total tokens", d.Depth, d.TopK, d.TotalTokens)
}

// Drafter is an EAGLE-3 draft loaded for a target model (drafters.Drafter).
type Drafter struct {
	m *model.Model
	d *Draft
}

// NewDrafter wraps an EAGLE-3 draft held in memory as a drafter for m,
// refusing a draft of another hidden or vocabulary size. Feature layers the
// draft names must pass CheckLayerIDs for m's layers; a draft that names
// none reads the engines' defaults (EngineDefaultLayers), which must exist.
func NewDrafter(d *Draft, m *model.Model) (*Drafter, error) {
	g := d.Geometry
	if g.Hidden != m.HiddenSize() || g.Vocab != m.VocabSize() {
		return nil, fmt.Errorf("the EAGLE-3 draft does not fit the target: it is of hidden_size %d and vocab_size %d, the target's are %d and %d (was it trained for another model?)",
			g.Hidden, g.Vocab, m.HiddenSize(), m.VocabSize())
	}
	L := m.NumLayers()
	if d.LayerIDs != nil {
		if err := CheckLayerIDs(d.LayerIDs, L); err != nil {
			return nil, fmt.Errorf("EAGLE-3 draft with feature layers %v: %w", d.LayerIDs, err)
		}
	} else {
		for _, id := range EngineDefaultLayers(L) {
			if id < 1 || id > L {
				return nil, fmt.Errorf("the EAGLE-3 draft names no feature layers and the engines' defaults %v do not fit a target of %d layers", EngineDefaultLayers(L), L)
			}
		}
	}
	return &Drafter{m: m, d: d}, nil
}

// Draft returns the drafter's draft.
func (d *Drafter) Draft() *Draft { return d.d }

// Kind implements drafters.Drafter.
func (d *Drafter) Kind() drafters.Kind { return Kind }

// Configure implements drafters.Drafter: a chain of Depth tokens (default
// DefaultChainDepth), or EAGLE-2's dynamic tree (defaults DefaultTreeDepth,
// DefaultTreeTopK, DefaultTreeTotal). A static tree does not apply.
func (d *Drafter) Configure(c drafters.Decoding) (drafters.Decoding, error) {
	if err := drafters.RequireFixed(c, "EAGLE-3"); err != nil {
		return c, err
	}
	if c.Mode == "" {
		c.Mode = drafters.ModeTree // the default shape
	}
	if c.Tree != nil {
		return c, drafters.Refuse([]drafters.Setting{drafters.SettingTree}, "a static tree applies to Medusa heads; EAGLE-3 builds its tree dynamically (depth, topk, total-tokens)")
	}
	if c.Mode == drafters.ModeChain {
		if c.TopK != 0 || c.TotalTokens != 0 {
			return c, drafters.Refuse([]drafters.Setting{drafters.SettingTopK, drafters.SettingTotalTokens}, "apply to the EAGLE-2 tree, not to a chain")
		}
		if c.Depth == 0 {
			c.Depth = DefaultChainDepth
		}
		return c, nil
	}
	if c.Depth == 0 {
		c.Depth = DefaultTreeDepth
	}
	if c.TopK == 0 {
		c.TopK = DefaultTreeTopK
	}
	if c.TotalTokens == 0 {
		c.TotalTokens = DefaultTreeTotal
	}
	return c, nil
}

// NewProposer implements drafters.Drafter.
func (d *Drafter) NewProposer(c drafters.Decoding, opt drafters.ProposerOptions) (drafters.Proposer, error) {
	return newProposer(d.m, d.d, c, opt.Capacity, opt.RNG)
}
