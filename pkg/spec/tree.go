// Package spec holds the model-independent logic of speculative decoding:
// draft token trees (Medusa's static sparse trees and EAGLE-2's dynamic trees),
// verification of a tree against the target model's logits (greedy, lossless
// speculative sampling, Medusa's typical acceptance) and acceptance
// statistics. The models themselves stay outside: the eval command runs the
// draft through an Expander callback and the target on the tree in one forward,
// and passes the logits here.
//
// Conventions shared by the whole package:
//   - A Tree holds the drafted tokens only. The root is the committed prefix
//     (its last token is the last position the target has seen or is about to
//     see); nodes whose Parent is Root (-1) are its children, at depth 1.
//   - Node indices are a topological order: a node's parent always has a
//     smaller index.
//   - Per-position rows (target logits, draft distributions, attention masks)
//     have one row for the root followed by one row per node: row 0 is the
//     root, row i+1 is node i. The row of a position holds the distribution of
//     the token that follows it.
package spec

import "fmt"

// Root is the parent index of the nodes attached directly to the committed
// prefix.
const Root = -1

// Node is one drafted token.
type Node struct {
	// Token is the drafted token id.
	Token int
	// Parent is the index of the parent node, or Root.
	Parent int
	// Depth is the distance from the root: 1 for the root's children.
	Depth int
	// Rank is the token's position among the draft's candidates at the
	// parent (0 = the draft's best): the Medusa choice index, the EAGLE
	// top-k rank, or the order of sampling.
	Rank int
	// Score is the draft's cumulative log-probability of the path from the
	// root to this node (EAGLE-2's ranking score); 0 where the builder does
	// not score nodes.
	Score float64
}

// Tree is a drafted token tree. Build it with Add; the zero value is an empty
// tree. Its methods never allocate except to grow the slices passed to them.
type Tree struct {
	nodes       []Node
	firstChild  []int // per node, -1 when a leaf
	lastChild   []int
	nextSibling []int
	rootFirst   int // first child of the root, -1 when the tree is empty
	rootLast    int
	maxDepth    int
}

// Reset empties t, keeping its memory.
func (t *Tree) Reset() {
	t.nodes = t.nodes[:0]
	t.firstChild = t.firstChild[:0]
	t.lastChild = t.lastChild[:0]
	t.nextSibling = t.nextSibling[:0]
	t.rootFirst, t.rootLast, t.maxDepth = -1, -1, 0
}

// Add appends a node for token under parent (a node index or Root) and returns
// its index. The node's depth is derived from the parent; children are kept
// in the order they are added, which is the order verification tries them.
func (t *Tree) Add(token, parent, rank int, score float64) (int, error) {
	n := len(t.nodes)
	if n == 0 {
		t.rootFirst, t.rootLast, t.maxDepth = -1, -1, 0
	}
	if parent < Root || parent >= n {
		return -1, fmt.Errorf("spec: node %d (token %d): parent %d out of range [-1, %d)", n, token, parent, n)
	}
	if token < 0 {
		return -1, fmt.Errorf("spec: node %d: negative token id %d", n, token)
	}
	depth := 1
	if parent != Root {
		depth = t.nodes[parent].Depth + 1
	}
	t.nodes = append(t.nodes, Node{Token: token, Parent: parent, Depth: depth, Rank: rank, Score: score})
	t.firstChild = append(t.firstChild, -1)
	t.lastChild = append(t.lastChild, -1)
	t.nextSibling = append(t.nextSibling, -1)
	if parent == Root {
		if t.rootLast < 0 {
			t.rootFirst = n
		} else {
			t.nextSibling[t.rootLast] = n
		}
		t.rootLast = n
	} else {
		if t.lastChild[parent] < 0 {
			t.firstChild[parent] = n
		} else {
			t.nextSibling[t.lastChild[parent]] = n
		}
		t.lastChild[parent] = n
	}
	if depth > t.maxDepth {
		t.maxDepth = depth
	}
	return n, nil
}

// Len reports the number of drafted nodes (the root excluded).
func (t *Tree) Len() int { return len(t.nodes) }

// Node returns node i.
func (t *Tree) Node(i int) Node { return t.nodes[i] }

// Nodes returns the nodes in index (topological) order. The slice is t's own
// storage: read it, do not modify it.
func (t *Tree) Nodes() []Node { return t.nodes }

// MaxDepth reports the depth of the deepest node (0 for an empty tree).
func (t *Tree) MaxDepth() int {
	if len(t.nodes) == 0 {
		return 0
	}
	return t.maxDepth
}

// FirstChild returns the first child of parent (a node index or Root), or -1.
// With NextSibling it walks a sibling list without allocating:
//
//	for c := t.FirstChild(p); c >= 0; c = t.NextSibling(c) { ... }
func (t *Tree) FirstChild(parent int) int {
	if parent == Root {
		if len(t.nodes) == 0 {
			return -1
		}
		return t.rootFirst
	}
	return t.firstChild[parent]
}

// NextSibling returns the sibling added after node i, or -1.
func (t *Tree) NextSibling(i int) int { return t.nextSibling[i] }

// Children appends the children of parent (a node index or Root), in the
// order they were added, to dst and returns it.
func (t *Tree) Children(parent int, dst []int) []int {
	for c := t.FirstChild(parent); c >= 0; c = t.nextSibling[c] {
		dst = append(dst, c)
	}
	return dst
}

// IsLeaf reports whether node i has no children.
func (t *Tree) IsLeaf(i int) bool { return t.firstChild[i] < 0 }

// Leaves appends the indices of the leaf nodes to dst in index order.
func (t *Tree) Leaves(dst []int) []int {
	for i := range t.nodes {
		if t.firstChild[i] < 0 {
			dst = append(dst, i)
		}
	}
	return dst
}

// Ancestors appends the ancestors of node i to dst, nearest first (parent,
// grandparent, ..., the depth-1 node); i itself is not included.
func (t *Tree) Ancestors(i int, dst []int) []int {
	for p := t.nodes[i].Parent; p != Root; p = t.nodes[p].Parent {
		dst = append(dst, p)
	}
	return dst
}

// IsAncestor reports whether a is a proper ancestor of b. Root is an ancestor
// of every node.
func (t *Tree) IsAncestor(a, b int) bool {
	if a == Root {
		return true
	}
	for p := t.nodes[b].Parent; p != Root && p >= a; p = t.nodes[p].Parent {
		if p == a {
			return true
		}
	}
	return false
}

// Path appends the node indices from the depth-1 node down to node i
// (inclusive) to dst and returns it.
func (t *Tree) Path(i int, dst []int) []int {
	d := t.nodes[i].Depth
	start := len(dst)
	for range d {
		dst = append(dst, 0)
	}
	for k := start + d - 1; i != Root; k-- {
		dst[k] = i
		i = t.nodes[i].Parent
	}
	return dst
}

// PathTokens appends the tokens from the depth-1 node down to node i to dst.
func (t *Tree) PathTokens(i int, dst []int) []int {
	start := len(dst)
	dst = t.Path(i, dst)
	for k := start; k < len(dst); k++ {
		dst[k] = t.nodes[dst[k]].Token
	}
	return dst
}

// Tokens appends the drafted tokens in node order to dst: the target's input
// for the tree positions (after the root's own token).
func (t *Tree) Tokens(dst []int) []int {
	for _, n := range t.nodes {
		dst = append(dst, n.Token)
	}
	return dst
}

// BreadthFirst appends the node indices ordered by depth (index order within a
// depth) to dst: another topological order, the one Medusa and EAGLE lay the
// tree out in.
func (t *Tree) BreadthFirst(dst []int) []int {
	for d := 1; d <= t.MaxDepth(); d++ {
		for i, n := range t.nodes {
			if n.Depth == d {
				dst = append(dst, i)
			}
		}
	}
	return dst
}

// Positions appends, per row (root then nodes), the offset of the row's
// position after the root: 0 for the root, the depth for a node. The target's
// position id of row r is the root's position plus this offset.
func (t *Tree) Positions(dst []int) []int {
	dst = append(dst, 0)
	for _, n := range t.nodes {
		dst = append(dst, n.Depth)
	}
	return dst
}

// AncestorMask writes the tree attention mask into dst, which must hold
// (Len()+1)^2 entries, row-major with one row and column per position (root
// first): dst[r*(n+1)+c] is true when position c is r itself or one of its
// ancestors (the root is everybody's ancestor). Row r may attend to column c
// exactly when the mask is true (on top of the committed prefix).
func (t *Tree) AncestorMask(dst []bool) error {
	n := len(t.nodes) + 1
	if len(dst) != n*n {
		return fmt.Errorf("spec: ancestor mask of %d entries for a tree of %d positions: want %d", len(dst), n, n*n)
	}
	clear(dst)
	dst[0] = true
	for i, node := range t.nodes {
		r := i + 1
		row := dst[r*n : (r+1)*n]
		// The parent's row is complete (parents precede children).
		p := node.Parent + 1
		copy(row, dst[p*n:(p+1)*n])
		row[r] = true
	}
	return nil
}

// Clone returns a deep copy of t.
func (t *Tree) Clone() *Tree {
	c := &Tree{rootFirst: t.rootFirst, rootLast: t.rootLast, maxDepth: t.maxDepth}
	c.nodes = append([]Node(nil), t.nodes...)
	c.firstChild = append([]int(nil), t.firstChild...)
	c.lastChild = append([]int(nil), t.lastChild...)
	c.nextSibling = append([]int(nil), t.nextSibling...)
	return c
}
