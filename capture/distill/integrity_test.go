package distill

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/model"
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
	m, err := model.Load(storiesDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	H := m.HiddenSize()
	m.LMHead = slices.Clone(m.LMHead) // untie: only the token's input embedding is broken
	m.Embed[badID*H] = float32(math.NaN())
	nan, err := generate.New(m, tg.Tok, nil, tg.Config, tg.Gen)
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
	m, err := model.Load(storiesDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	H := m.HiddenSize()
	m.LMHead = slices.Clone(m.LMHead)
	ids := tg.Tok.Encode("Once upon a time", true)
	m.Embed[ids[2]*H+5] = float32(math.NaN()) // position 2 of the second record, hidden_states index 0 upwards
	nan, err := generate.New(m, tg.Tok, nil, tg.Config, tg.Gen)
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
