package eval

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/drafter-ai/drafter/internal/testdevice"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestVerifyOnADeviceOfItsOwn: on a device whose memory is not the host's
// (a GPU; here internal/testdevice, the CPU's arithmetic behind copies),
// verification keeps the pass's logits on the device, ranks them there when
// greedy and reads only the rows the verifier walks when sampling; the
// outcome (every prompt's accepted lengths, tokens and the acceptance
// statistics) equals the CPU device's lazily computed rows, for trained
// Medusa and EAGLE-3 drafters in chain and tree mode, greedy and sampled.
func TestVerifyOnADeviceOfItsOwn(t *testing.T) {
	tr := trainedDrafters(t)
	load := func(dev tensor.Device) *model.Model {
		g, err := target.Load(testutil.Stories260k(), dev, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		return g.Model
	}
	cpu, own := load(nil), load(testdevice.New())
	if !cpu.HostMemory() || own.HostMemory() {
		t.Fatalf("HostMemory: cpu %v, device of its own %v", cpu.HostMemory(), own.HostMemory())
	}
	ps := testPrompts(t, evalPrompts, 6)
	for _, dir := range []string{tr.medusaDir, tr.eagleDir} {
		info, err := Detect(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, shape := range []Config{{Mode: ModeChain}, {Mode: ModeTree}} {
			for _, temp := range []float64{0, 1} {
				cfg := shape
				cfg.MaxNewTokens, cfg.EOS, cfg.Seed = 40, []int{eosID}, 3
				cfg.Sampling = sample.Params{Temperature: temp}
				t.Run(fmt.Sprintf("%s/%s/T%g", info.Kind, cfg.Mode, temp), func(t *testing.T) {
					reps := [2]*Report{}
					for i, m := range []*model.Model{cpu, own} {
						d, err := LoadDrafter(info, m)
						if err != nil {
							t.Fatal(err)
						}
						if i == 1 {
							full, err := cfg.withDefaults(d)
							if err != nil {
								t.Fatal(err)
							}
							r, err := newRunner(m, d, full, ps)
							if err != nil {
								t.Fatal(err)
							}
							if r.devRows == nil {
								t.Fatal("the runner on a device of its own does not verify on the device")
							}
						}
						if reps[i], err = Run(context.Background(), m, d, ps, cfg); err != nil {
							t.Fatal(err)
						}
						if temp == 0 {
							if err := reps[i].CheckLossless(); err != nil {
								t.Fatal(err)
							}
						}
					}
					a, b := reps[0], reps[1]
					if a.MeanAcceptLength != b.MeanAcceptLength || !reflect.DeepEqual(a.AcceptLengthHist, b.AcceptLengthHist) || !reflect.DeepEqual(a.Stats, b.Stats) {
						t.Fatalf("on the device: τ %.4f, hist %v, stats %+v; on the cpu: τ %.4f, hist %v, stats %+v",
							b.MeanAcceptLength, b.AcceptLengthHist, b.Stats, a.MeanAcceptLength, a.AcceptLengthHist, a.Stats)
					}
					for i := range a.PerPrompt {
						if !reflect.DeepEqual(a.PerPrompt[i].Output, b.PerPrompt[i].Output) {
							t.Fatalf("prompt %d: the device's tokens differ from the cpu's", i)
						}
					}
					// Accepted draft tokens, so that the walks compared go
					// below the root (a random drafter accepts about 1.0).
					if !(a.MeanAcceptLength > 1.05) {
						t.Fatalf("τ %.3f: the trained drafter should accept more than 1.05", a.MeanAcceptLength)
					}
					t.Logf("τ %.3f on both", a.MeanAcceptLength)
				})
			}
		}
	}
}
