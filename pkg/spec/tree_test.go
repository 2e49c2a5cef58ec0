package spec

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/sample"
)

// randomTree makes t a random tree of n nodes (testutil.RandomTree) of
// tokens below vocab.
func randomTree(r *rand.Rand, t *Tree, n, vocab int) {
	t.Reset()
	for _, parent := range testutil.RandomTree(r, n) {
		if _, err := t.Add(r.IntN(vocab), parent, 0, 0); err != nil {
			panic(err)
		}
	}
}

func TestTreeHelpers(t *testing.T) {
	var tr Tree
	// Root children 0, 1; 0 has 2, 3; 2 has 4; 1 has 5.
	for _, a := range [][2]int{{10, Root}, {11, Root}, {12, 0}, {13, 0}, {14, 2}, {15, 1}} {
		if _, err := tr.Add(a[0], a[1], 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := tr.Children(Root, nil); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("root children %v", got)
	}
	if got := tr.Children(0, nil); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("children of 0: %v", got)
	}
	if got := tr.Path(4, nil); !slices.Equal(got, []int{0, 2, 4}) {
		t.Errorf("path to 4: %v", got)
	}
	if got := tr.PathTokens(4, []int{99}); !slices.Equal(got, []int{99, 10, 12, 14}) {
		t.Errorf("path tokens to 4: %v", got)
	}
	if got := tr.Ancestors(4, nil); !slices.Equal(got, []int{2, 0}) {
		t.Errorf("ancestors of 4: %v", got)
	}
	if got := tr.Leaves(nil); !slices.Equal(got, []int{3, 4, 5}) {
		t.Errorf("leaves %v", got)
	}
	if got := tr.BreadthFirst(nil); !slices.Equal(got, []int{0, 1, 2, 3, 5, 4}) {
		t.Errorf("breadth-first %v", got)
	}
	if got := tr.Positions(nil); !slices.Equal(got, []int{0, 1, 1, 2, 2, 3, 2}) {
		t.Errorf("positions %v", got)
	}
	if tr.MaxDepth() != 3 {
		t.Errorf("max depth %d", tr.MaxDepth())
	}
	if _, err := tr.Add(1, 6, 0, 0); err == nil || !strings.Contains(err.Error(), "parent 6") {
		t.Errorf("adding under a missing parent: %v", err)
	}
	if _, err := tr.Add(1, -2, 0, 0); err == nil {
		t.Error("adding under parent -2 succeeded")
	}
	c := tr.Clone()
	tr.Reset()
	if tr.Len() != 0 || tr.FirstChild(Root) != -1 || tr.MaxDepth() != 0 {
		t.Error("Reset left nodes behind")
	}
	if c.Len() != 6 || c.Node(5).Token != 15 {
		t.Error("Clone shares storage")
	}
}

// TestAncestorMask checks the mask against IsAncestor and the parent chain on
// random trees.
func TestAncestorMask(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	var tr Tree
	for trial := 0; trial < 50; trial++ {
		n := r.IntN(30)
		randomTree(r, &tr, n, 10)
		m := make([]bool, (n+1)*(n+1))
		if err := tr.AncestorMask(m); err != nil {
			t.Fatal(err)
		}
		for row := 0; row <= n; row++ {
			for col := 0; col <= n; col++ {
				// Brute force: walk row's parent chain.
				want := col == 0 || col == row
				for p := row - 1; p >= 0 && !want; p = tr.Node(p).Parent {
					if p == col-1 {
						want = true
					}
				}
				if row > 0 && col > 0 && col != row && tr.IsAncestor(col-1, row-1) != want {
					t.Fatalf("IsAncestor(%d, %d) = %v; want %v", col-1, row-1, !want, want)
				}
				if m[row*(n+1)+col] != want {
					t.Fatalf("mask[%d][%d] = %v; want %v", row, col, !want, want)
				}
			}
		}
		for i := range n {
			p := tr.Path(i, nil)
			if len(p) != tr.Node(i).Depth || p[len(p)-1] != i {
				t.Fatalf("path %v to node %d of depth %d", p, i, tr.Node(i).Depth)
			}
			for k := 1; k < len(p); k++ {
				if tr.Node(p[k]).Parent != p[k-1] || p[k-1] >= p[k] {
					t.Fatalf("path %v is not a parent chain in topological order", p)
				}
			}
		}
	}
	if err := tr.AncestorMask(make([]bool, 3)); err == nil {
		t.Error("AncestorMask accepted a wrongly sized buffer")
	}
}

func TestChoices(t *testing.T) {
	c, err := ParseChoices([]byte(`[[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Depth() != 3 || !slices.Equal(c.Widths(), []int{2, 2, 1}) {
		t.Errorf("depth %d widths %v", c.Depth(), c.Widths())
	}
	for _, bad := range []struct{ json, want string }{
		{`[[0], [0, 1, 0]]`, "path 1 [0,1,0]: its prefix [0,1] is missing"},
		{`[[0], [1, 0]]`, "path 1 [1,0]: its prefix [1] is missing"},
		{`[[0], [0]]`, "path 1 [0] repeats path 0"},
		{`[[0], [0, -1]]`, "negative choice index -1"},
		{`[[0], []]`, "path 1 is empty"},
		{`[]`, "empty"},
		{`[[0], [1]] x`, "unexpected data"},
		{`{"a": 1}`, "JSON list of paths"},
	} {
		_, err := ParseChoices([]byte(bad.json))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseChoices(%s) = %v; want an error containing %q", bad.json, err, bad.want)
		}
	}

	d := DefaultChoices(4)
	if len(d) != 33 || !slices.Equal(d.Widths(), []int{3, 2, 2, 1}) {
		t.Errorf("default 4-head tree: %d paths, widths %v; want 33, [3 2 2 1]", len(d), d.Widths())
	}
	for h, want := range []int{3, 9, 21, 33, 45} {
		if got := len(DefaultChoices(h + 1)); got != want {
			t.Errorf("default tree for %d heads: %d nodes; want %d", h+1, got, want)
		}
	}
	if err := d.Validate(); err != nil {
		t.Error(err)
	}

	st, err := CompileChoices(c)
	if err != nil {
		t.Fatal(err)
	}
	topk := [][]int{{50, 51}, {60, 61}, {70}}
	var tr Tree
	if err := st.Build(&tr, topk); err != nil {
		t.Fatal(err)
	}
	paths := st.Choices()
	if len(paths) != tr.Len() {
		t.Fatalf("%d nodes for %d paths", tr.Len(), len(paths))
	}
	for i, p := range paths {
		// The node's path of ranks must spell the choice path, and its
		// tokens the per-head candidates.
		nodes := tr.Path(i, nil)
		if len(nodes) != len(p) {
			t.Fatalf("node %d depth %d for path %v", i, len(nodes), p)
		}
		for d, n := range nodes {
			if tr.Node(n).Rank != p[d] || tr.Node(n).Token != topk[d][p[d]] {
				t.Fatalf("node %d (path %v): depth %d has rank %d token %d", i, p, d+1, tr.Node(n).Rank, tr.Node(n).Token)
			}
		}
	}
	if err := st.Build(&tr, [][]int{{50, 51}, {60}}); err == nil {
		t.Error("Build with too few heads/candidates succeeded")
	}
}

// toyExpander scores children with a deterministic pseudo-random draft over a
// small vocabulary and records how it was called.
type toyExpander struct {
	vocab  int
	calls  int
	sizes  []int
	depths []int
}

func (x *toyExpander) Expand(c *Tree, frontier []int, k int, tokens []int, logps []float64) error {
	x.calls++
	x.sizes = append(x.sizes, len(frontier))
	ctx := []int{7}
	for f, node := range frontier {
		d := 0
		if node != Root {
			d = c.Node(node).Depth
			ctx = c.PathTokens(node, ctx[:1])
		} else {
			ctx = ctx[:1]
		}
		if f == 0 {
			x.depths = append(x.depths, d)
		} else if d != x.depths[len(x.depths)-1] {
			return errMixedDepth
		}
		lp := toyLogProbs(2, ctx, x.vocab)
		topKOf(lp, tokens[f*k:(f+1)*k], logps[f*k:(f+1)*k])
	}
	return nil
}

var errMixedDepth = errorString("frontier mixes depths")

type errorString string

func (e errorString) Error() string { return string(e) }

// topKOf writes the len(tokens) best entries of lp (ties to the lower id),
// padding with -Inf when lp is shorter.
func topKOf(lp []float64, tokens []int, logps []float64) {
	idx := make([]int, len(lp))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case lp[a] > lp[b]:
			return -1
		case lp[a] < lp[b]:
			return 1
		}
		return 0
	})
	for j := range tokens {
		if j < len(idx) {
			tokens[j], logps[j] = idx[j], lp[idx[j]]
		} else {
			tokens[j], logps[j] = 0, math.Inf(-1)
		}
	}
}

// TestDynamicTree checks EAGLE-2's construction by its defining properties:
// one batched call per round over at most TopK same-depth nodes, the
// frontier is the best TopK of the round's candidates, the kept nodes are the
// best TotalTokens-1 candidates and include every ancestor.
func TestDynamicTree(t *testing.T) {
	for _, p := range []DynamicParams{{Depth: 3, TopK: 4, TotalTokens: 20}, {Depth: 2, TopK: 3, TotalTokens: 8}, {Depth: 0, TopK: 5, TotalTokens: 60}, {Depth: 4, TopK: 8, TotalTokens: 1000}} {
		b, err := NewDynamicBuilder(p)
		if err != nil {
			t.Fatal(err)
		}
		x := &toyExpander{vocab: 6}
		var out Tree
		if err := b.Build(&out, x); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		if x.calls != p.Depth+1 {
			t.Errorf("%+v: %d draft calls; want %d", p, x.calls, p.Depth+1)
		}
		want := 1
		for r, s := range x.sizes {
			if s != want {
				t.Errorf("%+v: round %d frontier of %d nodes; want %d", p, r, s, want)
			}
			want = min(p.TopK, want*min(p.TopK, 6))
		}
		cands := b.Candidates()
		sel := b.Selected()
		if want := min(p.TotalTokens-1, cands.Len()); out.Len() != want {
			t.Errorf("%+v: %d nodes; want %d", p, out.Len(), want)
		}
		kept := make([]bool, cands.Len())
		minKept := math.Inf(1)
		for i, c := range sel {
			kept[c] = true
			cn, on := cands.Node(c), out.Node(i)
			if cn.Token != on.Token || cn.Depth != on.Depth || cn.Score != on.Score {
				t.Fatalf("%+v: node %d differs from its candidate %d", p, i, c)
			}
			if on.Parent != Root && sel[on.Parent] != cn.Parent {
				t.Fatalf("%+v: node %d's parent maps to candidate %d; want %d", p, i, sel[on.Parent], cn.Parent)
			}
			minKept = math.Min(minKept, cn.Score)
			// The score is the path's cumulative draft log-probability.
			ctx := []int{7}
			var s float64
			for _, n := range cands.Path(c, nil) {
				s += toyLogProbs(2, ctx, 6)[cands.Node(n).Token]
				ctx = append(ctx, cands.Node(n).Token)
			}
			if math.Abs(s-cn.Score) > 1e-9 {
				t.Fatalf("%+v: candidate %d score %v; path log-prob %v", p, c, cn.Score, s)
			}
		}
		for c := range cands.Len() {
			if !kept[c] && cands.Node(c).Score > minKept {
				t.Fatalf("%+v: dropped candidate %d (score %v) beats a kept one (%v)", p, c, cands.Node(c).Score, minKept)
			}
		}
		// Frontier property: a candidate has children only if it was among
		// the TopK best of its depth.
		for d := 1; d <= p.Depth; d++ {
			var scores []float64
			for c := range cands.Len() {
				if cands.Node(c).Depth == d {
					scores = append(scores, cands.Node(c).Score)
				}
			}
			slices.Sort(scores)
			slices.Reverse(scores)
			cut := scores[min(p.TopK, len(scores))-1]
			for c := range cands.Len() {
				n := cands.Node(c)
				if n.Depth == d && cands.FirstChild(c) >= 0 && n.Score < cut {
					t.Fatalf("%+v: candidate %d expanded with score %v below the depth-%d frontier cut %v", p, c, n.Score, d, cut)
				}
			}
		}
	}
	bad := ExpandFunc(func(c *Tree, f []int, k int, tok []int, lp []float64) error {
		for i := range lp {
			tok[i], lp[i] = i, 0.5
		}
		return nil
	})
	b, _ := NewDynamicBuilder(DefaultDynamicParams())
	if err := b.Build(&Tree{}, bad); err == nil || !strings.Contains(err.Error(), "log-probability 0.5") {
		t.Errorf("positive log-probabilities: %v", err)
	}
	if _, err := NewDynamicBuilder(DynamicParams{Depth: 1, TopK: 0, TotalTokens: 5}); err == nil {
		t.Error("top-k 0 accepted")
	}
}

func TestStats(t *testing.T) {
	var s Stats
	s.Add(&Result{Path: []int{0, 2}, Tokens: []int{1, 2, 3}, Reached: 3})
	s.Add(&Result{Path: nil, Tokens: []int{1}, Reached: 1})
	s.Add(&Result{Path: []int{0}, Tokens: []int{1, 2}, Reached: 1})
	if s.MeanAcceptLength() != 2 {
		t.Errorf("mean accept length %v; want 2", s.MeanAcceptLength())
	}
	if !slices.Equal(s.Hist, []int{1, 1, 1}) || !slices.Equal(s.Tried, []int{3, 1, 1}) || !slices.Equal(s.Accepted, []int{2, 1, 0}) {
		t.Errorf("hist %v tried %v accepted %v", s.Hist, s.Tried, s.Accepted)
	}
	if s.AcceptRate(1) != 2.0/3 || s.AcceptRate(3) != 0 || s.AcceptRate(9) != 0 {
		t.Errorf("accept rates %v %v", s.AcceptRate(1), s.AcceptRate(3))
	}
	var m Stats
	m.Merge(&s)
	m.Merge(&s)
	if m.Steps != 6 || m.Tokens != 12 || m.Accepted[0] != 4 {
		t.Errorf("merge: %+v", m)
	}
	if got := ExpectedChainLength([]float64{0.8, 0.5, 0.5}); math.Abs(got-(1+0.8+0.4+0.2)) > 1e-12 {
		t.Errorf("expected chain length %v; want 2.4", got)
	}
	if ExpectedChainLength(nil) != 1 {
		t.Error("expected chain length of no draft is not 1")
	}
}

// TestNoAllocations checks that a decoding step allocates nothing once the
// buffers have grown: building a dynamic tree, a static tree, and verifying.
func TestNoAllocations(t *testing.T) {
	const vocab = 50
	x := ExpandFunc(func(c *Tree, frontier []int, k int, tokens []int, logps []float64) error {
		for f, node := range frontier {
			for j := range k {
				tokens[f*k+j] = (node + 7*j + 3) % vocab
				logps[f*k+j] = -0.3*float64(j) - 0.01*float64(node+1)
			}
		}
		return nil
	})
	b, _ := NewDynamicBuilder(DefaultDynamicParams())
	st, _ := CompileChoices(DefaultChoices(4))
	topk := [][]int{{1, 2, 3}, {4, 5}, {6, 7}, {8}}
	s, _ := sample.NewSampler(vocab, sample.Params{Temperature: 0.7, TopP: 0.9})
	g, _ := sample.NewSampler(vocab, sample.Params{})
	vs, vg := NewVerifier(s), NewVerifier(g)
	var tr Tree
	var res Result
	rng := sample.NewRNG(1, 2)
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 61*vocab)
	for i := range logits {
		logits[i] = float32(r.NormFloat64())
	}
	step := func() {
		if err := b.Build(&tr, x); err != nil {
			t.Fatal(err)
		}
		if err := vs.Sample(&tr, logits[:(tr.Len()+1)*vocab], nil, rng, &res); err != nil {
			t.Fatal(err)
		}
		if err := st.Build(&tr, topk); err != nil {
			t.Fatal(err)
		}
		if err := vg.Greedy(&tr, logits[:(tr.Len()+1)*vocab], &res); err != nil {
			t.Fatal(err)
		}
		if err := vs.Typical(&tr, logits[:(tr.Len()+1)*vocab], DefaultTypicalParams(), rng, &res); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if a := testing.AllocsPerRun(20, step); a != 0 {
		t.Errorf("%v allocations per decoding step; want 0", a)
	}
}
