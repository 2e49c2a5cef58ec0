package medusa

import (
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/loop"
)

// StepRate measures the training steps of heads configured by cfg on data
// (loop.StepRate): the trainer Train builds, its batches and its step, the
// loop's optimiser update included, at cfg's peak learning rate and clip.
// warmup steps go untimed before steps timed ones; it returns tokens
// (positions) per second. Nothing is written.
func StepRate(cfg Config, lmHead []float32, data dataset.Dataset, dev tensor.Device, warmup, steps int) (float64, error) {
	t, err := newTrainer(cfg, lmHead, data, dev)
	if err != nil {
		return 0, err
	}
	return loop.StepRate[*Metrics](t, cfg.ClipNorm, cfg.LR, warmup, steps)
}
