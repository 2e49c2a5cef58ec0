package dataset

import (
	"strings"
	"testing"
)

func TestMemoryAndCheck(t *testing.T) {
	m := &Memory{H: 2, Samples: []Sample{{Tokens: []int32{1, 2}, LossMask: []bool{false, true}, Final: []float32{1, 2, 3, 4}}}}
	var s Sample
	if err := m.Sample(0, &s, false); err != nil || s.Final != nil || len(s.Tokens) != 2 {
		t.Fatalf("tokens-only read: %v %+v", err, s)
	}
	if err := m.Sample(0, &s, true); err != nil || len(s.Final) != 4 {
		t.Fatalf("read with states: %v %+v", err, s)
	}
	if err := Check(0, &s, 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := Check(0, &s, 2, 2); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Fatalf("token id 2 with vocab 2 accepted: %v", err)
	}
	if err := Check(0, &s, 3, 3); err == nil {
		t.Fatal("wrong hidden width accepted")
	}
	if err := m.Sample(1, &s, true); err == nil {
		t.Fatal("out-of-range sample accepted")
	}
}
