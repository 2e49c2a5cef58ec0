package eagle3

import (
	"context"
	"fmt"
	"strings"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/train/loop"
)

// Options are `drafter train eagle3`'s settings: the method train.Run
// trains with (loop.Method).
type Options struct {
	// Config is the trainer's configuration (start from DefaultConfig);
	// Train fills in Export's feature layers and target, and a
	// TargetTemperature of 0 from the data.
	Config Config
	// Layers overrides the feature layers (3 Hugging Face hidden_states
	// indices); nil uses the target's defaults (featureLayers).
	Layers []int
}

var _ loop.Method = Options{}

// Kind is eagle3.
func (o Options) Kind() drafters.Kind { return deagle3.Kind }

// Columns are the three feature layers, checked against the target's depth
// (a *LayerError).
func (o Options) Columns(c *checkpoint.Config) (loop.Columns, error) {
	layers, _, err := featureLayers(c, o.Layers)
	if err != nil {
		return loop.Columns{}, err
	}
	return loop.Columns{FeatureLayers: layers[:], FromFlag: o.Layers != nil, LayerName: FeatureName}, nil
}

// Train trains a draft layer for the target and exports it into s.Job.Out's
// eagle3/ folder.
func (o Options) Train(ctx context.Context, s *loop.Setup) (*loop.Outcome, error) {
	c := s.Target.Config
	layers, isDefault, err := featureLayers(c, o.Layers)
	if err != nil {
		return nil, err
	}
	cfg := o.Config
	if cfg.TargetTemperature == 0 {
		if cfg.TargetTemperature, err = dataTargetTemperature(s.Captures); err != nil {
			return nil, err
		}
	}
	embed, lmHead, err := s.OutputLayers(true)
	if err != nil {
		return nil, err
	}
	cfg.Resume = s.Resume
	cfg.Export.LayerIDs, cfg.Export.DefaultLayers = layers[:], isDefault
	cfg.Export.TargetName, cfg.Export.TargetArchitectures = s.Target.Name(), c.Architectures
	job := s.Job
	if job.Settings != nil {
		job.Settings.FeatureLayers = layers[:]
	}
	r, err := Train(ctx, cfg, deagle3.TargetGeometry(c, 0), embed, lmHead, s.Data, s.Device, &job)
	if err != nil {
		return nil, err
	}
	return &loop.Outcome{Steps: r.Steps, Epochs: r.Epochs, Stopped: r.Stopped, Exports: []string{r.ExportDir}, Result: r}, nil
}

// dataTargetTemperature chooses EAGLE-3's target temperature from how the
// captures were made: GreedyTargetTemperature when every one was distilled
// greedily (the drafter will serve greedy decoding), 1 when none was
// (sampled distillation, or conversations captured as they are). Data that
// mixes both has no single serving temperature: the caller must choose.
func dataTargetTemperature(captures []loop.Capture) (float64, error) {
	var greedy, other []string
	for _, d := range captures {
		if distilledGreedily(d.Manifest) {
			greedy = append(greedy, d.Dir)
		} else {
			other = append(other, d.Dir)
		}
	}
	switch {
	case len(other) == 0:
		return GreedyTargetTemperature, nil
	case len(greedy) == 0:
		return 1, nil
	}
	return 0, fmt.Errorf("train: --data mixes greedy captures (%s) with sampled or teacher-forced ones (%s): pass --target-temperature (%g trains for greedy serving, 1 for sampling)",
		strings.Join(greedy, ", "), strings.Join(other, ", "), GreedyTargetTemperature)
}

// distilledGreedily reports whether a capture's manifest records drafter
// distill's greedy decoding: temperature 0, or top-k 1 (which samples the top
// token only).
func distilledGreedily(m *capture.Manifest) bool {
	g, ok := m.Generation.(map[string]any)
	if !ok || g["teacher_forced"] != nil {
		return false
	}
	t, ok := g["temperature"].(float64)
	k, _ := g["top_k"].(float64)
	return ok && (t == 0 || k == 1)
}
