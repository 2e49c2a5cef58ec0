package spec

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// DynamicParams configures EAGLE-2's dynamic draft tree. The fields mean what
// EAGLE's total_token, depth and top_k mean, so that settings carry over.
type DynamicParams struct {
	// Depth is the number of expansion rounds after the root's: the draft
	// runs Depth+1 times and the tree is at most Depth+1 deep (EAGLE's
	// depth, default 7).
	Depth int
	// TopK is the number of children scored under each frontier node and
	// the number of frontier nodes kept per round (EAGLE's top_k, default
	// 10).
	TopK int
	// TotalTokens counts the root plus the drafted nodes kept, so the tree
	// has TotalTokens-1 nodes and the target verifies TotalTokens positions
	// (EAGLE's total_token, default 60).
	TotalTokens int
}

// DefaultDynamicParams returns EAGLE's defaults: depth 7, top-k 10, 60 tokens.
func DefaultDynamicParams() DynamicParams {
	return DynamicParams{Depth: 7, TopK: 10, TotalTokens: 60}
}

// Validate reports the first out-of-range field.
func (p DynamicParams) Validate() error {
	switch {
	case p.Depth < 0:
		return fmt.Errorf("spec: dynamic tree depth %d: want 0 or more expansion rounds", p.Depth)
	case p.TopK < 1:
		return fmt.Errorf("spec: dynamic tree top-k %d: want at least 1", p.TopK)
	case p.TotalTokens < 2:
		return fmt.Errorf("spec: dynamic tree total tokens %d: want at least 2 (the root and one drafted node)", p.TotalTokens)
	}
	return nil
}

// Expander runs the draft model for EAGLE-2's tree construction.
//
// Expand is called once per round with the current frontier, at most TopK
// nodes that all have the same depth: first the single entry Root (the draft
// predicts the token after the committed prefix), then indices into cands,
// the tree of every candidate scored so far (node ids are stable for the whole
// Build, and a frontier node's ancestors are in cands, so the draft can attend
// along each path and look up per-node state, e.g. the hidden state it
// computed for the node's parent). For frontier entry f the expander writes
// the k most probable next tokens under the draft, best first, into
// tokens[f*k:(f+1)*k] and their log-probabilities (<= 0, -Inf allowed for
// padding when the vocabulary is smaller than k) into logps[f*k:(f+1)*k].
// One call per round lets the draft run batched over the whole frontier.
type Expander interface {
	Expand(cands *Tree, frontier []int, k int, tokens []int, logps []float64) error
}

// ExpandFunc adapts a function to Expander.
type ExpandFunc func(cands *Tree, frontier []int, k int, tokens []int, logps []float64) error

// Expand calls f.
func (f ExpandFunc) Expand(cands *Tree, frontier []int, k int, tokens []int, logps []float64) error {
	return f(cands, frontier, k, tokens, logps)
}

// DynamicBuilder builds EAGLE-2 dynamic trees, reusing its buffers across
// decoding steps.
//
// The rule: the root's TopK children are the first frontier, each scored by
// its log-probability. Each round expands every frontier node into its TopK
// children, scored by the cumulative log-probability of the path; all of them
// become candidates and the TopK best become the next frontier. After Depth
// rounds the TotalTokens-1 best candidates form the tree. Because a
// log-probability is <= 0, a node never outscores its parent, and with ties
// broken toward the earlier candidate (parents are created first) the kept set
// always contains the ancestors of every kept node.
type DynamicBuilder struct {
	p        DynamicParams
	cands    Tree
	frontier []int
	next     []int
	tokens   []int
	logps    []float64
	order    []int
	selected []int
	remap    []int
}

// NewDynamicBuilder returns a builder for p.
func NewDynamicBuilder(p DynamicParams) (*DynamicBuilder, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	k := p.TopK
	return &DynamicBuilder{
		p:      p,
		tokens: make([]int, k*k),
		logps:  make([]float64, k*k),
	}, nil
}

// Params reports the builder's parameters.
func (b *DynamicBuilder) Params() DynamicParams { return b.p }

// Candidates returns every candidate scored by the last Build (the tree the
// Expander saw). It is the builder's storage, overwritten by the next Build.
func (b *DynamicBuilder) Candidates() *Tree { return &b.cands }

// Selected returns, for node i of the tree the last Build produced, its index
// in Candidates(). It is the builder's storage.
func (b *DynamicBuilder) Selected() []int { return b.selected }

// Build runs the draft through x and writes the selected tree into out
// (node order: candidate order, which is topological and groups nodes by the
// round that created them).
func (b *DynamicBuilder) Build(out *Tree, x Expander) error {
	k := b.p.TopK
	b.cands.Reset()
	b.frontier = append(b.frontier[:0], Root)
	for round := 0; round <= b.p.Depth; round++ {
		n := len(b.frontier) * k
		toks, lps := b.tokens[:n], b.logps[:n]
		for i := range lps {
			toks[i], lps[i] = -1, math.NaN()
		}
		if err := x.Expand(&b.cands, b.frontier, k, toks, lps); err != nil {
			return fmt.Errorf("spec: dynamic tree round %d (depth %d): %w", round, round+1, err)
		}
		first := b.cands.Len()
		for f, parent := range b.frontier {
			base := 0.0
			if parent != Root {
				base = b.cands.nodes[parent].Score
			}
			for j := range k {
				tok, lp := toks[f*k+j], lps[f*k+j]
				if math.IsNaN(lp) || lp > 0 {
					return fmt.Errorf("spec: dynamic tree round %d: frontier entry %d (node %d) candidate %d has log-probability %v; want a value <= 0", round, f, parent, j, lp)
				}
				if math.IsInf(lp, -1) {
					continue // padding: the draft gives it no mass
				}
				if _, err := b.cands.Add(tok, parent, j, base+lp); err != nil {
					return fmt.Errorf("spec: dynamic tree round %d: %w", round, err)
				}
			}
		}
		if round == b.p.Depth {
			break
		}
		// The TopK best new candidates are the next frontier.
		b.next = b.next[:0]
		for i := first; i < b.cands.Len(); i++ {
			b.next = append(b.next, i)
		}
		if len(b.next) == 0 {
			break
		}
		b.sortByScore(b.next)
		if len(b.next) > k {
			b.next = b.next[:k]
		}
		// Expand in candidate order, so a round's calls are deterministic and
		// frontier order follows the tree layout.
		slices.Sort(b.next)
		b.frontier, b.next = b.next, b.frontier
	}

	// Keep the TotalTokens-1 best candidates.
	b.order = b.order[:0]
	for i := range b.cands.Len() {
		b.order = append(b.order, i)
	}
	b.sortByScore(b.order)
	keep := min(b.p.TotalTokens-1, len(b.order))
	b.selected = append(b.selected[:0], b.order[:keep]...)
	slices.Sort(b.selected)

	b.remap = slices.Grow(b.remap[:0], b.cands.Len())[:b.cands.Len()]
	for i := range b.remap {
		b.remap[i] = -1
	}
	out.Reset()
	for _, c := range b.selected {
		n := b.cands.nodes[c]
		parent := Root
		if n.Parent != Root {
			parent = b.remap[n.Parent]
			if parent < 0 {
				return fmt.Errorf("spec: dynamic tree: candidate %d kept without its parent %d (scores %v and %v): ancestors must score at least as high", c, n.Parent, n.Score, b.cands.nodes[n.Parent].Score)
			}
		}
		i, err := out.Add(n.Token, parent, n.Rank, n.Score)
		if err != nil {
			return err
		}
		b.remap[c] = i
	}
	return nil
}

// sortByScore orders candidate indices by decreasing score, earlier candidate
// first on ties.
func (b *DynamicBuilder) sortByScore(idx []int) {
	nodes := b.cands.nodes
	slices.SortFunc(idx, func(x, y int) int {
		if c := cmp.Compare(nodes[y].Score, nodes[x].Score); c != 0 {
			return c
		}
		return x - y
	})
}
