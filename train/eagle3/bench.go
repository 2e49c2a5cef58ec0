package eagle3

import (
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/loop"
)

// StepRate measures the TTT training steps of a draft layer configured by
// cfg for target on ds (loop.StepRate): the trainer Train builds, its
// batches and its step, the loop's optimiser update included, at cfg's peak
// learning rate and clip. warmup steps go untimed before steps timed ones;
// it returns tokens per second. Nothing is written.
func StepRate(cfg Config, target deagle3.Geometry, embed, lmHead []float32, ds dataset.Dataset, dev tensor.Device, warmup, steps int) (float64, error) {
	t, err := newTrainer(cfg, target, embed, lmHead, ds, dev)
	if err != nil {
		return 0, err
	}
	return loop.StepRate[*EvalMetrics](t, cfg.ClipNorm, cfg.LR, warmup, steps)
}
