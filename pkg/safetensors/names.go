package safetensors

import (
	"strconv"
	"strings"
)

// NameIndices matches a tensor name against pattern, whose "#" parts stand
// for decimal numbers ("blocks.#.layers.#.weight"), and returns those
// numbers (empty, not nil, for a pattern without any), or nil when name does
// not match. A number is matched only in its
// canonical spelling ("01" and "-1" do not match "#"), so that one tensor has
// one name.
func NameIndices(name, pattern string) []int {
	np, pp := strings.Split(name, "."), strings.Split(pattern, ".")
	if len(np) != len(pp) {
		return nil
	}
	out := make([]int, 0, strings.Count(pattern, "#"))
	for i, p := range pp {
		if p != "#" {
			if np[i] != p {
				return nil
			}
			continue
		}
		n, err := strconv.Atoi(np[i])
		if err != nil || n < 0 || strconv.Itoa(n) != np[i] {
			return nil
		}
		out = append(out, n)
	}
	return out
}
