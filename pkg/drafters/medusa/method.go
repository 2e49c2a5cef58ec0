package medusa

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// Kind names the method.
const Kind drafters.Kind = "medusa"

// Method is the Medusa method (drafters.Method).
type Method struct{}

// Kind implements drafters.Method.
func (Method) Kind() drafters.Kind { return Kind }

// Layouts implements drafters.Method: vLLM's first (both carry the same
// weights; only vLLM's records a shared lm_head).
func (Method) Layouts() []string {
	var ls []string
	for _, f := range formats() {
		ls = append(ls, f.name())
	}
	return ls
}

// Detect implements drafters.Method.
func (Method) Detect(dir string) (string, error) {
	f, err := detectFormat(dir)
	if err != nil || f == nil {
		return "", err
	}
	return f.name(), nil
}

// Wants implements drafters.Method.
func (Method) Wants() string {
	return "Medusa heads (vllm/ config.json with model_type medusa and model.safetensors, or medusa/medusa_lm_head.safetensors)"
}

// Load implements drafters.Method: the export's config and weights must
// agree exactly (see Load), the drafter.json found for it must describe it
// (method, shape, dtype) and its geometry must fit the target.
func (Method) Load(dir, layout string, m *model.Model, prov *drafters.Provenance) (drafters.Drafter, error) {
	var ld *Loaded
	err := fmt.Errorf("medusa: unknown export layout %q", layout)
	for _, f := range formats() {
		if f.name() == layout {
			ld, err = f.load(dir)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("loading Medusa heads: %w", err)
	}
	tree, err := checkProvenance(prov, dir, ld)
	if err != nil {
		return nil, err
	}
	d, err := NewDrafter(ld.Heads, m)
	if err != nil {
		return nil, fmt.Errorf("%w (heads from %s)", err, ld.Weights)
	}
	d.tree = tree
	return d, nil
}

// checkProvenance compares an export in dir with the drafter.json found for
// it (nil: nothing to compare) and returns the calibrated tree it records
// (nil when it records none).
func checkProvenance(prov *drafters.Provenance, dir string, ld *Loaded) (spec.Choices, error) {
	if prov == nil {
		return nil, nil
	}
	var p struct {
		drafters.Common
		Heads        *int         `json:"num_heads"`
		Layers       *int         `json:"num_layers"`
		SharedLMHead *bool        `json:"shared_lm_head"`
		DType        *string      `json:"dtype"`
		Tree         spec.Choices `json:"tree"`
	}
	if err := prov.Decode(&p); err != nil {
		return nil, err
	}
	if p.Tree != nil {
		if err := p.Tree.Validate(); err != nil {
			return nil, fmt.Errorf("%s: tree: %w", prov.Path, err)
		}
		if p.Tree.Depth() > ld.Heads.Heads {
			return nil, fmt.Errorf("%s: tree: paths reach depth %d but the export has %d Medusa heads", prov.Path, p.Tree.Depth(), ld.Heads.Heads)
		}
	}
	h := ld.Heads
	fields := []drafters.Recorded{
		{Key: "method", Recorded: drafters.Value(p.Method), Export: string(Kind), File: dir},
		{Key: "num_heads", Recorded: drafters.Value(p.Heads), Export: h.Heads, File: ld.Config},
		{Key: "num_layers", Recorded: drafters.Value(p.Layers), Export: h.Layers, File: ld.Config},
		{Key: "hidden_size", Recorded: drafters.Value(p.Hidden), Export: h.Hidden, File: ld.Weights},
		{Key: "vocab_size", Recorded: drafters.Value(p.Vocab), Export: h.Vocab, File: ld.Weights},
		{Key: "dtype", Recorded: drafters.Value(p.DType), Export: string(ld.DType), File: ld.Weights},
	}
	if ld.Layout == VLLMDir { // FasterDecoding's layout has no shared lm_head
		fields = append(fields, drafters.Recorded{Key: "shared_lm_head", Recorded: drafters.Value(p.SharedLMHead), Export: h.SharedLMHead, File: ld.Config})
	}
	return p.Tree, prov.Agree(fields)
}

// Capture implements drafters.Method: Medusa's heads read the final-norm
// state alone.
func (Method) Capture(*checkpoint.Config) drafters.CaptureNeeds {
	return drafters.CaptureNeeds{FinalNorm: true}
}

// Shape implements drafters.Method.
func (Method) Shape(d drafters.Decoding, nodes int) string {
	if d.Mode == drafters.ModeChain {
		return fmt.Sprintf("Medusa chain: top-1 of %d heads", d.Depth)
	}
	return fmt.Sprintf("Medusa static tree: %d nodes, depth %d, widths %v", nodes, d.Tree.Depth(), d.Tree.Widths())
}

// Drafter is Medusa heads loaded for a target model (drafters.Drafter).
type Drafter struct {
	m *model.Model
	h *Heads
	// tree is the calibrated tree recorded with the heads (drafter.json's
	// "tree"), the default in tree mode; nil: spec.DefaultChoices.
	tree spec.Choices
}

// NewDrafter wraps heads held in memory (for example a trainer's) as a
// drafter for m, refusing heads of another hidden or vocabulary size.
func NewDrafter(h *Heads, m *model.Model) (*Drafter, error) {
	if h.Hidden != m.HiddenSize() || h.Vocab != m.VocabSize() {
		return nil, fmt.Errorf("the Medusa heads do not fit the target: they read hidden states of size %d and score a vocabulary of %d, the target's hidden_size is %d and vocab_size %d (were they trained for another model?)",
			h.Hidden, h.Vocab, m.HiddenSize(), m.VocabSize())
	}
	return &Drafter{m: m, h: h}, nil
}

// Heads returns the drafter's heads.
func (d *Drafter) Heads() *Heads { return d.h }

// Kind implements drafters.Drafter.
func (d *Drafter) Kind() drafters.Kind { return Kind }

// Configure implements drafters.Drafter: a chain is the top-1 of the first
// Depth heads (default all); a tree is a static tree of paths no deeper than
// the heads (default spec.DefaultChoices). The dynamic tree's settings do
// not apply.
func (d *Drafter) Configure(c drafters.Decoding) (drafters.Decoding, error) {
	if err := drafters.RequireFixed(c, "Medusa"); err != nil {
		return c, err
	}
	if c.Mode == "" {
		c.Mode = drafters.ModeTree // the default shape
	}
	heads := d.h.Heads
	if c.TopK != 0 || c.TotalTokens != 0 {
		return c, drafters.Refuse([]drafters.Setting{drafters.SettingTopK, drafters.SettingTotalTokens}, "configure EAGLE-2's dynamic tree; a Medusa tree is a static list of paths (tree)")
	}
	if c.Mode == drafters.ModeChain {
		if c.Tree != nil {
			return c, drafters.Refuse([]drafters.Setting{drafters.SettingTree, drafters.SettingMode}, "a static tree applies to tree mode, not to a chain")
		}
		if c.Depth == 0 {
			c.Depth = heads
		}
		if c.Depth > heads {
			return c, drafters.Refuse([]drafters.Setting{drafters.SettingDepth}, "a chain of %d exceeds the drafter's %d Medusa heads", c.Depth, heads)
		}
		return c, nil
	}
	if c.Depth != 0 {
		return c, drafters.Refuse([]drafters.Setting{drafters.SettingDepth}, "does not apply to a Medusa tree (its depth is the longest path of the tree)")
	}
	if c.Tree == nil {
		c.Tree = d.tree
	}
	if c.Tree == nil {
		c.Tree = spec.DefaultChoices(heads)
	}
	if err := c.Tree.Validate(); err != nil {
		return c, drafters.Refuse([]drafters.Setting{drafters.SettingTree}, "%v", err)
	}
	if c.Tree.Depth() > heads {
		return c, drafters.Refuse([]drafters.Setting{drafters.SettingTree}, "paths reach depth %d but the drafter has %d Medusa heads", c.Tree.Depth(), heads)
	}
	return c, nil
}

// NewProposer implements drafters.Drafter.
func (d *Drafter) NewProposer(c drafters.Decoding, _ drafters.ProposerOptions) (drafters.Proposer, error) {
	return newProposer(d.m, d.h, c)
}
