package loop

import (
	"errors"
	"fmt"
	"time"

	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/optim"
)

// StepRate measures t's optimiser steps as Run takes them (Next, then
// optimStep: the gradients zeroed, the trainer's forward and backward, the
// clip and AdamW's update at learning rate lr, the optimiser on a sibling
// of the trainer's device), without Run's evaluations, checkpoints, logs or
// export: drafter bench's training rows. It takes warmup steps untimed,
// then steps timed ones, going round the epoch-0 batches as often as
// needed, and returns the timed steps' tokens per second. The weights are
// trained as a run's first steps would train them, and thrown away.
func StepRate[M Metric[M]](t Trainer[M], clip, lr float64, warmup, steps int) (float64, error) {
	if steps < 1 || warmup < 0 {
		return 0, fmt.Errorf("train: step rate over %d steps after %d: want at least one timed step", steps, warmup)
	}
	params := t.Params()
	if len(params) == 0 {
		return 0, errors.New("train: the trainer has no parameters")
	}
	dev := cpu.SiblingOf(t.Device())
	opt, err := optim.NewAdamW(dev, params, t.Plan().AdamW)
	if err != nil {
		return 0, err
	}
	if err := t.Seek(0, Position{}); err != nil {
		return 0, err
	}
	next := func() error {
		ok, err := t.Next()
		if err != nil || ok {
			return err
		}
		if err := t.Seek(0, Position{}); err != nil {
			return err
		}
		if ok, err = t.Next(); err == nil && !ok {
			err = errors.New("train: the trainer has no batch")
		}
		return err
	}
	// One value of the first parameter read back ends the timing: the
	// device has then finished the last update (a device may queue work).
	probe := make([]float32, params[0].Data.Cols())
	tokens := 0
	var start time.Time
	for i := range warmup + steps {
		if i == warmup {
			dev.Read(probe, params[0].Data.RowRange(0, 1))
			start, tokens = time.Now(), 0
		}
		if err := next(); err != nil {
			return 0, err
		}
		_, n, _, err := optimStep(opt, t, clip, lr)
		if err != nil {
			return 0, err
		}
		tokens += n
	}
	dev.Read(probe, params[0].Data.RowRange(0, 1))
	sec := time.Since(start).Seconds()
	if sec <= 0 {
		return 0, errors.New("train: the timed steps took no measurable time")
	}
	return float64(tokens) / sec, nil
}
