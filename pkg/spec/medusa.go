package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Choices is a Medusa static sparse tree in the format of Medusa's
// `medusa_choices` (and the --tree flag): a list of paths, each a list of
// top-k choice indices, one per depth. [2, 0] is the node reached by taking
// head 0's third-best token and then head 1's best token. Every proper prefix
// of a path must itself be a path.
type Choices [][]int

// ParseChoices parses a JSON list of paths, e.g. [[0],[1],[0,0],[0,1]], and
// validates it.
func ParseChoices(data []byte) (Choices, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var c Choices
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("spec: tree choices: want a JSON list of paths such as [[0],[1],[0,0]]: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("spec: tree choices: unexpected data after the list at byte %d", dec.InputOffset())
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// pathString renders a path as JSON for error messages.
func pathString(p []int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, v := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, v)
	}
	b.WriteByte(']')
	return b.String()
}

// Validate checks that c is a non-empty set of distinct, non-empty paths of
// non-negative indices, closed under prefixes. Errors name the offending path.
func (c Choices) Validate() error {
	if len(c) == 0 {
		return fmt.Errorf("spec: tree choices: the list is empty; want at least one path such as [0]")
	}
	seen := make(map[string]int, len(c))
	for i, p := range c {
		if len(p) == 0 {
			return fmt.Errorf("spec: tree choices: path %d is empty; every path needs at least one index", i)
		}
		for _, v := range p {
			if v < 0 {
				return fmt.Errorf("spec: tree choices: path %d %s has a negative choice index %d", i, pathString(p), v)
			}
		}
		k := pathString(p)
		if j, dup := seen[k]; dup {
			return fmt.Errorf("spec: tree choices: path %d %s repeats path %d", i, k, j)
		}
		seen[k] = i
	}
	for i, p := range c {
		for d := 1; d < len(p); d++ {
			if _, ok := seen[pathString(p[:d])]; !ok {
				return fmt.Errorf("spec: tree choices: path %d %s: its prefix %s is missing (every prefix of a path must be a path)", i, pathString(p), pathString(p[:d]))
			}
		}
	}
	return nil
}

// Depth reports the length of the longest path: the number of Medusa heads the
// tree needs.
func (c Choices) Depth() int {
	d := 0
	for _, p := range c {
		d = max(d, len(p))
	}
	return d
}

// Widths reports, per depth, the largest choice index plus one: how many top
// candidates the tree needs from each head.
func (c Choices) Widths() []int {
	w := make([]int, c.Depth())
	for _, p := range c {
		for d, v := range p {
			w[d] = max(w[d], v+1)
		}
	}
	return w
}

// ProductChoices returns the full tree that takes the widths[d] best
// candidates of head d under every node of depth d: for widths [3,2,2,1] the
// 3 + 3*2 + 3*2*2 + 3*2*2*1 = 33 paths. Paths are listed by depth, then
// lexicographically.
func ProductChoices(widths []int) Choices {
	var c Choices
	level := [][]int{{}}
	for _, w := range widths {
		var next [][]int
		for _, p := range level {
			for k := range w {
				q := append(append(make([]int, 0, len(p)+1), p...), k)
				next = append(next, q)
			}
		}
		c = append(c, next...)
		level = next
	}
	return c
}

// DefaultWidths returns the per-depth widths of DefaultChoices: 3, 2, 2, then
// 1 for every further head.
func DefaultWidths(heads int) []int {
	w := make([]int, heads)
	for h := range w {
		switch h {
		case 0:
			w[h] = 3
		case 1, 2:
			w[h] = 2
		default:
			w[h] = 1
		}
	}
	return w
}

// DefaultChoices returns drafter's default static tree for a number of Medusa
// heads: the product tree of DefaultWidths (3 children at depth 1, 2 under each
// node at depths 2 and 3, 1 below), 33 nodes for 4 heads (3/9/21/33/45 nodes
// for 1-5 heads). It spends the budget where Medusa heads are accurate enough
// to pay off: head 0's top 3 and head 1-2's top 2.
func DefaultChoices(heads int) Choices {
	return ProductChoices(DefaultWidths(heads))
}

// StaticTree is a validated Choices laid out for building candidate trees
// quickly at every decoding step: paths sorted by depth then
// lexicographically (Medusa's layout), with parent indices resolved once.
type StaticTree struct {
	paths  Choices
	parent []int // per path, index of the parent path or Root
	widths []int
}

// CompileChoices validates c and prepares it for Build.
func CompileChoices(c Choices) (*StaticTree, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	paths := make(Choices, len(c))
	for i, p := range c {
		paths[i] = slices.Clone(p)
	}
	slices.SortStableFunc(paths, func(a, b []int) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return slices.Compare(a, b)
	})
	index := make(map[string]int, len(paths))
	for i, p := range paths {
		index[pathString(p)] = i
	}
	parent := make([]int, len(paths))
	for i, p := range paths {
		parent[i] = Root
		if len(p) > 1 {
			parent[i] = index[pathString(p[:len(p)-1])]
		}
	}
	return &StaticTree{paths: paths, parent: parent, widths: c.Widths()}, nil
}

// Len reports the number of nodes the tree drafts.
func (s *StaticTree) Len() int { return len(s.paths) }

// Depth reports the number of heads the tree needs.
func (s *StaticTree) Depth() int { return len(s.widths) }

// Widths reports how many top candidates the tree needs from each head.
func (s *StaticTree) Widths() []int { return slices.Clone(s.widths) }

// Choices returns the paths in the tree's node order (node i is path i).
func (s *StaticTree) Choices() Choices {
	c := make(Choices, len(s.paths))
	for i, p := range s.paths {
		c[i] = slices.Clone(p)
	}
	return c
}

// Build fills t with the candidate tree for one decoding step. topk[h] lists
// Medusa head h's candidate tokens for the position after the root, best
// first; the node of path [i0, i1, ...] at depth d gets topk[d-1][i_{d-1}].
// (Medusa heads all read the root's hidden state, so a node's token does not
// depend on its parent's.) Node i of t is path i of Choices(); Rank is the
// path's last index.
func (s *StaticTree) Build(t *Tree, topk [][]int) error {
	if len(topk) < len(s.widths) {
		return fmt.Errorf("spec: static tree of depth %d needs candidates from %d heads; got %d", len(s.widths), len(s.widths), len(topk))
	}
	for h, w := range s.widths {
		if len(topk[h]) < w {
			return fmt.Errorf("spec: static tree needs the top %d candidates of head %d; got %d", w, h, len(topk[h]))
		}
	}
	t.Reset()
	for i, p := range s.paths {
		d := len(p)
		k := p[d-1]
		if _, err := t.Add(topk[d-1][k], s.parent[i], k, 0); err != nil {
			return fmt.Errorf("spec: static tree path %s: %w", pathString(p), err)
		}
	}
	return nil
}
