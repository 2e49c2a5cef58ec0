package generate

import (
	"context"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/pkg/sample"
)

// TestDeviceSamplingEqualsHost: where the rule lets the device draw the
// tokens (greedy, or temperature alone), the engine's generations on the CPU
// device equal those of host sampling (pkg/sample) token for token, with
// --batch 1 and a batch of 3 refilled as jobs end; with top-p it samples on
// the host.
func TestDeviceSamplingEqualsHost(t *testing.T) {
	tg := loadStories(t)
	m := tg.Model
	dot, _ := tg.Tok.TokenID(".")
	stop := append(slices.Clone(tg.Stop), dot)
	var jobs []Job
	for i, p := range []string{"Once upon a time", "Lily saw a dog", "The sun", "Tom and Sue went to the park", "One day", "A cat"} {
		jobs = append(jobs, Job{Stream: uint64(10 + i), Prompt: tg.Tok.Encode(p, true), MaxNew: 4 + 5*i})
	}
	run := func(p sample.Params, batch int, host bool) [][]int {
		e, err := NewEngine(m, EngineOptions{Params: p, Seed: 3, Stop: stop, Batch: batch, Capacity: 64, Taps: []int{1}, HostSampling: host})
		if err != nil {
			t.Fatal(err)
		}
		if e.SamplesOnDevice() == host {
			t.Fatalf("%v host sampling %v: the engine samples on the device: %v", p, host, e.SamplesOnDevice())
		}
		var out [][]int
		if err := e.Run(context.Background(), jobs, func(d Done) error {
			out = append(out, slices.Clone(d.Tokens))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, p := range []sample.Params{{}, {Temperature: 1}, {Temperature: 0.6}, {Temperature: 1.4, TopK: m.VocabSize(), TopP: 1}} {
		if !DeviceSamples(p, m.VocabSize()) {
			t.Fatalf("%v: the device should draw", p)
		}
		for _, batch := range []int{1, 3} {
			dev, host := run(p, batch, false), run(p, batch, true)
			if !slices.EqualFunc(dev, host, slices.Equal[[]int]) {
				t.Fatalf("%v batch %d: the device drew\n%v\nthe host\n%v", p, batch, dev, host)
			}
		}
	}
	for _, p := range []sample.Params{{Temperature: 1, TopP: 0.9}, {Temperature: 1, TopK: 40}, {Temperature: 1, MinP: 0.05}} {
		if DeviceSamples(p, m.VocabSize()) {
			t.Fatalf("%v: the device cannot apply it", p)
		}
	}
}
