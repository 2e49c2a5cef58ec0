package loop

import (
	"slices"
	"testing"
)

// flatQuad is quad without warm-up, so that Run's learning rate is
// constant with MinLRRatio 1, as StepRate's is.
type flatQuad struct{ *quad }

func (f flatQuad) Plan() Plan {
	p := f.quad.Plan()
	p.Warmup = 0
	return p
}

// StepRate takes Run's optimiser steps: after one untimed and two timed
// steps the weights are, bit for bit, those Run exports after three steps
// at the same constant learning rate; and it goes round epoch 0's batches
// when asked for more steps than the epoch has.
func TestStepRate(t *testing.T) {
	cfg := quadConfig()
	cfg.MinLRRatio, cfg.EvalEvery, cfg.Patience, cfg.MaxSteps = 1, 0, 0, 3
	run := newQuad()
	if _, err := Run(t.Context(), cfg, &Job{Out: t.TempDir()}, flatQuad{run}); err != nil {
		t.Fatal(err)
	}
	q := newQuad()
	rate, err := StepRate[*quadMetric](flatQuad{q}, cfg.ClipNorm, cfg.LR, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !(rate > 0) {
		t.Errorf("rate %v, want a positive rate", rate)
	}
	if !slices.Equal(q.w, run.exported) {
		t.Errorf("StepRate's weights %v, Run's after 3 steps %v", q.w, run.exported)
	}
	if slices.Equal(q.w, make([]float32, quadSize)) {
		t.Fatal("the weights never moved: the comparison shows nothing")
	}
	if _, err := StepRate[*quadMetric](flatQuad{newQuad()}, cfg.ClipNorm, cfg.LR, 0, 3*q.epochs[0]); err != nil {
		t.Errorf("%d steps over an epoch of %d batches: %v", 3*q.epochs[0], q.epochs[0], err)
	}
	if _, err := StepRate[*quadMetric](flatQuad{newQuad()}, cfg.ClipNorm, cfg.LR, 0, 0); err == nil {
		t.Error("no timed step: no error")
	}
}
