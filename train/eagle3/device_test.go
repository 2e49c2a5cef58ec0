package eagle3

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/drafter-ai/drafter/internal/testdevice"
	"github.com/drafter-ai/drafter/internal/testmodel"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/loop"
)

// TestTrainOnADeviceOfItsOwn trains the draft on a device whose memory is
// not the host's, uninterrupted and interrupted then resumed (the
// checkpoint read from and written back to the device), and checks that
// the exports, the losses and evaluations of metrics.jsonl and the
// checkpoint's state are those of the same runs on the CPU device, bit for
// bit.
func TestTrainOnADeviceOfItsOwn(t *testing.T) { trainOnADeviceOfItsOwn(t, trainConfig()) }

// TestTrainOnADeviceOfItsOwn31 is TestTrainOnADeviceOfItsOwn for EAGLE-3.1
// (each norm before fc, with norm_output): the norms' activations and
// gradients stay on the device, and an interrupted run resumes bit for bit.
func TestTrainOnADeviceOfItsOwn31(t *testing.T) {
	for _, n := range []deagle3.Norms{{FCNorm: true, NormOutput: true}, {NormBeforeFC: true, NormOutput: true}} {
		t.Run(normsName(n), func(t *testing.T) {
			cfg := trainConfig()
			cfg.FCNorm, cfg.NormBeforeFC, cfg.NormOutput = n.FCNorm, n.NormBeforeFC, n.NormOutput
			trainOnADeviceOfItsOwn(t, cfg)
		})
	}
}

func trainOnADeviceOfItsOwn(t *testing.T, cfg Config) {
	g := tinyGeometry()
	tt := newTinyTarget(45, g)
	ds := memory(g.Hidden, tt.samples(46, 30, 8, 20))
	cfg.Epochs, cfg.Patience = 3, 2
	run := func(dev tensor.Device, cut bool) string {
		out := t.TempDir()
		if cut {
			ctx, cancel := context.WithCancel(context.Background())
			c := cfg
			c.Progress = func(p Progress) {
				if p.Step == 7 && p.Eval == nil {
					cancel()
				}
			}
			if _, err := Train(ctx, c, tt.g, tt.embed, tt.head, ds, dev, &loop.Job{Out: out}); !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted run returned %v", err)
			}
			c = cfg
			c.Resume = true
			if _, err := Train(context.Background(), c, tt.g, tt.embed, tt.head, ds, dev, &loop.Job{Out: out}); err != nil {
				t.Fatal(err)
			}
			return out
		}
		if _, err := Train(context.Background(), cfg, tt.g, tt.embed, tt.head, ds, dev, &loop.Job{Out: out}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	onCPU := run(cpu.New(nil), false)
	if ms := metricsWithoutTimings(t, filepath.Join(onCPU, loop.MetricsFile)); len(ms) < 10 {
		t.Fatalf("the run logged %d lines: too short to compare", len(ms))
	}
	for _, cut := range []bool{false, true} {
		got := run(testdevice.New(), cut)
		sameRun(t, onCPU, got)
		testmodel.SameTensors(t, filepath.Join(onCPU, loop.CheckpointFile), filepath.Join(got, loop.CheckpointFile))
	}
}
