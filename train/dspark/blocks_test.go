package dspark

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/train/dataset"
	tdflash "github.com/drafter-ai/drafter/train/dflash"
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
	cand := tdflash.AnchorCandidates(nil, mask, 0)
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

// The trainer's blocks of a real read: slot k of the block anchored at p
// has the anchor's embedding (slot 0) or the mask token's, the label
// x_{p+k+1}, and the target distribution's input is the final-norm state
// at p+k, the position before the label (methods.md §4, silent break 3:
// the label's own position trains the confidence head on the wrong α*).
func TestBuildBlocksAlignment(t *testing.T) {
	o := DefaultOptions()
	o.BlockSize, o.MarkovRank, o.Anchors, o.Seed = 4, 3, 5, 2
	in := tinyInputs(3)
	tr, err := newTrainer(o, in)
	if err != nil {
		t.Fatal(err)
	}
	const i = 1
	s := in.Data.(*dataset.Memory).Samples[i]
	sb, err := tr.read(i, rand.New(rand.NewPCG(1, 1)))
	if err != nil || sb == nil {
		t.Fatalf("read: %v", err)
	}
	B, H := o.BlockSize, in.Config.HiddenSize
	maskTok := tr.g.MaskToken
	for b, bl := range sb.blocks {
		p := bl.Start
		if bl.Ctx != p || bl.Row0 != b*B {
			t.Fatalf("block %d: %+v, want context = the %d positions before the anchor", b, bl, p)
		}
		for k := range B {
			r := b*B + k
			tok := maskTok
			if k == 0 {
				tok = int(s.Tokens[p])
			}
			if !slices.Equal(sb.emb[r*H:(r+1)*H], in.Embed[tok*H:(tok+1)*H]) {
				t.Fatalf("block %d slot %d: embedding is not token %d's", b, k, tok)
			}
			if p+k+1 < len(s.Tokens) && sb.labels[r] != s.Tokens[p+k+1] {
				t.Fatalf("block %d slot %d: label %d, want x_%d = %d", b, k, sb.labels[r], p+k+1, s.Tokens[p+k+1])
			}
			if q := min(p+k, len(s.Tokens)-1); !slices.Equal(sb.final[r*H:(r+1)*H], s.Final[q*H:(q+1)*H]) {
				t.Fatalf("block %d slot %d: target state is not the final-norm state at %d", b, k, q)
			}
		}
	}
}
