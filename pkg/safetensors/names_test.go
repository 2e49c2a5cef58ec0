package safetensors

import (
	"slices"
	"testing"
)

func TestNameIndices(t *testing.T) {
	for _, c := range []struct {
		name, pattern string
		want          []int
	}{
		{"blocks.3.layers.0.weight", "blocks.#.layers.#.weight", []int{3, 0}},
		{"lm_heads.12.weight", "lm_heads.#.weight", []int{12}},
		{"lm_heads.01.weight", "lm_heads.#.weight", nil},
		{"lm_heads.-1.weight", "lm_heads.#.weight", nil},
		{"lm_heads.x.weight", "lm_heads.#.weight", nil},
		{"lm_heads.1.bias", "lm_heads.#.weight", nil},
		{"lm_heads.1.weight.extra", "lm_heads.#.weight", nil},
		{"norm.weight", "norm.weight", []int{}},
	} {
		got := NameIndices(c.name, c.pattern)
		if (got == nil) != (c.want == nil) || !slices.Equal(got, c.want) {
			t.Errorf("NameIndices(%q, %q) = %v, want %v", c.name, c.pattern, got, c.want)
		}
	}
}
