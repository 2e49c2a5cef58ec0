package drafters

import (
	"slices"
	"testing"
)

// TestTopK: best first, ties to the lower index, k capped at the values,
// and no allocation when idx has room.
func TestTopK(t *testing.T) {
	x := []float32{0.5, 2, -1, 2, 0.5, 3}
	for _, c := range []struct {
		k    int
		want []int
	}{
		{1, []int{5}},
		{3, []int{5, 1, 3}},
		{5, []int{5, 1, 3, 0, 4}},
		{9, []int{5, 1, 3, 0, 4, 2}},
		{0, []int{}},
	} {
		if got := TopK(x, c.k, nil); !slices.Equal(got, c.want) {
			t.Errorf("TopK(%v, %d) = %v, want %v", x, c.k, got, c.want)
		}
	}
	idx := make([]int, 0, 3)
	if a := testing.AllocsPerRun(10, func() { idx = TopK(x, 3, idx) }); a != 0 {
		t.Fatalf("TopK into a large enough slice allocates %v times", a)
	}
}
