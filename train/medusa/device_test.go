package medusa

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/internal/testdevice"
	"github.com/drafter-ai/drafter/internal/testmodel"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/loop"
)

// TestTrainOnADeviceOfItsOwn trains heads (their own lm_heads, and the
// target's shared one) on a device whose memory is not the host's,
// uninterrupted and interrupted then resumed (the checkpoint read from and
// written back to the device), and checks that the exports, the returned
// heads, the losses and evaluations of metrics.jsonl and the checkpoint's
// state are those of the same runs on the CPU device, bit for bit.
func TestTrainOnADeviceOfItsOwn(t *testing.T) {
	data, st := synthData(4, 16, 32, 60, 3, 20)
	for _, shared := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.BatchTokens, cfg.MaxEpochs, cfg.LR, cfg.Patience, cfg.EvalEvery, cfg.LogEvery = 128, 8, 0.05, 2, 3, 1
		cfg.Layers, cfg.SharedLMHead = 2, shared
		run := func(dev tensor.Device, cut bool) (string, *Result) {
			out := t.TempDir()
			if cut {
				ctx, cancel := context.WithCancel(context.Background())
				c := cfg
				c.Progress = func(p Progress) {
					if p.Step == 5 {
						cancel()
					}
				}
				if _, err := Train(ctx, c, st.LM, data, dev, &loop.Job{Out: out}); !errors.Is(err, context.Canceled) {
					t.Fatalf("interrupted run returned %v", err)
				}
				cfg := cfg
				cfg.Resume = true
				res, err := Train(context.Background(), cfg, st.LM, data, dev, &loop.Job{Out: out})
				if err != nil {
					t.Fatal(err)
				}
				return out, res
			}
			res, err := Train(context.Background(), cfg, st.LM, data, dev, &loop.Job{Out: out})
			if err != nil {
				t.Fatal(err)
			}
			return out, res
		}
		onCPU, want := run(cpu.New(nil), false)
		if want.Steps < 10 || want.Best == nil || want.Best.Step == want.Steps {
			t.Fatalf("shared=%v: %d steps, best at %v: too short to compare the best weights", shared, want.Steps, want.Best)
		}
		for _, cut := range []bool{false, true} {
			out, got := run(testdevice.New(), cut)
			if got.Steps != want.Steps || got.Stopped != want.Stopped {
				t.Fatalf("shared=%v cut=%v: %d steps (%s), on the CPU device %d (%s)", shared, cut, got.Steps, got.Stopped, want.Steps, want.Stopped)
			}
			if !slices.Equal(got.Heads.ParamData(), want.Heads.ParamData()) {
				t.Fatalf("shared=%v cut=%v: the returned heads differ from the CPU device's", shared, cut)
			}
			for _, f := range []string{filepath.Join(dmedusa.VLLMDir, dmedusa.VLLMWeights), filepath.Join(dmedusa.MedusaDir, dmedusa.MedusaWeights)} {
				a, _ := os.ReadFile(filepath.Join(onCPU, f))
				b, _ := os.ReadFile(filepath.Join(out, f))
				if len(a) == 0 || !bytes.Equal(a, b) {
					t.Fatalf("shared=%v cut=%v: %s differs from the CPU device's", shared, cut, f)
				}
			}
			if a, b := metricLines(t, onCPU), metricLines(t, out); !reflect.DeepEqual(a, b) {
				t.Fatalf("shared=%v cut=%v: metrics.jsonl differs:\nCPU device     %v\ncopying device %v", shared, cut, a, b)
			}
			testmodel.SameTensors(t, filepath.Join(onCPU, loop.CheckpointFile), filepath.Join(out, loop.CheckpointFile))
		}
	}
}

// metricLines reads dir's metrics.jsonl without its timings.
func metricLines(t *testing.T, dir string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, loop.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte{'\n'}) {
		m := map[string]any{}
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "tokens_per_sec")
		out = append(out, m)
	}
	return out
}
