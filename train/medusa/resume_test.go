package medusa

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/loop"
)

// TestResumeBitIdentical: a run cut at step k (by MaxSteps, or by cancelling
// its context) and resumed ends with exactly the weights of an uninterrupted run.
func TestResumeBitIdentical(t *testing.T) {
	data, st := synthData(3, 16, 32, 60, 3, 20)
	target := st.LM // the target's lm_head
	cfg := DefaultConfig()
	cfg.BatchTokens = 128
	cfg.MaxEpochs = 20
	cfg.LR = 0.05 // fast enough to overfit 57 samples, so early stopping and the best-weights copy take part
	cfg.Patience = 2
	cfg.EvalEvery = 3
	cfg.LogEvery = 1
	be := cpu.New(nil)

	full, err := Train(context.Background(), cfg, target, data, be, &loop.Job{Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if full.Steps < 10 {
		t.Fatalf("uninterrupted run too short to test resuming: %d steps", full.Steps)
	}
	t.Logf("uninterrupted: %d steps, %s", full.Steps, full.Stopped)
	same := func(name string, got *Result) {
		t.Helper()
		if got.Steps != full.Steps || got.Stopped != full.Stopped {
			t.Fatalf("%s: %d steps (%s), uninterrupted %d (%s)", name, got.Steps, got.Stopped, full.Steps, full.Stopped)
		}
		a, b := full.Heads.ParamData(), got.Heads.ParamData()
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s: parameter %d = %v, uninterrupted %v", name, i, b[i], a[i])
			}
		}
	}

	// Cut by MaxSteps, then resumed without the limit.
	dir := t.TempDir()
	cut := cfg
	// After the best evaluation, before early stopping, so the resumed run must
	// restore the saved best weights and the count of evaluations since.
	if full.Stopped != "early-stop" || full.Best == nil || full.Best.Step+2 >= full.Steps {
		t.Fatalf("uninterrupted run (%s, best at step %v of %d) does not exercise early stopping", full.Stopped, full.Best, full.Steps)
	}
	cut.MaxSteps = full.Best.Step + 2
	part, err := Train(context.Background(), cut, target, data, be, &loop.Job{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	if part.Steps != cut.MaxSteps || part.Stopped != "max-steps" {
		t.Fatalf("cut run: %d steps, %s", part.Steps, part.Stopped)
	}
	res := cfg
	res.Resume = true
	got, err := Train(context.Background(), res, target, data, be, &loop.Job{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	same("max-steps + resume", got)

	// Cancelled from the progress callback at step 5 (mid-epoch), then resumed.
	dir = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cc := cfg
	cc.Progress = func(p Progress) {
		if p.Step == 5 {
			cancel()
		}
	}
	_, err = Train(ctx, cc, target, data, be, &loop.Job{Out: dir})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run returned %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, loop.CheckpointFile)); err != nil {
		t.Fatalf("no checkpoint after cancellation: %v", err)
	}
	got, err = Train(context.Background(), res, target, data, be, &loop.Job{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	same("cancel + resume", got)

	// Resuming with different arguments is refused.
	bad := res
	bad.LR *= 2
	if _, err := Train(context.Background(), bad, target, data, be, &loop.Job{Out: dir}); err == nil {
		t.Fatal("resume with a different learning rate accepted")
	}
}

// TestTrainAutoBatchAndEpochs checks that a zero batch and epoch cap are
// chosen from the training positions and that the schedule spans them.
func TestTrainAutoBatchAndEpochs(t *testing.T) {
	data, st := synthData(5, 8, 16, 200, 3, 60)
	cfg := DefaultConfig()
	cfg.MaxSteps = 2
	var total int
	cfg.Progress = func(p Progress) { total = p.TotalSteps }
	res, err := Train(context.Background(), cfg, st.LM, data, cpu.New(nil), &loop.Job{Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	n := data.NumSamples()
	split := sampleOrder(n, cfg.Seed, heldOutStream)
	nHeld := int(math.Round(cfg.HeldOut * float64(n)))
	pos, err := countPositions(data, split[nHeld:], cfg.Heads, data.H, st.V)
	if err != nil {
		t.Fatal(err)
	}
	b, e := AutoBatchTokens(pos), AutoEpochs(pos)
	if b < 64 || e < 2 {
		t.Fatalf("implausible automatic batch %d and epochs %d for %d positions", b, e, pos)
	}
	if res.BatchTokens != b || res.MaxEpochs != e || total != (pos+b-1)/b*e {
		t.Fatalf("%d positions: batch %d, epochs %d, %d scheduled steps; want %d, %d, %d", pos, res.BatchTokens, res.MaxEpochs, total, b, e, (pos+b-1)/b*e)
	}
	t.Logf("%d positions: batch %d, %d epochs, %d steps", pos, b, e, total)
}
