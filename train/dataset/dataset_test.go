package dataset

import (
	"strings"
	"testing"
)

func TestMemoryAndCheck(t *testing.T) {
	f := [][]float32{{1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}}
	m := &Memory{H: 2, Samples: []Sample{{Tokens: []int32{1, 2}, LossMask: []bool{false, true}, Final: []float32{1, 2, 3, 4}, Features: f}}}
	var s Sample
	if err := m.Sample(0, &s, Final|Features); err != nil || len(s.Final) != 4 || s.Features[2][0] != 3 {
		t.Fatalf("read with states: %v %+v", err, s)
	}
	if err := m.Sample(0, &s, TokensOnly); err != nil || len(s.Final) != 0 || len(s.Features[0]) != 0 || len(s.Tokens) != 2 {
		t.Fatalf("tokens-only read: %v %+v", err, s)
	}
	if cap(s.Final) == 0 {
		t.Fatal("tokens-only read dropped the caller's Final buffer instead of keeping it for reuse")
	}
	if err := m.Sample(0, &s, Final); err != nil || len(s.Final) != 4 || len(s.Features[1]) != 0 {
		t.Fatalf("final-only read: %v %+v", err, s)
	}
	if err := Check(0, &s, Final, 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := Check(0, &s, Final|Features, 2, 3); err == nil || !strings.Contains(err.Error(), "feature layer 0") {
		t.Fatalf("missing features accepted: %v", err)
	}
	if err := Check(0, &s, Final, 2, 2); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Fatalf("token id 2 with vocab 2 accepted: %v", err)
	}
	if err := Check(0, &s, Final, 3, 3); err == nil {
		t.Fatal("wrong hidden width accepted")
	}
	if err := m.Sample(1, &s, Final); err == nil {
		t.Fatal("out-of-range sample accepted")
	}
	noFeat := &Memory{H: 2, Samples: []Sample{{Tokens: []int32{1, 2}, LossMask: []bool{false, true}, Final: []float32{1, 2, 3, 4}}}}
	if err := noFeat.Sample(0, &s, Features); err == nil || !strings.Contains(err.Error(), "feature layer") {
		t.Fatalf("features requested from a sample without them: %v", err)
	}
}
