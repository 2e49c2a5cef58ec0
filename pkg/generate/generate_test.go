package generate

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/target"
)

func loadStories(t testing.TB) *target.Target {
	t.Helper()
	tg, err := target.Load(testutil.Stories260k(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

// TestGreedyReference reproduces the 64 greedy tokens that Transformers
// generated for the same prompt (in the shared reference data, written by a
// script we did not write this package against).
func TestGreedyReference(t *testing.T) {
	b, err := os.ReadFile(testutil.Shared(t, "reference/stories260k/greedy_once_upon_a_time.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Prompt        string `json:"prompt"`
		PromptIDs     []int  `json:"prompt_ids"`
		NGen          int    `json:"n_gen"`
		GeneratedIDs  []int  `json:"generated_ids"`
		GeneratedText string `json:"generated_text"`
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	tg := loadStories(t)
	n := want.NGen
	st, err := Resolve(tg, Overrides{MaxNewTokens: &n})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Params.Greedy() {
		t.Fatalf("stories260k has no do_sample: want greedy defaults, got %v", st.Params)
	}
	var streamed strings.Builder
	res, err := Generate(context.Background(), tg, Request{Prompt: want.Prompt, Settings: st,
		OnText: func(s string) error { streamed.WriteString(s); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.PromptIDs, want.PromptIDs) {
		t.Fatalf("prompt ids %v, want %v", res.PromptIDs, want.PromptIDs)
	}
	if !slices.Equal(res.GeneratedIDs, want.GeneratedIDs) {
		t.Fatalf("generated %v\nwant      %v", res.GeneratedIDs, want.GeneratedIDs)
	}
	if res.Text != want.GeneratedText || streamed.String() != want.GeneratedText {
		t.Fatalf("text %q (streamed %q), want %q", res.Text, streamed.String(), want.GeneratedText)
	}
	if res.FinishReason != FinishLength {
		t.Fatalf("finish %q", res.FinishReason)
	}
}

func TestBadInput(t *testing.T) {
	tg := loadStories(t)
	st, _ := Resolve(tg, Overrides{})
	if _, err := Generate(context.Background(), tg, Request{Prompt: "  ", Settings: st}); err == nil || !strings.Contains(err.Error(), "empty prompt") {
		t.Fatalf("empty prompt: %v", err)
	}
	n := 2000
	st, err := Resolve(tg, Overrides{MaxNewTokens: &n})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("Once upon a time ", 20)
	if _, err := Generate(context.Background(), tg, Request{Prompt: long, Settings: st}); err == nil || !strings.Contains(err.Error(), "exceeds the model's context") {
		t.Fatalf("long generation: %v", err)
	}
	huge := strings.Repeat("Once upon a time ", 600)
	st, _ = Resolve(tg, Overrides{})
	if _, err := Generate(context.Background(), tg, Request{Prompt: huge, Settings: st}); err == nil || !strings.Contains(err.Error(), "context") {
		t.Fatalf("long prompt: %v", err)
	}
	n = 4096
	if _, err := Resolve(tg, Overrides{MaxNewTokens: &n}); err == nil {
		t.Fatal("max-new-tokens beyond the context accepted")
	}
	if _, err := Generate(context.Background(), tg, Request{Prompt: "hi", Chat: true, Settings: st}); err == nil || !strings.Contains(err.Error(), "no chat template") {
		t.Fatalf("chat without template: %v", err)
	}
}

// TestEngineStatesMatchPrefill checks that the states the engine captures while
// generating (prefill rows, decode-step rows, the capture-only row of the last
// token) equal a teacher-forced prefill of each finished sequence, and that
// tokens do not depend on the batch size.
func TestEngineStatesMatchPrefill(t *testing.T) {
	tg := loadStories(t)
	m := tg.Model
	L := m.NumLayers()
	taps := []int{2, model.PreNormLast, L}
	prompts := []string{"Once upon a time", "Lily saw a dog", "The sun", "Tom and Sue went to the park to play with a ball", "One day"}
	var jobs []Job
	for i, p := range prompts {
		jobs = append(jobs, Job{Stream: uint64(i), Prompt: tg.Tok.Encode(p, true), MaxNew: 3 + 9*i})
	}
	params := sample.Params{Temperature: 1, TopP: 0.95}
	dot, _ := tg.Tok.TokenID(".")
	stop := append(slices.Clone(tg.Stop), dot) // stories260k rarely emits eos in 20 tokens
	run := func(batch int) []Done {
		e, err := NewEngine(m, EngineOptions{Params: params, Seed: 7, Stop: stop, Batch: batch, Capacity: 128, Taps: taps})
		if err != nil {
			t.Fatal(err)
		}
		var out []Done
		err = e.Run(context.Background(), jobs, func(d Done) error {
			c := Done{Job: d.Job, Tokens: append([]int(nil), d.Tokens...), Finish: d.Finish}
			for _, s := range d.States {
				c.States = append(c.States, append([]float32(nil), s...))
			}
			out = append(out, c)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	one, four := run(1), run(4)
	H := m.HiddenSize()
	eos := 0
	for i := range jobs {
		if one[i].Job != i || four[i].Job != i {
			t.Fatalf("emitted out of order: %d, %d at %d", one[i].Job, four[i].Job, i)
		}
		if !slices.Equal(one[i].Tokens, four[i].Tokens) {
			t.Fatalf("job %d: batch 1 generated %v, batch 4 %v", i, one[i].Tokens, four[i].Tokens)
		}
		if one[i].Finish == FinishEOS {
			eos++
			if last := one[i].Tokens[len(one[i].Tokens)-1]; !slices.Contains(stop, last) {
				t.Fatalf("job %d finished with eos but ends with %d", i, one[i].Tokens[len(one[i].Tokens)-1])
			}
		} else if len(one[i].Tokens) != jobs[i].MaxNew {
			t.Fatalf("job %d: length finish after %d of %d tokens", i, len(one[i].Tokens), jobs[i].MaxNew)
		}
		full := append(append([]int(nil), jobs[i].Prompt...), one[i].Tokens...)
		states := testmodel.States(t, m, full, taps)
		for _, got := range []Done{one[i], four[i]} {
			for tp := range taps {
				want := states[tp]
				if len(got.States[tp]) != len(full)*H {
					t.Fatalf("job %d tap %d: %d values, want %d", i, taps[tp], len(got.States[tp]), len(full)*H)
				}
				for k := range want {
					if d := math.Abs(float64(got.States[tp][k] - want[k])); d > 1e-4 {
						t.Fatalf("job %d tap %d position %d: captured %g, teacher-forced %g", i, taps[tp], k/H, got.States[tp][k], want[k])
					}
				}
			}
		}
	}
	if eos == 0 || eos == len(jobs) {
		t.Fatalf("%d of %d jobs ended at a stop id; want both kinds of ending", eos, len(jobs))
	}
}
