package model

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func loadModel(t testing.TB, name string) *Model {
	t.Helper()
	m, err := Load(testutil.Shared(t, "models/"+name), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func maxAbsDiff32(a []float32, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-b[i]))
	}
	return d
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

type greedyRef struct {
	PromptIDs    []int       `json:"prompt_ids"`
	GeneratedIDs []int       `json:"generated_ids"`
	StepLogits   [][]float64 `json:"step_logits"`
}

// TestGreedyReference decodes the reference prompt greedily, one cached step at
// a time, and checks every generated token and every step's logits against
// llama.cpp's run of the same weights.
func TestGreedyReference(t *testing.T) {
	var ref greedyRef
	readJSON(t, testutil.Shared(t, "reference/stories260k/greedy_once_upon_a_time.json"), &ref)
	if len(ref.GeneratedIDs) != 64 || len(ref.StepLogits) != 64 {
		t.Fatalf("reference has %d tokens and %d logit steps, want 64", len(ref.GeneratedIDs), len(ref.StepLogits))
	}
	for _, name := range []string{"stories260k", "stories260k-untied"} {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name)
			seq, err := m.NewSequence(len(ref.PromptIDs) + len(ref.GeneratedIDs))
			if err != nil {
				t.Fatal(err)
			}
			in := []Input{{Seq: seq, Tokens: ref.PromptIDs}}
			worst := 0.0
			for step := range ref.GeneratedIDs {
				res, err := m.Forward(in, Options{})
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				lg := res.LogitsOf(0)
				if d := maxAbsDiff32(lg, ref.StepLogits[step]); d > 1e-4 {
					t.Fatalf("step %d: logits differ from the reference by %g (> 1e-4)", step, d)
				} else {
					worst = math.Max(worst, d)
				}
				if got := argmax(lg); got != ref.GeneratedIDs[step] {
					t.Fatalf("step %d: greedy token %d, reference %d", step, got, ref.GeneratedIDs[step])
				}
				in[0].Tokens = ref.GeneratedIDs[step : step+1]
			}
			t.Logf("64 greedy tokens match; worst logit difference %.2g", worst)
		})
	}
}

type lastRef struct {
	PromptIDs []int     `json:"prompt_ids"`
	Position  int       `json:"position"`
	Logits    []float64 `json:"logits"`
	Tensors   map[string]struct {
		Last []float64 `json:"last"`
	} `json:"tensors"`
}

// TestLastPositionTaps checks the logits, the embedding output, every layer's
// residual stream and the final norm at the last position of a prompt, all
// read through the taps of one prefill.
func TestLastPositionTaps(t *testing.T) {
	var ref lastRef
	readJSON(t, testutil.Shared(t, "reference/stories260k/last_position_once_upon_a_time_little.json"), &ref)
	for _, name := range []string{"stories260k", "stories260k-untied"} {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name)
			L := m.NumLayers()
			if ref.Position != len(ref.PromptIDs)-1 {
				t.Fatalf("reference position %d is not the last of %d prompt ids", ref.Position, len(ref.PromptIDs))
			}
			seq, err := m.NewSequence(len(ref.PromptIDs))
			if err != nil {
				t.Fatal(err)
			}
			// hidden_states[0..L-1], the pre-norm last layer and hidden_states[L].
			taps := []int{PreNormLast}
			for k := 0; k <= L; k++ {
				taps = append(taps, k)
			}
			res, err := m.Forward([]Input{{Seq: seq, Tokens: ref.PromptIDs}}, Options{Taps: taps})
			if err != nil {
				t.Fatal(err)
			}
			last := func(tap int) []float32 {
				h := res.HiddenOf(tap, 0)
				return h[len(h)-m.HiddenSize():]
			}
			check := func(what string, got []float32, key string) {
				t.Helper()
				want, ok := ref.Tensors[key]
				if !ok {
					t.Fatalf("reference has no tensor %q", key)
				}
				if d := maxAbsDiff32(got, want.Last); d > 1e-4 {
					t.Errorf("%s vs %s: max difference %g (> 1e-4)", what, key, d)
				}
			}
			if d := maxAbsDiff32(res.LogitsOf(0), ref.Logits); d > 1e-4 {
				t.Errorf("logits: max difference %g (> 1e-4)", d)
			}
			check("hidden_states[0]", last(1), "inp_embd")
			for k := 1; k < L; k++ {
				check(fmt.Sprintf("hidden_states[%d]", k), last(k+1), fmt.Sprintf("l_out-%d", k-1))
			}
			check("PreNormLast", last(0), fmt.Sprintf("l_out-%d", L-1))
			check(fmt.Sprintf("hidden_states[%d]", L), last(L+1), "result_norm")
		})
	}
}
