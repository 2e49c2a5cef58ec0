package generate

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/pkg/sample"
)

// TestRunErrorReleasesEachSlotOnce stops a run from OnToken in the middle of
// a pass, after an earlier slot of the same pass has ended: every sequence
// must go back to the pool once (a sequence held twice would later serve two
// jobs at once), and the engine must then generate what a fresh one does.
func TestRunErrorReleasesEachSlotOnce(t *testing.T) {
	tg := loadStories(t)
	dot, _ := tg.Tok.TokenID(".")
	stop := append(slices.Clone(tg.Stop), dot)
	var jobs []Job
	for i, p := range []string{"A cat", "Once upon a time", "The sun"} {
		jobs = append(jobs, Job{Stream: uint64(i), Prompt: tg.Tok.Encode(p, true), MaxNew: []int{1, 30, 30}[i]})
	}
	fail := true
	opt := EngineOptions{Seed: 1, Stop: stop, Batch: 3, Capacity: 64,
		OnToken: func(job, id int) error {
			if fail && job == 2 {
				return errors.New("stop")
			}
			return nil
		}}
	e, err := NewEngine(tg.Model, opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(context.Background(), jobs, func(Done) error { return nil }); err == nil {
		t.Fatal("OnToken's error was not returned")
	}
	if len(e.pool) != len(jobs) {
		t.Fatalf("%d sequences back in the pool after %d jobs", len(e.pool), len(jobs))
	}
	for i := range e.pool {
		if slices.Contains(e.pool[i+1:], e.pool[i]) {
			t.Fatalf("the pool holds sequence %d twice", i)
		}
	}
	fail = false
	collect := func(e *Engine) [][]int {
		var out [][]int
		if err := e.Run(context.Background(), jobs, func(d Done) error {
			out = append(out, slices.Clone(d.Tokens))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	fresh, err := NewEngine(tg.Model, EngineOptions{Params: sample.Params{}, Seed: 1, Stop: stop, Batch: 3, Capacity: 64})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := collect(e), collect(fresh); !slices.EqualFunc(got, want, slices.Equal[[]int]) {
		t.Fatalf("after the error the engine generated %v; a fresh one %v", got, want)
	}
}
