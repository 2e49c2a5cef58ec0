package eagle3

import (
	"fmt"
	"reflect"
	"testing"
)

func TestBuildVocab(t *testing.T) {
	//            id: 0  1  2  3  4  5  6  7
	counts := []int64{5, 0, 9, 5, 1, 0, 9, 0}
	v, err := BuildVocab(counts, 4)
	if err != nil {
		t.Fatal(err)
	}
	// Most frequent: 2 and 6 (9), then 0 and 3 (5, tie broken by lower id: both fit).
	if want := []int32{0, 2, 3, 6}; !reflect.DeepEqual(v.IDs, want) {
		t.Fatalf("ids %v, want %v", v.IDs, want)
	}
	if want := []int64{0, 1, 1, 3}; !reflect.DeepEqual(v.D2T, want) {
		t.Fatalf("d2t %v, want %v", v.D2T, want)
	}
	for i, id := range v.IDs {
		if int64(i)+v.D2T[i] != int64(id) || !v.T2D[id] || v.Index[id] != int32(i) {
			t.Fatalf("mapping of draft %d / target %d inconsistent", i, id)
		}
	}
	if n := countTrue(v.T2D); n != 4 {
		t.Fatalf("t2d has %d set, want 4", n)
	}
	// Tie at the cut: count 5 for ids 0 and 3, only one slot left -> id 0.
	v, _ = BuildVocab(counts, 3)
	if want := []int32{0, 2, 6}; !reflect.DeepEqual(v.IDs, want) {
		t.Fatalf("tie: ids %v, want %v", v.IDs, want)
	}
	// Padding: 5 ids seen, 7 wanted -> the two lowest unseen ids (1, 5).
	v, _ = BuildVocab(counts, 7)
	if want := []int32{0, 1, 2, 3, 4, 5, 6}; !reflect.DeepEqual(v.IDs, want) || v.Seen != 5 {
		t.Fatalf("padding: ids %v seen %d, want %v seen 5", v.IDs, v.Seen, want)
	}
	// N above V is capped.
	v, _ = BuildVocab(counts, 100)
	if len(v.IDs) != 8 {
		t.Fatalf("capped vocabulary has %d ids, want 8", len(v.IDs))
	}
	back, err := VocabFromD2T(v.D2T, 8)
	if err != nil || !reflect.DeepEqual(back.IDs, v.IDs) {
		t.Fatalf("VocabFromD2T: %v %v", back, err)
	}
	if _, err := VocabFromD2T([]int64{0, -1}, 8); err == nil {
		t.Fatal("non-ascending d2t accepted")
	}
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

// TestDefaultLayers: the engines' 2, L/2, L-3, and drafter's distinct low,
// middle and last layers where the engines' formula repeats one or leaves
// the model.
func TestDefaultLayers(t *testing.T) {
	for _, c := range []struct {
		l           int
		want, draft string
	}{{32, "[2 16 29]", "[2 16 29]"}, {28, "[2 14 25]", "[2 14 25]"}, {7, "[2 3 4]", "[2 3 4]"},
		{6, "[2 3 3]", "[1 3 6]"}, {5, "[2 2 2]", "[1 3 5]"}} {
		if got := fmt.Sprint(EngineDefaultLayers(c.l)); got != c.want {
			t.Fatalf("L=%d: %s, want %s", c.l, got, c.want)
		}
		if got := fmt.Sprint(DefaultLayers(c.l)); got != c.draft {
			t.Fatalf("L=%d: draft layers %s, want %s", c.l, got, c.draft)
		}
	}
}
