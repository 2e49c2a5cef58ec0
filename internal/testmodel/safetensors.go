package testmodel

import (
	"bytes"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// SameTensors fails tb unless the safetensors files a and b hold the same
// tensor names with the same bytes (a training checkpoint's weights,
// moments and best weights, say), whatever their metadata.
func SameTensors(tb testing.TB, a, b string) {
	tb.Helper()
	open := func(path string) *safetensors.Set {
		s, err := safetensors.Open(path)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		return s
	}
	sa, sb := open(a), open(b)
	na, nb := slices.Sorted(slices.Values(sa.Names())), slices.Sorted(slices.Values(sb.Names()))
	if !slices.Equal(na, nb) || len(na) == 0 {
		tb.Fatalf("%s holds tensors %v, want %v", b, nb, na)
	}
	for _, n := range na {
		ra, _, err := sa.Raw(n)
		if err != nil {
			tb.Fatal(err)
		}
		rb, _, err := sb.Raw(n)
		if err != nil {
			tb.Fatal(err)
		}
		if !bytes.Equal(ra, rb) {
			tb.Fatalf("tensor %s of %s differs from %s's", n, b, a)
		}
	}
}
