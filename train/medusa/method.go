package medusa

import (
	"context"
	"path/filepath"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/train/loop"
)

// Options are `drafter train medusa`'s settings: the method train.Run
// trains with (loop.Method).
type Options struct {
	// Config is the trainer's configuration (start from DefaultConfig).
	Config Config
}

var _ loop.Method = Options{}

// Kind is medusa.
func (o Options) Kind() drafters.Kind { return dmedusa.Kind }

// Columns: the heads read the final-norm state only.
func (o Options) Columns(*checkpoint.Config) (loop.Columns, error) { return loop.Columns{}, nil }

// Train trains heads on the target's lm_head and exports them into
// s.Job.Out's vllm/ and medusa/ folders.
func (o Options) Train(ctx context.Context, s *loop.Setup) (*loop.Outcome, error) {
	_, lmHead, err := s.OutputLayers(false)
	if err != nil {
		return nil, err
	}
	cfg := o.Config
	cfg.Resume = s.Resume
	job := s.Job
	r, err := Train(ctx, cfg, lmHead, s.Data, s.Device, &job)
	if err != nil {
		return nil, err
	}
	return &loop.Outcome{Steps: r.Steps, Epochs: r.Epochs, Stopped: r.Stopped, Result: r,
		Exports: []string{filepath.Join(job.Out, dmedusa.VLLMDir), filepath.Join(job.Out, dmedusa.MedusaDir)}}, nil
}
