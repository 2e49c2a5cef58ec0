package distill

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/outlock"
	"github.com/drafter-ai/drafter/pkg/target"
)

// A checkpoint that produces NaN on one prompt stops distill with an error
// naming that prompt's file, line and sample, not an index internal to the
// generation engine.
func TestNaNModelNamesPrompt(t *testing.T) {
	tg := loadStories(t)
	dir := t.TempDir()
	opt := baseOptions(promptFile(t, dir), filepath.Join(dir, "clean"))
	opt.Sampling.Temperature = f64p(0)
	if _, err := Run(context.Background(), tg, opt); err != nil {
		t.Fatal(err)
	}
	// A token of one prompt that no other prompt holds and no response
	// generates: with its embedding broken, that prompt alone fails.
	resps := readResponses(t, opt.Out)
	bad, badID := -1, -1
	for c := range storyPrompts {
		seen := map[int]bool{}
		for i, p := range storyPrompts {
			if i != c {
				for _, id := range tg.Tok.Encode(p, true) {
					seen[id] = true
				}
			}
		}
		for _, r := range resps {
			for _, id := range r.ResponseIDs {
				seen[id] = true
			}
		}
		for _, id := range tg.Tok.Encode(storyPrompts[c], true) {
			if !seen[id] && bad < 0 {
				bad, badID = c, id
			}
		}
	}
	if bad < 0 {
		t.Fatal("every prompt token is in another prompt or a response")
	}
	m, err := model.Load(testutil.Stories260k(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	H := m.HiddenSize()
	m.LMHead.F32 = slices.Clone(m.LMHead.F32) // untie: only the token's input embedding is broken
	m.Embed.F32[badID*H] = float32(math.NaN())
	nan, err := target.New(m, tg.Tok, nil, tg.Config, tg.Gen)
	if err != nil {
		t.Fatal(err)
	}
	opt.Out = filepath.Join(dir, "out")
	_, err = Run(context.Background(), nan, opt)
	want := fmt.Sprintf("distill: %s line %d (sample %d): ", opt.Prompts, bad+1, bad*opt.SamplesPerPrompt)
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "NaN") {
		t.Fatalf("NaN model: %v\nwant it to start with %q and name the NaN", err, want)
	}
}

// Capture (teacher forcing, no sampling) hands the states to the shard
// writer, which refuses a NaN naming the record, sample, position and column.
func TestNaNStateRefusedByCapture(t *testing.T) {
	tg := loadStories(t)
	m, err := model.Load(testutil.Stories260k(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	H := m.HiddenSize()
	m.LMHead.F32 = slices.Clone(m.LMHead.F32)
	ids := tg.Tok.Encode("Once upon a time", true)
	m.Embed.F32[ids[2]*H+5] = float32(math.NaN()) // position 2 of the second record, hidden_states index 0 upwards
	nan, err := target.New(m, tg.Tok, nil, tg.Config, tg.Gen)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conv := writeFile(t, dir, "conv.jsonl", `{"prompt": "Lily saw", "response": " a dog."}`+"\n"+
		`{"prompt": "Once upon a time", "response": " there was a cat."}`+"\n")
	_, err = Capture(context.Background(), nan, CaptureOptions{Conversations: conv, Out: filepath.Join(dir, "c"), Layers: []int{0, 2}})
	if err == nil || !strings.Contains(err.Error(), "record 2: capture: sample 1 position 2 column hidden_0 (element 5 of 64): the model produced NaN") {
		t.Fatalf("NaN state: %v", err)
	}
}

// gate is a progress writer that holds up the run writing to it first until
// the test lets it go.
type gate struct {
	once             sync.Once
	started, proceed chan struct{}
}

func (g *gate) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.started); <-g.proceed })
	return len(p), nil
}

// startGated starts Run(opt) with a progress writer that holds the run at
// its first write, and returns once it is held there, holding its output
// folder's lock. release lets it finish and returns its error.
func startGated(t *testing.T, tg *target.Target, opt Options) (release func() error) {
	t.Helper()
	g := &gate{started: make(chan struct{}), proceed: make(chan struct{})}
	opt.Progress = g
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), tg, opt)
		done <- err
	}()
	select {
	case <-g.started:
	case err := <-done:
		t.Fatalf("the run ended before its first progress write: %v", err)
	}
	return func() error {
		close(g.proceed)
		return <-done
	}
}

// Two distills (or a distill and a capture) into one --out: the second fails
// at once naming the first, even with --force, and the first completes
// exactly as if it had been alone.
func TestConcurrentDistillsOneOut(t *testing.T) {
	tg := loadStories(t)
	dir := t.TempDir()
	ref := baseOptions(promptFile(t, dir), filepath.Join(dir, "ref"))
	if _, err := Run(context.Background(), tg, ref); err != nil {
		t.Fatal(err)
	}
	first := ref
	first.Out = filepath.Join(dir, "out")
	release := startGated(t, tg, first)
	second := ref
	second.Out, second.Force = first.Out, true
	_, err := Run(context.Background(), tg, second)
	var be *outlock.BusyError
	if !errors.As(err, &be) || !strings.HasPrefix(err.Error(), "distill: "+first.Out+` is in use by "drafter distill" (pid `) {
		t.Fatalf("second distill into the same --out: %v", err)
	}
	_, err = Capture(context.Background(), tg, CaptureOptions{Conversations: ref.Prompts, Out: first.Out, Force: true})
	if !errors.As(err, &be) || !strings.HasPrefix(err.Error(), "capture: "+first.Out+` is in use by "drafter distill"`) {
		t.Fatalf("capture into a distill's --out: %v", err)
	}
	if err := release(); err != nil {
		t.Fatalf("first distill: %v", err)
	}
	compareDirs(t, ref.Out, first.Out)
	if _, err := os.Stat(filepath.Join(first.Out, outlock.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file left after the run: %v", err)
	}
}
