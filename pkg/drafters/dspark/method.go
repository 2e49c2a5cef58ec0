package dspark

import (
	"fmt"
	"path/filepath"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/pkg/model"
)

// DefaultDraftLayers is the number of draft decoder layers a default
// training run builds, and with it the number of fused target layers
// (layerids.DFlashDefault): DFlash's default. On stories260k 3 layers
// accept 4.89 at 7 drafts against one layer's 3.69 (docs/acceptance.md);
// DeepSpec's recipe uses 5 for Qwen3-8B.
const DefaultDraftLayers = 3

// Method is the DSpark method (drafters.Method).
type Method struct{}

var _ drafters.Method = Method{}

// Kind implements drafters.Method.
func (Method) Kind() drafters.Kind { return Kind }

// Layouts implements drafters.Method: DeepSpec's native layout first.
func (Method) Layouts() []string { return []string{FormatDeepSpec, FormatSpeculators} }

// Detect implements drafters.Method: the layout is in config.json.
func (Method) Detect(dir string) (string, error) {
	var c readConfig
	found, err := drafters.ReadConfig(dir, &c)
	if err != nil || !found {
		return "", err
	}
	l := c.layout()
	if l != "" && !drafters.FileExists(filepath.Join(dir, weightsFile)) {
		return "", fmt.Errorf("dspark: %s describes a DSpark draft but %s is missing", filepath.Join(dir, drafters.ConfigFile), weightsFile)
	}
	return l, nil
}

// Wants implements drafters.Method.
func (Method) Wants() string {
	return "DSpark drafts (config.json with architectures Qwen3DSparkModel or speculators_model_type dspark)"
}

// Capture implements drafters.Method: DFlash's default feature layers for
// DefaultDraftLayers draft layers, and the final-norm state (the L1 and
// confidence targets come from the target's distribution).
func (Method) Capture(c *checkpoint.Config) drafters.CaptureNeeds {
	hf, _ := dflash.DefaultLayers(c.NumLayers, DefaultDraftLayers) // none for a target too small for them: drafter train dspark says why
	return drafters.CaptureNeeds{Layers: hf, FinalNorm: true}
}

// Load implements drafters.Method.
func (Method) Load(dir, layout string, m *model.Model, prov *drafters.Provenance) (drafters.Drafter, error) {
	d, err := LoadDraft(dir, layout)
	if err != nil {
		return nil, fmt.Errorf("loading the DSpark draft: %w", err)
	}
	if err := checkProvenance(prov, dir, layout, d); err != nil {
		return nil, err
	}
	dr, err := NewDrafter(d, m)
	if err != nil {
		return nil, fmt.Errorf("%w (draft from %s)", err, dir)
	}
	if dr.Calibration, err = readCalibration(prov, d); err != nil {
		return nil, err
	}
	return dr, nil
}

// readCalibration reads the confidence calibration train recorded in
// drafter.json (nil when there is none).
func readCalibration(prov *drafters.Provenance, d *Draft) (*Calibration, error) {
	if prov == nil {
		return nil, nil
	}
	var p struct {
		Calibration *Calibration `json:"confidence_calibration"`
	}
	if err := prov.Decode(&p); err != nil {
		return nil, err
	}
	if p.Calibration == nil {
		return nil, nil
	}
	if !d.Heads.Shape.Confidence {
		return nil, fmt.Errorf("%s: confidence_calibration is recorded for a DSpark draft without a confidence head", prov.Path)
	}
	if err := p.Calibration.Validate(d.Geometry.BlockSize); err != nil {
		return nil, fmt.Errorf("%s: %w", prov.Path, err)
	}
	return p.Calibration, nil
}

// checkProvenance compares an export with the drafter.json found for it.
func checkProvenance(prov *drafters.Provenance, dir, layout string, d *Draft) error {
	if prov == nil {
		return nil
	}
	var p struct {
		drafters.Common
		Format        *string `json:"format"`
		BlockSize     *int    `json:"block_size"`
		MarkovRank    *int    `json:"markov_rank"`
		FeatureLayers []int   `json:"feature_layers"`
	}
	if err := prov.Decode(&p); err != nil {
		return err
	}
	cfg := filepath.Join(dir, drafters.ConfigFile)
	var layers any
	if p.FeatureLayers != nil {
		layers = p.FeatureLayers
	}
	g := d.Geometry
	return prov.Agree([]drafters.Recorded{
		{Key: "method", Recorded: drafters.Value(p.Method), Export: string(Kind), File: dir},
		{Key: "format", Recorded: drafters.Value(p.Format), Export: layout, File: cfg},
		{Key: "hidden_size", Recorded: drafters.Value(p.Hidden), Export: g.Hidden, File: cfg},
		{Key: "vocab_size", Recorded: drafters.Value(p.Vocab), Export: g.Vocab, File: cfg},
		{Key: "block_size", Recorded: drafters.Value(p.BlockSize), Export: g.BlockSize, File: cfg},
		{Key: "markov_rank", Recorded: drafters.Value(p.MarkovRank), Export: d.Heads.Shape.Rank, File: cfg},
		{Key: "feature_layers", Recorded: layers, Export: d.LayerIDs, File: cfg},
	})
}

// Shape implements drafters.Method.
func (Method) Shape(d drafters.Decoding, _ int) string {
	s := fmt.Sprintf("DSpark chain of %d tokens (one backbone pass, Markov head per token)", d.Depth)
	if !d.Sampling.Greedy() {
		s += ", each sampled from the draft distribution"
	}
	conf := "raw confidences"
	if d.Schedule.Calibration == CalibrationSTS {
		conf = "STS-calibrated confidences"
	}
	switch sc := d.Schedule; sc.Kind {
	case drafters.ScheduleThreshold:
		s += fmt.Sprintf(", cut where the cumulative confidence falls below %g (%s)", sc.Threshold, conf)
	case drafters.ScheduleSPS:
		s += fmt.Sprintf(", length chosen by the SPS scheduler (%s)", conf)
	}
	return s
}

// Drafter is a DSpark draft loaded for a target model (drafters.Drafter).
type Drafter struct {
	m *model.Model
	d *Draft
	// Calibration rescales the confidence head's logits for the schedules
	// (nil: raw confidences).
	Calibration *Calibration
}

// NewDrafter wraps a DSpark draft as a drafter for m, refusing a draft of
// another hidden or vocabulary size or with feature layers m lacks.
func NewDrafter(d *Draft, m *model.Model) (*Drafter, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	g := d.Geometry
	if g.TargetHidden != m.HiddenSize() || g.Vocab != m.VocabSize() {
		return nil, fmt.Errorf("the DSpark draft does not fit the target: it reads features of width %d over vocab_size %d, the target's are %d and %d (was it trained for another model?)",
			g.TargetHidden, g.Vocab, m.HiddenSize(), m.VocabSize())
	}
	L := m.NumLayers()
	for _, id := range d.LayerIDs {
		if id < 1 || id > L {
			return nil, fmt.Errorf("the DSpark draft fuses hidden_states index %d, outside [1, %d] for this %d-layer target", id, L, L)
		}
	}
	return &Drafter{m: m, d: d}, nil
}

// Draft returns the drafter's draft.
func (d *Drafter) Draft() *Draft { return d.d }

// Kind implements drafters.Drafter.
func (d *Drafter) Kind() drafters.Kind { return Kind }

// Configure implements drafters.Drafter: a chain of Depth tokens, at most
// (and by default) the block size B: one backbone pass drafts B tokens.
func (d *Drafter) Configure(c drafters.Decoding) (drafters.Decoding, error) {
	B := d.d.Geometry.BlockSize
	if c.Mode == "" {
		c.Mode = drafters.ModeChain
	}
	if c.Mode != drafters.ModeChain || c.Tree != nil || c.TopK != 0 || c.TotalTokens != 0 {
		return c, drafters.Refuse([]drafters.Setting{drafters.SettingMode}, "DSpark drafts a chain (one block per forward); trees are not supported")
	}
	if c.Depth == 0 {
		c.Depth = B
	}
	if c.Depth < 1 || c.Depth > B {
		return c, drafters.Refuse([]drafters.Setting{drafters.SettingDepth}, "a DSpark chain holds 1 to %d tokens (the block size it was trained with), not %d", B, c.Depth)
	}
	if !c.Schedule.Scheduled() {
		c.Schedule.Calibration = ""
		return c, nil
	}
	if !d.d.Heads.Shape.Confidence {
		return c, drafters.Refuse([]drafters.Setting{drafters.SettingSchedule}, "this DSpark draft has no confidence head (enable_confidence_head false): it can only draft the fixed block")
	}
	if err := c.Schedule.Validate(c.Depth); err != nil {
		return c, err
	}
	c.Schedule.Calibration = "none"
	if d.Calibration != nil {
		c.Schedule.Calibration = d.Calibration.Method
	}
	return c, nil
}

// NewProposer implements drafters.Drafter.
func (d *Drafter) NewProposer(c drafters.Decoding, opt drafters.ProposerOptions) (drafters.Proposer, error) {
	var temps []float64
	if c.Schedule.Scheduled() && d.Calibration != nil {
		temps = d.Calibration.Temperatures(c.Sampling.Greedy())
	}
	return newProposer(d.m, d.d, c, temps, opt.Capacity, opt.RNG)
}
