package layerids

import (
	"slices"
	"testing"
)

// TestFourSpellingsRoundTrip: the same Hugging Face indices written in each
// of the four spellings read back as themselves, and the spellings differ by
// exactly the table's offset (the off-by-one that loads silently).
func TestFourSpellingsRoundTrip(t *testing.T) {
	const L = 36
	hf := []int{2, 10, 18, 26, 34} // Qwen3-8B's DFlash default, output-of-layer [1,9,17,25,33]
	want := map[Spelling][]int{
		EAGLEAux:       {2, 10, 18, 26, 34},
		DFlashTarget:   {1, 9, 17, 25, 33},
		SpeculatorsAux: {2, 10, 18, 26, 34},
		DeepSpecTarget: {1, 9, 17, 25, 33},
	}
	for s, w := range want {
		ids, err := Encode(s, hf)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, w) {
			t.Errorf("%s: Encode = %v, want %v", s, ids, w)
		}
		back, err := Decode(s, ids, L)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(back, hf) {
			t.Errorf("%s: Decode(Encode) = %v, want %v", s, back, hf)
		}
	}
	// The embedding output: only DeepSpec's -1 spells it among the
	// output-of-layer spellings.
	if ids, err := Encode(DeepSpecTarget, []int{0}); err != nil || ids[0] != -1 {
		t.Errorf("DeepSpecTarget of index 0 = %v, %v; want -1", ids, err)
	}
	if _, err := Encode(DFlashTarget, []int{0}); err == nil {
		t.Error("DFlashTarget wrote the embedding output")
	}
}

// TestDecodeRange: ids past the target's last layer or below the spelling's
// smallest are refused.
func TestDecodeRange(t *testing.T) {
	for _, c := range []struct {
		s   Spelling
		ids []int
		ok  bool
	}{
		{EAGLEAux, []int{5}, true}, {EAGLEAux, []int{6}, false}, {EAGLEAux, []int{-1}, false},
		{DFlashTarget, []int{4}, true}, {DFlashTarget, []int{5}, false}, {DFlashTarget, []int{-1}, false},
		{DeepSpecTarget, []int{-1}, true}, {DeepSpecTarget, []int{-2}, false},
		{Spelling(9), []int{1}, false},
	} {
		_, err := Decode(c.s, c.ids, 5)
		if (err == nil) != c.ok {
			t.Errorf("Decode(%s, %v, 5): err %v, want ok=%v", c.s, c.ids, err, c.ok)
		}
	}
}

// TestDFlashDefault: the reference trainers' published lists (Qwen3-8B:
// 36 layers, 5 draft layers gives [1,9,17,25,33]; one draft layer reads
// the middle one), and Python's half-to-even rounding where it matters.
func TestDFlashDefault(t *testing.T) {
	for _, c := range []struct {
		L, n int
		want []int
	}{
		{36, 5, []int{1, 9, 17, 25, 33}},
		{36, 1, []int{18}},
		{5, 1, []int{2}},
		// 1 + i*3/2 for i=0..2: 1, 2.5 -> 2 (half to even), 4.
		{7, 3, []int{1, 2, 4}},
		// 1 + i*5/2: 1, 3.5 -> 4, 6.
		{9, 3, []int{1, 4, 6}},
	} {
		if got := DFlashDefault(c.L, c.n); !slices.Equal(got, c.want) {
			t.Errorf("DFlashDefault(%d, %d) = %v, want %v", c.L, c.n, got, c.want)
		}
	}
	if roundHalfEven(-0.5) != 0 || roundHalfEven(-1.5) != -2 || roundHalfEven(2.5) != 2 || roundHalfEven(3.5) != 4 {
		t.Error("roundHalfEven disagrees with Python's round")
	}
}
