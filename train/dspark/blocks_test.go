package dspark

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The shifted labels, the Markov head's prev tokens, the target rows and
// the weights of a block, written out by hand for a sequence whose loss
// mask ends a response span in the middle of the block.
func TestSlotRows(t *testing.T) {
	tokens := []int32{10, 11, 12, 13, 14, 15, 16}
	mask := []bool{false, true, true, true, false, true, true}
	decay := slotDecay(4, 4)
	label, prev, tgt, w := make([]int32, 4), make([]int32, 4), make([]int32, 4), make([]float32, 4)
	slotRows(tokens, mask, 1, decay, label, prev, tgt, w)
	if want := []int32{12, 13, 14, 15}; !slices.Equal(label, want) {
		t.Errorf("labels %v, want %v", label, want)
	}
	if want := []int32{11, 12, 13, 14}; !slices.Equal(prev, want) {
		t.Errorf("prev %v, want %v (anchor, then each slot's own position's token)", prev, want)
	}
	if want := []int32{1, 2, 3, 4}; !slices.Equal(tgt, want) {
		t.Errorf("target rows %v, want %v (the position before each label)", tgt, want)
	}
	// Slot 2's label x_4 is a prompt token: slots 2 and 3 weigh 0, though
	// slot 3's label is a response token again.
	if want := []float32{1, float32(math.Exp(-0.25)), 0, 0}; !slices.Equal(w, want) {
		t.Errorf("weights %v, want %v", w, want)
	}
	// At the end of the sequence: labels past it are -1 with weight 0.
	slotRows(tokens, mask, 5, decay, label, prev, tgt, w)
	if !slices.Equal(label, []int32{16, -1, -1, -1}) || !slices.Equal(w, []float32{1, 0, 0, 0}) || !slices.Equal(prev[:2], []int32{15, 16}) {
		t.Errorf("end of sequence: labels %v weights %v prev %v", label, w, prev)
	}
}

func TestAnchors(t *testing.T) {
	mask := []bool{false, true, true, false, true, true, true}
	cand := anchorCandidates(nil, mask)
	if want := []int{1, 4, 5}; !slices.Equal(cand, want) {
		t.Fatalf("candidates %v, want %v", cand, want)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	got := sampleAnchors(nil, slices.Clone(cand), 2, rng)
	if len(got) != 2 || !slices.IsSorted(got) || got[0] == got[1] {
		t.Fatalf("sampled %v: want 2 distinct sorted candidates", got)
	}
	for _, a := range got {
		if !slices.Contains(cand, a) {
			t.Fatalf("sampled %d, not a candidate", a)
		}
	}
	if all := sampleAnchors(nil, slices.Clone(cand), 5, rng); !slices.Equal(all, cand) {
		t.Fatalf("more anchors than candidates: %v, want all %v", all, cand)
	}
}
