package eagle3

import (
	"math"
	"testing"
)

// TestSessionFullCache fills a session's committed capacity and its tree
// nodes (the last rows of its cache) and checks that its drafts equal, bit
// for bit, those of a session with room to spare (another row stride of the
// cache), and that the capacity and node limits are refused with errors.
func TestSessionFullCache(t *testing.T) {
	m := loadTarget(t)
	d := randomDraft(t, m, 100, 5)
	H := m.HiddenSize()
	const capacity, nodes = 8, 3
	feats := make([]float32, capacity*3*H)
	for i := range feats {
		feats[i] = float32(i%11)/5 - 1
	}
	toks := []int32{3, 9, 4, 17, 2, 30, 8, 12}
	run := func(s *Session) [][]float32 {
		if err := s.Extend(feats, toks); err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		row := func(nd int) {
			r := make([]float32, m.VocabSize())
			if err := s.TargetLogits(nd, r); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		row(-1)
		ids, err := s.AddNodes([]int{-1, -1}, []int32{5, 6})
		if err != nil {
			t.Fatal(err)
		}
		more, err := s.AddNodes([]int{ids[1]}, []int32{7})
		if err != nil {
			t.Fatal(err)
		}
		for _, nd := range append(ids, more...) {
			row(nd)
		}
		return out
	}
	full, roomy := d.NewSession(capacity, nodes), d.NewSession(64, 10)
	a, b := run(full), run(roomy)
	for i := range a {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				t.Fatalf("node row %d logit %d: %v in a full session, %v in a larger one", i-1, j, a[i][j], b[i][j])
			}
		}
	}
	if _, err := full.AddNodes([]int{-1}, []int32{1}); err == nil {
		t.Fatal("a node past the session's limit was added")
	}
	if err := full.Extend(feats[:3*H], toks[:1]); err == nil {
		t.Fatal("a position past the session's capacity was committed")
	}
	full.Truncate(5)
	if full.Len() != 5 {
		t.Fatalf("after Truncate(5): length %d", full.Len())
	}
	// Committing the dropped positions again gives the same root, bit for bit.
	if err := full.Extend(feats[5*3*H:], toks[5:]); err != nil {
		t.Fatal(err)
	}
	r := make([]float32, m.VocabSize())
	if err := full.TargetLogits(-1, r); err != nil {
		t.Fatal(err)
	}
	for j := range r {
		if math.Float32bits(r[j]) != math.Float32bits(a[0][j]) {
			t.Fatalf("root logit %d after Truncate and Extend: %v, want %v", j, r[j], a[0][j])
		}
	}
}
