package testmodel

import (
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/model"
)

func TestGreedyAndStates(t *testing.T) {
	m, err := model.Load(testutil.Stories260k(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prompt := []int{1, 400, 35}
	full := Greedy(t, m, prompt, 8)
	if len(full) != len(prompt)+8 || !slices.Equal(full[:len(prompt)], prompt) {
		t.Fatalf("Greedy(8) = %v", full)
	}
	// Greedy decoding is deterministic and stops after the first stop token.
	stop := full[len(prompt)+2]
	want := full[:len(prompt)+slices.Index(full[len(prompt):], stop)+1]
	if again := Greedy(t, m, prompt, 8, stop); !slices.Equal(again, want) {
		t.Fatalf("Greedy with stop %d = %v, want %v", stop, again, want)
	}
	L, H := m.NumLayers(), m.HiddenSize()
	states := States(t, m, full, []int{1, L})
	if len(states) != 2 || len(states[0]) != len(full)*H || len(states[1]) != len(full)*H {
		t.Fatalf("States: %d taps of %d, %d values, want 2 of %d", len(states), len(states[0]), len(states[1]), len(full)*H)
	}
	// Each position's state depends on the tokens before it only.
	head := States(t, m, full[:4], []int{L})
	if !slices.Equal(head[0], states[1][:4*H]) {
		t.Fatal("the states of a prefix differ from the prefix of the states")
	}
}
