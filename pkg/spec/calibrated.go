package spec

import (
	"container/heap"
	"fmt"
	"slices"
)

// CalibratedChoices returns the Medusa sparse tree of at most nodes paths
// that maximises the expected acceptance length when head d ranks the token
// the target will produce at position r with probability acc[d][r]
// independently of the other heads (Medusa's tree construction from
// calibration accuracies). A path's probability of being accepted is the
// product of its choices' accuracies, and a tree's expected acceptance length
// is 1 plus the sum over its paths, so the best tree of n paths is the n most
// probable paths: a child is never more probable than its parent, which keeps
// the set closed under prefixes. It is grown best-first from the root; ties
// go to the shorter, then the lexicographically smaller path, so the result
// is a pure function of acc. Paths are listed by depth, then
// lexicographically. Choices with zero accuracy are never taken, so the tree
// may have fewer than nodes paths. Accuracies are expected to fall with the
// rank, as measured ones do (a choice is offered only after its better-ranked
// sibling); where a row does not, the tree is still valid but may fall short
// of the optimum.
func CalibratedChoices(acc [][]float64, nodes int) (Choices, error) {
	if nodes < 1 {
		return nil, fmt.Errorf("spec: a calibrated tree needs at least 1 node, got %d", nodes)
	}
	if len(acc) == 0 {
		return nil, fmt.Errorf("spec: a calibrated tree needs the accuracy of at least one head")
	}
	for d, row := range acc {
		if len(row) == 0 {
			return nil, fmt.Errorf("spec: head %d has no rank accuracies", d)
		}
		for r, p := range row {
			if !(p >= 0 && p <= 1) {
				return nil, fmt.Errorf("spec: head %d rank %d accuracy %v is not a probability", d, r, p)
			}
		}
	}
	q := &pathQueue{}
	push := func(path []int, prob float64) {
		if prob > 0 {
			heap.Push(q, scoredPath{path: path, prob: prob})
		}
	}
	push([]int{0}, acc[0][0])
	var c Choices
	for len(c) < nodes && q.Len() > 0 {
		best := heap.Pop(q).(scoredPath)
		c = append(c, best.path)
		d, r := len(best.path)-1, best.path[len(best.path)-1]
		// The next sibling: the same parent's next-ranked choice.
		if r+1 < len(acc[d]) {
			sib := slices.Clone(best.path)
			sib[d] = r + 1
			push(sib, best.prob/acc[d][r]*acc[d][r+1])
		}
		// The first child: the next head's best choice below this path.
		if d+1 < len(acc) {
			push(append(slices.Clone(best.path), 0), best.prob*acc[d+1][0])
		}
	}
	slices.SortFunc(c, func(a, b []int) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return slices.Compare(a, b)
	})
	return c, nil
}

// ExpectedTreeLength returns the expected acceptance length of tree c under
// the independence assumption of CalibratedChoices: 1 plus, over the paths,
// the product of their choices' accuracies (a choice beyond a head's
// measured ranks counts as never right).
func ExpectedTreeLength(c Choices, acc [][]float64) float64 {
	e := 1.0
	for _, p := range c {
		prob := 1.0
		for d, r := range p {
			if d >= len(acc) || r >= len(acc[d]) {
				prob = 0
				break
			}
			prob *= acc[d][r]
		}
		e += prob
	}
	return e
}

// scoredPath is a candidate path and its probability of being accepted.
type scoredPath struct {
	path []int
	prob float64
}

// pathQueue is a max-heap of candidate paths by probability, then shorter,
// then lexicographically smaller.
type pathQueue []scoredPath

func (q pathQueue) Len() int { return len(q) }
func (q pathQueue) Less(i, j int) bool {
	a, b := q[i], q[j]
	if a.prob != b.prob {
		return a.prob > b.prob
	}
	if len(a.path) != len(b.path) {
		return len(a.path) < len(b.path)
	}
	return slices.Compare(a.path, b.path) < 0
}
func (q pathQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *pathQueue) Push(x any)   { *q = append(*q, x.(scoredPath)) }
func (q *pathQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
