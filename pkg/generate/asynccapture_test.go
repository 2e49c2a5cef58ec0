package generate

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// copierDevice is the CPU device with a tensor.StateCopier that behaves as
// the GPU's may: Start takes the sources' values (which the next pass
// overwrites) but a buffer becomes readable only at Wait, and a buffer's
// host memory is poisoned with NaN when it is started again, so that an
// engine reading states before their Wait, or after starting the buffer
// over, stores NaN.
type copierDevice struct {
	*cpu.Device
}

func (d *copierDevice) Sibling() tensor.Device {
	return &copierDevice{Device: d.Device.Sibling().(*cpu.Device)}
}

func (d *copierDevice) NewStateCopy(parts, cols int) (tensor.StateCopy, error) {
	return &fakeCopy{d: d, parts: parts}, nil
}

type fakeCopy struct {
	d        *copierDevice
	parts    int
	staged   [2][][]float32
	host     [2][][]float32
	busy     [2]bool
	closed   bool
	started  int
	waitedOn int
}

func (c *fakeCopy) Start(b int, srcs []tensor.Tensor) {
	if c.busy[b] {
		panic(fmt.Sprintf("buffer %d started in flight", b))
	}
	if len(srcs) != c.parts {
		panic("parts")
	}
	c.staged[b] = c.staged[b][:0]
	for _, t := range srcs {
		v, _ := c.d.HostF32(t)
		c.staged[b] = append(c.staged[b], slices.Clone(v))
	}
	for _, h := range c.host[b] {
		for i := range h {
			h[i] = float32(math.NaN())
		}
	}
	c.busy[b] = true
	c.started++
}

func (c *fakeCopy) Wait(b int) [][]float32 {
	if !c.busy[b] {
		panic(fmt.Sprintf("buffer %d waited on idle", b))
	}
	c.busy[b] = false
	c.waitedOn++
	c.host[b] = c.host[b][:0]
	for _, v := range c.staged[b] {
		c.host[b] = append(c.host[b], slices.Clone(v))
	}
	return c.host[b]
}

func (c *fakeCopy) Close() error { c.closed = true; return nil }

// TestAsyncCaptureEqualsSync: with a device that copies states behind the
// next pass (copierDevice), the engine's captured states and tokens equal
// those read at the end of each pass bit for bit, at batch 1 and batch 3
// with refills and jobs ending at a stop id and at the length limit, greedy
// and sampled; every started copy is waited on, and Close frees the copier.
func TestAsyncCaptureEqualsSync(t *testing.T) {
	dev := &copierDevice{Device: cpu.New(nil)}
	tg, err := target.Load(testutil.Stories260k(), dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	m := tg.Model
	dot, _ := tg.Tok.TokenID(".")
	stop := append(slices.Clone(tg.Stop), dot)
	var jobs []Job
	for i, p := range []string{"Once upon a time", "Lily saw a dog", "The sun", "Tom and Sue went to the park", "One day"} {
		jobs = append(jobs, Job{Stream: uint64(i), Prompt: tg.Tok.Encode(p, true), MaxNew: 3 + 6*i})
	}
	run := func(p sample.Params, batch int, sync bool) []Done {
		e, err := NewEngine(m, EngineOptions{Params: p, Seed: 9, Stop: stop, Batch: batch, Capacity: 64, Taps: []int{1, 3, m.NumLayers()}, SyncCapture: sync})
		if err != nil {
			t.Fatal(err)
		}
		if e.CapturesAsync() == sync {
			t.Fatalf("sync %v: the engine captures asynchronously: %v", sync, e.CapturesAsync())
		}
		var out []Done
		if err := e.Run(context.Background(), jobs, func(d Done) error {
			c := Done{Job: d.Job, Tokens: slices.Clone(d.Tokens), Finish: d.Finish}
			for _, s := range d.States {
				c.States = append(c.States, slices.Clone(s))
			}
			out = append(out, c)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !sync {
			fc := e.copier.(*fakeCopy)
			if fc.waitedOn != fc.started || fc.started == 0 {
				t.Fatalf("%d copies started, %d waited on", fc.started, fc.waitedOn)
			}
			if err := e.Close(); err != nil || !fc.closed {
				t.Fatalf("Close: %v, copier closed %v", err, fc.closed)
			}
		}
		return out
	}
	for _, p := range []sample.Params{{}, {Temperature: 1, TopP: 0.9}} {
		for _, batch := range []int{1, 3} {
			async, sync := run(p, batch, false), run(p, batch, true)
			eos := 0
			for i := range sync {
				a, s := async[i], sync[i]
				if a.Job != s.Job || !slices.Equal(a.Tokens, s.Tokens) || a.Finish != s.Finish {
					t.Fatalf("%v batch %d job %d: async %v %s, sync %v %s", p, batch, i, a.Tokens, a.Finish, s.Tokens, s.Finish)
				}
				if s.Finish == FinishEOS {
					eos++
				}
				for tp := range s.States {
					if !slices.Equal(a.States[tp], s.States[tp]) {
						t.Fatalf("%v batch %d job %d tap %d: the states differ", p, batch, i, tp)
					}
				}
			}
			if eos == 0 || eos == len(jobs) {
				t.Fatalf("%v batch %d: %d of %d jobs ended at a stop id; want both kinds", p, batch, eos, len(jobs))
			}
		}
	}
}
