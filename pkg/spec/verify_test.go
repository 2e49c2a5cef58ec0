package spec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/sample"
)

// The toy models: deterministic pseudo-random logits over a small vocabulary
// as a function of the whole context, so the target's distribution at depth 2
// depends on the token at depth 1.

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func toyLogits(seed uint64, ctx []int, vocab int) []float64 {
	h := splitmix(seed)
	for _, t := range ctx {
		h = splitmix(h ^ uint64(t+1)*0x100000001b3)
	}
	out := make([]float64, vocab)
	for i := range out {
		h = splitmix(h)
		out[i] = float64(h>>11)*0x1p-53*4 - 2
	}
	return out
}

func toyLogProbs(seed uint64, ctx []int, vocab int) []float64 {
	return testutil.LogSoftmax(toyLogits(seed, ctx, vocab))
}

const V = 6

// target is the toy target model's logits.
func target(ctx []int) []float64 { return toyLogits(1, ctx, V) }

// draftLogProbs is the toy draft: correlated with the target, but different.
func draftLogProbs(ctx []int) []float64 {
	t, n := target(ctx), toyLogits(2, ctx, V)
	for i := range t {
		t[i] = 0.7*t[i] + 1.2*n[i]
	}
	return testutil.LogSoftmax(t)
}

// naiveWarp is the textbook Hugging Face warper chain for the expected
// distribution, written independently of package sample.
func naiveWarp(logits []float64, p sample.Params) []float64 {
	n := len(logits)
	z := make([]float64, n)
	for i, v := range logits {
		z[i] = v / p.Temperature
	}
	if p.TopK > 0 && p.TopK < n {
		s := slices.Clone(z)
		sort.Sort(sort.Reverse(sort.Float64Slice(s)))
		for i := range z {
			if z[i] < s[p.TopK-1] {
				z[i] = math.Inf(-1)
			}
		}
	}
	probs := func() []float64 { return expAll(testutil.LogSoftmax(z)) }
	out := probs()
	if p.TopP > 0 && p.TopP < 1 {
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return out[order[a]] < out[order[b]] })
		var cum float64
		for r, i := range order {
			cum += out[i]
			if cum <= 1-p.TopP && r != n-1 {
				z[i] = math.Inf(-1)
			}
		}
		out = probs()
	}
	return out
}

func expAll(x []float64) []float64 {
	for i := range x {
		x[i] = math.Exp(x[i])
	}
	return x
}

// expectedSeq returns the target's probability of every sequence of n tokens
// after ctx, indexed in base V (first token most significant).
func expectedSeq(p sample.Params, ctx []int, n int) []float64 {
	out := make([]float64, int(math.Pow(V, float64(n))))
	var rec func(ctx []int, depth, index int, prob float64)
	rec = func(ctx []int, depth, index int, prob float64) {
		if depth == n {
			out[index] += prob
			return
		}
		w := naiveWarp(target(ctx), p)
		for x, px := range w {
			if px > 0 {
				rec(append(slices.Clone(ctx), x), depth+1, index*V+x, prob*px)
			}
		}
	}
	rec(ctx, 0, 0, 1)
	return out
}

// toy memoises the toy models per context (contexts are short, the
// vocabulary tiny), which keeps 200k-draw tests fast. Returned slices are
// shared: do not modify them.
type toy struct {
	t, d map[uint64][]float64
	top  map[uint64][]int     // the draft's tokens by decreasing probability
	dp   map[uint64][]float32 // the draft's probabilities
}

// memo returns cache's value for ctx, computing it with f the first time.
func memo[T any](cache map[uint64]T, ctx []int, f func([]int) T) T {
	k := ctxKey(ctx)
	v, ok := cache[k]
	if !ok {
		v = f(ctx)
		cache[k] = v
	}
	return v
}

func (m *toy) draftProbs(ctx []int) []float32 {
	return memo(m.dp, ctx, func(ctx []int) []float32 {
		p := make([]float32, V)
		for i, v := range m.draft(ctx) {
			p[i] = float32(math.Exp(v))
		}
		return p
	})
}

func newToy() *toy {
	return &toy{t: map[uint64][]float64{}, d: map[uint64][]float64{}, top: map[uint64][]int{}, dp: map[uint64][]float32{}}
}

// draftTopK writes the draft's k best tokens at ctx and their log-probs.
func (m *toy) draftTopK(ctx []int, tokens []int, logps []float64) {
	lp := m.draft(ctx)
	order := memo(m.top, ctx, func([]int) []int {
		order := make([]int, V)
		topKOf(lp, order, make([]float64, V))
		return order
	})
	for j := range tokens {
		tokens[j], logps[j] = order[j], lp[order[j]]
	}
}

func ctxKey(ctx []int) uint64 {
	h := uint64(1)
	for _, x := range ctx {
		h = h*(V+1) + uint64(x+1)
	}
	return h
}

func (m *toy) target(ctx []int) []float64 { return memo(m.t, ctx, target) }

func (m *toy) draft(ctx []int) []float64 { return memo(m.d, ctx, draftLogProbs) }

// env holds what one decoding step needs: the tree, the target rows, the
// draft rows, the verifier and two random streams (drafting, verification).
type env struct {
	params  sample.Params
	ver     *Verifier
	tree    Tree
	logits  []float32
	draft   []float32
	res     Result
	drng    *sample.RNG
	vrng    *sample.RNG
	builder *DynamicBuilder
	static  *StaticTree
	toy     *toy
	buf     []int
	q       []float32
}

func newEnv(t *testing.T, p sample.Params, seed uint64) *env {
	s, err := sample.NewSampler(V, p)
	if err != nil {
		t.Fatal(err)
	}
	return &env{params: p, ver: NewVerifier(s), drng: sample.NewRNG(seed, 0), vrng: sample.NewRNG(seed, 1), toy: newToy(), q: make([]float32, V)}
}

// fillRows computes the target's logits (and, when withDraft, the draft's
// probabilities) at the root and at every node.
func (e *env) fillRows(ctx []int, withDraft bool) {
	n := e.tree.Len() + 1
	e.logits = slices.Grow(e.logits[:0], n*V)[:n*V]
	if withDraft {
		e.draft = slices.Grow(e.draft[:0], n*V)[:n*V]
	}
	for r := range n {
		c := append(e.buf[:0], ctx...)
		if r > 0 {
			c = e.tree.PathTokens(r-1, c)
		}
		e.buf = c
		for i, v := range e.toy.target(c) {
			e.logits[r*V+i] = float32(v)
		}
		if withDraft {
			copy(e.draft[r*V:(r+1)*V], e.toy.draftProbs(c))
		}
	}
}

// drawWithout draws from the draft distribution at ctx excluding the tokens
// in used.
func (e *env) drawWithout(ctx []int, used []int) int {
	q := e.q
	copy(q, e.toy.draftProbs(ctx))
	for _, u := range used {
		q[u] = 0
	}
	x, err := sample.SampleProbs(q, e.drng)
	if err != nil {
		panic(err)
	}
	return x
}

// A stepper drafts a tree for ctx, verifies it and returns the committed
// tokens.
type stepper func(e *env, ctx []int) ([]int, error)

// drawChain drafts a chain of 3 tokens sampled from the draft and fills the
// rows.
func drawChain(e *env, ctx []int) {
	e.tree.Reset()
	c := slices.Clone(ctx)
	parent := Root
	for range 3 {
		x := e.drawWithout(c, nil)
		parent, _ = e.tree.Add(x, parent, 0, 0)
		c = append(c, x)
	}
	e.fillRows(ctx, true)
}

// sampledChain drafts a chain of 3 tokens sampled from the draft.
func sampledChain(e *env, ctx []int) ([]int, error) {
	drawChain(e, ctx)
	err := e.ver.Sample(&e.tree, e.logits, e.draft, e.vrng, &e.res)
	return e.res.Tokens, err
}

// sampledChainRows is sampledChain verified by SampleRows, the target's rows
// read on demand (as drafter eval verifies EAGLE-3 chains at temperature > 0).
func sampledChainRows(e *env, ctx []int) ([]int, error) {
	drawChain(e, ctx)
	err := e.ver.SampleRows(&e.tree, &countingRows{logits: e.logits}, e.draft, e.vrng, &e.res)
	return e.res.Tokens, err
}

// sampledTree drafts 2 siblings under the root and 2 under each of them, each
// sibling group drawn without replacement from the draft.
func sampledTree(e *env, ctx []int) ([]int, error) {
	e.tree.Reset()
	var first []int
	for range 2 {
		x := e.drawWithout(ctx, first)
		first = append(first, x)
		e.tree.Add(x, Root, len(first)-1, 0)
	}
	for i, x := range first {
		c := append(slices.Clone(ctx), x)
		var used []int
		for range 2 {
			y := e.drawWithout(c, used)
			used = append(used, y)
			e.tree.Add(y, i, len(used)-1, 0)
		}
	}
	e.fillRows(ctx, true)
	err := e.ver.Sample(&e.tree, e.logits, e.draft, e.vrng, &e.res)
	return e.res.Tokens, err
}

// draftExpander is the toy draft as an EAGLE-2 Expander.
type draftExpander struct {
	ctx, buf []int
	toy      *toy
}

func (x *draftExpander) Expand(c *Tree, frontier []int, k int, tokens []int, logps []float64) error {
	for f, node := range frontier {
		ctx := append(x.buf[:0], x.ctx...)
		if node != Root {
			ctx = c.PathTokens(node, ctx)
		}
		x.buf = ctx
		x.toy.draftTopK(ctx, tokens[f*k:(f+1)*k], logps[f*k:(f+1)*k])
	}
	return nil
}

// eagleTree drafts an EAGLE-2 dynamic top-k tree (deterministic drafts).
func eagleTree(e *env, ctx []int) ([]int, error) {
	if err := e.builder.Build(&e.tree, &draftExpander{ctx: ctx, toy: e.toy}); err != nil {
		return nil, err
	}
	e.fillRows(ctx, false)
	err := e.ver.Sample(&e.tree, e.logits, nil, e.vrng, &e.res)
	return e.res.Tokens, err
}

// medusaTree drafts a static tree whose heads look only at the context.
func medusaTree(e *env, ctx []int) ([]int, error) {
	topk := make([][]int, e.static.Depth())
	for h := range topk {
		topk[h] = make([]int, V)
		topKOf(toyLogProbs(uint64(20+h), ctx, V), topk[h], make([]float64, V))
	}
	if err := e.static.Build(&e.tree, topk); err != nil {
		return nil, err
	}
	e.fillRows(ctx, false)
	err := e.ver.Sample(&e.tree, e.logits, nil, e.vrng, &e.res)
	return e.res.Tokens, err
}

// wrongChain is sampledChain verified with a broken rule: after a rejection
// the bonus token is drawn from the target's p instead of the residual
// norm(max(0, p - q)).
func wrongChain(e *env, ctx []int) ([]int, error) {
	if _, err := sampledChain(e, ctx); err != nil { // builds the tree and rows
		return nil, err
	}
	return e.brokenWalk(ctx, true)
}

// wrongTree is eagleTree verified with a broken rule: every sibling is tried
// against the original p (rejected tokens are not removed from it, so later
// siblings are not renormalised).
func wrongTree(e *env, ctx []int) ([]int, error) {
	if _, err := eagleTree(e, ctx); err != nil {
		return nil, err
	}
	return e.brokenWalk(ctx, false)
}

// brokenWalk re-verifies e.tree with one of the broken rules.
func (e *env) brokenWalk(ctx []int, chain bool) ([]int, error) {
	s := e.ver.Sampler()
	p := make([]float32, V)
	var out []int
	cur := Root
	for {
		r := cur + 1
		if err := s.Probs(e.logits[r*V:(r+1)*V], p); err != nil {
			return nil, err
		}
		accepted := Root
		for c := e.tree.FirstChild(cur); c >= 0; c = e.tree.NextSibling(c) {
			x := e.tree.Node(c).Token
			u := e.vrng.Float64()
			ratio := float64(p[x])
			if chain {
				ratio /= float64(e.draft[r*V+x])
			}
			if u < ratio {
				accepted = c
				break
			}
			if !chain {
				p[x] = 0 // removed from the bonus draw, but never renormalised for later siblings
			}
		}
		if accepted == Root {
			b, err := sample.SampleProbs(p, e.vrng)
			return append(out, b), err
		}
		out = append(out, e.tree.Node(accepted).Token)
		cur = accepted
	}
}

// runDraws generates n tokens draws times from a fresh context and counts the
// sequences.
func runDraws(t *testing.T, e *env, step stepper, draws, n int) []int {
	counts := make([]int, int(math.Pow(V, float64(n))))
	start := []int{3}
	ctx := make([]int, 0, 16)
	for range draws {
		ctx = append(ctx[:0], start...)
		for len(ctx) < len(start)+n {
			toks, err := step(e, ctx)
			if err != nil {
				t.Fatal(err)
			}
			ctx = append(ctx, toks...)
		}
		idx := 0
		for _, x := range ctx[len(start) : len(start)+n] {
			idx = idx*V + x
		}
		counts[idx]++
	}
	return counts
}

// pThreshold is the chi-square p-value below which a test fails. Seeds are
// fixed, so each test is deterministic; the broken rules land far below it.
const pThreshold = 1e-3

// TestLossless checks, by chi-square over the first 3 generated tokens, that
// speculative sampling reproduces the target's distribution for sampled
// chains, sampled trees, EAGLE-2 dynamic trees and Medusa static trees, under
// different sampling parameters, and that broken rules fail the same test.
func TestLossless(t *testing.T) {
	draws := 200000
	if testing.Short() {
		draws = 40000
	}
	const n = 3
	tk4 := sample.Params{Temperature: 0.9, TopK: 4}
	tp := sample.Params{Temperature: 1.3, TopP: 0.8}
	cases := []struct {
		name   string
		params sample.Params
		step   stepper
		broken bool
	}{
		{"sampled chain", tk4, sampledChain, false},
		{"sampled chain top-p", tp, sampledChain, false},
		{"sampled chain, rows on demand", tk4, sampledChainRows, false},
		{"sampled tree", tk4, sampledTree, false},
		{"eagle2 tree", tk4, eagleTree, false},
		{"eagle2 tree top-p", tp, eagleTree, false},
		{"medusa tree", tp, medusaTree, false},
		{"broken chain (no residual)", tk4, wrongChain, true},
		{"broken tree (no renormalisation)", tk4, wrongTree, true},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, c.params, uint64(100+ci))
			var err error
			if e.builder, err = NewDynamicBuilder(DynamicParams{Depth: 2, TopK: 3, TotalTokens: 9}); err != nil {
				t.Fatal(err)
			}
			if e.static, err = CompileChoices(DefaultChoices(3)); err != nil {
				t.Fatal(err)
			}
			var stats Stats
			counted := func(e *env, ctx []int) ([]int, error) {
				toks, err := c.step(e, ctx)
				if !c.broken {
					stats.Add(&e.res)
				}
				return toks, err
			}
			counts := runDraws(t, e, counted, draws, n)
			pv, _ := testutil.ChiSquareP(counts, expectedSeq(c.params, []int{3}, n), draws)
			if c.broken {
				if pv >= pThreshold {
					t.Errorf("broken rule passed the chi-square test (p-value %g): the test cannot tell", pv)
				}
				t.Logf("broken rule rejected: p-value %g", pv)
				return
			}
			if pv < pThreshold {
				t.Errorf("chi-square p-value %g < %g: the output does not follow the target", pv, pThreshold)
			}
			// The test must exercise deep acceptance, not just bonus tokens.
			if stats.AcceptRate(2) == 0 || stats.Tried[1] < draws/20 {
				t.Errorf("depth 2 tried %d times, accept rate %v: the scenario does not exercise the tree", stats.Tried[1], stats.AcceptRate(2))
			}
			t.Logf("p-value %.3g; mean accept length %.3f; accept rate by depth %.3f %.3f", pv, stats.MeanAcceptLength(), stats.AcceptRate(1), stats.AcceptRate(2))
		})
	}
}

// TestGreedy checks that greedy verification commits exactly the target's
// greedy continuation and accepts the whole greedy path when the tree holds it.
func TestGreedy(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	e := newEnv(t, sample.Params{}, 1)
	greedy := func(ctx []int, n int) []int {
		c := slices.Clone(ctx)
		for range n {
			l := target(c)
			best := 0
			for i, v := range l {
				if v > l[best] {
					best = i
				}
			}
			c = append(c, best)
		}
		return c[len(ctx):]
	}
	for trial := 0; trial < 300; trial++ {
		ctx := []int{r.IntN(V), r.IntN(V)}
		// A random tree, with the greedy path of random length grafted in
		// at a random place among siblings.
		want := greedy(ctx, 12)
		k := r.IntN(5)
		e.tree.Reset()
		parent := Root
		for d := 0; d < k; d++ {
			for range r.IntN(3) {
				e.tree.Add(r.IntN(V), parent, 0, 0)
			}
			parent, _ = e.tree.Add(want[d], parent, 0, 0)
		}
		for range r.IntN(6) {
			e.tree.Add(r.IntN(V), r.IntN(e.tree.Len()+1)-1, 0, 0)
		}
		e.fillRows(ctx, false)
		if err := e.ver.Verify(&e.tree, e.logits, e.vrng, &e.res); err != nil {
			t.Fatal(err)
		}
		got := e.res.Tokens
		if len(e.res.Path) < k || !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("trial %d: committed %v (path %v); greedy continuation %v with %d drafted", trial, got, e.res.Path, want, k)
		}
		for i, n := range e.res.Path {
			if e.tree.Node(n).Token != got[i] || e.tree.Node(n).Depth != i+1 {
				t.Fatalf("trial %d: path %v does not spell %v", trial, e.res.Path, got)
			}
		}
	}
	// An empty tree yields just the target's token.
	e.tree.Reset()
	e.fillRows([]int{1}, false)
	if err := e.ver.Greedy(&e.tree, e.logits, &e.res); err != nil {
		t.Fatal(err)
	}
	if want := greedy([]int{1}, 1); !slices.Equal(e.res.Tokens, want) || e.res.Reached != 0 {
		t.Fatalf("empty tree: %v reached %d; want %v reached 0", e.res.Tokens, e.res.Reached, want)
	}
	if err := e.ver.Greedy(&e.tree, e.logits[:3], &e.res); err == nil {
		t.Error("short logits accepted")
	}
}

// TestTypical checks Medusa's typical acceptance on hand-computed rows.
func TestTypical(t *testing.T) {
	s, _ := sample.NewSampler(4, sample.Params{Temperature: 1})
	v := NewVerifier(s)
	var tr Tree
	n1, _ := tr.Add(1, Root, 0, 0) // row 0 is peaked on token 0: rejected
	n0, _ := tr.Add(0, Root, 1, 0) // accepted
	a, _ := tr.Add(3, n0, 0, 0)    // row 2 is flat: threshold 0.3*exp(-H) = 0.075 < 0.25: accepted
	b, _ := tr.Add(2, n0, 1, 0)    // accepted too, same length and likelihood: the first wins
	tr.Add(0, n1, 0, 0)            // under a rejected node: never judged
	_ = b
	logits := []float32{
		5, 0, 0, 0, // root
		0, 0, 0, 0, // node 0 (token 1)
		0, 0, 0, 0, // node 1 (token 0): flat
		9, 0, 0, 0, // node a
		0, 0, 0, 0, // node b
		0, 0, 0, 0,
	}
	// Independent check of the thresholds: peaked row p(0)=e^5/(e^5+3).
	p0 := math.Exp(5) / (math.Exp(5) + 3)
	h := -(p0*math.Log(p0+1e-5) + 3*(1-p0)/3*math.Log((1-p0)/3+1e-5))
	thr := math.Min(0.09, 0.3*math.Exp(-h))
	if !(p0 > thr && (1-p0)/3 < thr) {
		t.Fatalf("hand computation: p0 %v, p1 %v, threshold %v", p0, (1-p0)/3, thr)
	}
	var res Result
	if err := v.Typical(&tr, logits, DefaultTypicalParams(), sample.NewRNG(1, 1), &res); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Path, []int{n0, a}) || res.Reached != 2 {
		t.Fatalf("typical path %v reached %d; want [%d %d] reached 2", res.Path, res.Reached, n0, a)
	}
	// Row 4 (node a) is peaked on 0 at temperature 1 with p > 0.999: the
	// bonus is almost surely 0.
	if res.Bonus != 0 || !slices.Equal(res.Tokens, []int{0, 3, 0}) {
		t.Fatalf("tokens %v", res.Tokens)
	}
	// With alpha = 0 the threshold is 0 and every token with p > 0 passes:
	// the depth-2 paths [n0 a], [n0 b] and [n1 4] tie on length; the
	// likelihood rules out [n1 4] (p(1) at the root is tiny) and [n0 a]
	// beats its equal [n0 b] by coming first.
	if err := v.Typical(&tr, logits, TypicalParams{Epsilon: 0.09, Alpha: 0}, sample.NewRNG(1, 1), &res); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Path, []int{n0, a}) {
		t.Fatalf("alpha 0: path %v", res.Path)
	}
	g, _ := sample.NewSampler(4, sample.Params{})
	if err := NewVerifier(g).Typical(&tr, logits, DefaultTypicalParams(), sample.NewRNG(1, 1), &res); err == nil {
		t.Error("typical acceptance with a greedy sampler succeeded")
	}
}

// TestSampledDraftErrors checks input validation of Sample.
func TestSampledDraftErrors(t *testing.T) {
	s, _ := sample.NewSampler(3, sample.Params{Temperature: 1})
	v := NewVerifier(s)
	var tr Tree
	tr.Add(2, Root, 0, 0)
	logits := []float32{0, 0, 0, 0, 0, 0}
	var res Result
	if err := v.Sample(&tr, logits, []float32{1, 1, 0, 1, 1, 1}, sample.NewRNG(1, 1), &res); err == nil {
		t.Error("a drafted token with zero draft probability was accepted")
	}
	if err := v.Sample(&tr, logits, []float32{1, 1}, sample.NewRNG(1, 1), &res); err == nil {
		t.Error("a short draft was accepted")
	}
	tr.Add(7, 0, 0, 0)
	if err := v.Sample(&tr, append(logits, 0, 0, 0), nil, sample.NewRNG(1, 1), &res); err == nil {
		t.Error("a token outside the vocabulary was accepted")
	}
	tr.Reset()
	tr.Add(2, Root, 0, 0)
	logits[1] = float32(math.NaN())
	if err := v.Sample(&tr, logits, nil, sample.NewRNG(1, 1), &res); err == nil {
		t.Error("NaN logits accepted")
	}
}

// countingRows serves the rows of a flat logits slice and records which rows
// were asked for.
type countingRows struct {
	logits []float32
	asked  []int
}

func (c *countingRows) Row(r int) ([]float32, error) {
	c.asked = append(c.asked, r)
	return c.logits[r*V : (r+1)*V], nil
}

// TestVerifyRowsMatchesVerify: verification with rows read on demand commits
// what verification over all rows does, greedy and sampled (same random
// stream), asks for each row at most once, and greedy asks only for the
// root's row and the rows of accepted nodes.
func TestVerifyRowsMatchesVerify(t *testing.T) {
	for _, p := range []sample.Params{{}, {Temperature: 1}, {Temperature: 0.7, TopK: 5}} {
		e := newEnv(t, p, 7)
		b, err := NewDynamicBuilder(DynamicParams{Depth: 4, TopK: 3, TotalTokens: 12})
		if err != nil {
			t.Fatal(err)
		}
		e.builder = b
		var want Result
		for trial := range 200 {
			ctx := []int{trial % V, (trial * 7) % V}
			if err := e.builder.Build(&e.tree, &draftExpander{ctx: ctx, toy: e.toy}); err != nil {
				t.Fatal(err)
			}
			e.fillRows(ctx, false)
			seed := uint64(trial)
			e.vrng.Reset(seed, 1)
			if err := e.ver.Verify(&e.tree, e.logits, e.vrng, &want); err != nil {
				t.Fatal(err)
			}
			want.Path, want.Tokens = slices.Clone(want.Path), slices.Clone(want.Tokens)
			rows := &countingRows{logits: e.logits}
			e.vrng.Reset(seed, 1)
			if err := e.ver.VerifyRows(&e.tree, rows, e.vrng, &e.res); err != nil {
				t.Fatal(err)
			}
			checkRowsResult(t, fmt.Sprintf("%v trial %d: VerifyRows", p, trial), &e.res, &want, rows)
			for _, r := range rows.asked {
				if p.Greedy() && r != 0 && !slices.Contains(want.Path, r-1) {
					t.Fatalf("greedy trial %d: row %d read, but node %d was not accepted (path %v)", trial, r, r-1, want.Path)
				}
			}
			if len(rows.asked) > len(want.Path)+1 {
				t.Fatalf("%v trial %d: %d rows read for a path of %d", p, trial, len(rows.asked), len(want.Path))
			}
		}
	}
}

// checkRowsResult fails the test when got, the result of a verification
// reading rows on demand, differs from want, the result over all rows, or
// when it read a row twice.
func checkRowsResult(t *testing.T, what string, got, want *Result, rows *countingRows) {
	t.Helper()
	if !slices.Equal(got.Path, want.Path) || !slices.Equal(got.Tokens, want.Tokens) || got.Reached != want.Reached {
		t.Fatalf("%s %+v, over all rows %+v", what, *got, *want)
	}
	seen := map[int]bool{}
	for _, r := range rows.asked {
		if seen[r] {
			t.Fatalf("%s: row %d asked for twice (%v)", what, r, rows.asked)
		}
		seen[r] = true
	}
}

// TestSampleRowsMatchesSample: SampleRows with a sampled chain and its draft
// rows commits what Sample does on the same rows and random stream, reads
// each row at most once, and rejects a draft of the wrong length.
func TestSampleRowsMatchesSample(t *testing.T) {
	for _, p := range []sample.Params{{Temperature: 1}, {Temperature: 0.7, TopK: 5}} {
		e := newEnv(t, p, 9)
		var want Result
		for trial := range 300 {
			ctx := []int{trial % V, (trial * 5) % V}
			e.tree.Reset()
			c := slices.Clone(ctx)
			parent := Root
			for range 4 {
				x := e.drawWithout(c, nil)
				parent, _ = e.tree.Add(x, parent, 0, 0)
				c = append(c, x)
			}
			e.fillRows(ctx, true)
			seed := uint64(trial)
			e.vrng.Reset(seed, 1)
			if err := e.ver.Sample(&e.tree, e.logits, e.draft, e.vrng, &want); err != nil {
				t.Fatal(err)
			}
			want.Path, want.Tokens = slices.Clone(want.Path), slices.Clone(want.Tokens)
			rows := &countingRows{logits: e.logits}
			e.vrng.Reset(seed, 1)
			if err := e.ver.SampleRows(&e.tree, rows, e.draft, e.vrng, &e.res); err != nil {
				t.Fatal(err)
			}
			checkRowsResult(t, fmt.Sprintf("%v trial %d: SampleRows", p, trial), &e.res, &want, rows)
		}
		if err := e.ver.SampleRows(&e.tree, &countingRows{logits: e.logits}, e.draft[:len(e.draft)-1], e.vrng, &e.res); err == nil {
			t.Errorf("%v: a draft one value short was accepted", p)
		}
	}
}

// TestGreedyArgmaxMatchesGreedy: greedy verification from argmax values
// ranked elsewhere (a device's) commits what Greedy does over all rows,
// reading only the rows whose argmax is unknown (-1); a NaN row left to the
// host fails as Greedy fails on it; argmax values outside the vocabulary
// or too few of them are refused.
func TestGreedyArgmaxMatchesGreedy(t *testing.T) {
	e := newEnv(t, sample.Params{}, 7)
	b, err := NewDynamicBuilder(DynamicParams{Depth: 4, TopK: 3, TotalTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	e.builder = b
	var want Result
	ids := make([]int32, 13)
	accepted := 0
	for trial := range 200 {
		ctx := []int{trial % V, (trial * 7) % V}
		if err := e.builder.Build(&e.tree, &draftExpander{ctx: ctx, toy: e.toy}); err != nil {
			t.Fatal(err)
		}
		e.fillRows(ctx, false)
		if err := e.ver.Greedy(&e.tree, e.logits, &want); err != nil {
			t.Fatal(err)
		}
		accepted += len(want.Path)
		want.Path, want.Tokens = slices.Clone(want.Path), slices.Clone(want.Tokens)
		n := e.tree.Len() + 1
		for r := range n {
			a, err := sample.Argmax(e.logits[r*V : (r+1)*V])
			if err != nil {
				t.Fatal(err)
			}
			ids[r] = int32(a)
			if (r+trial)%3 == 0 {
				ids[r] = -1 // left to the host
			}
		}
		rows := &countingRows{logits: e.logits}
		if err := e.ver.GreedyArgmax(&e.tree, ids[:n], rows, &e.res); err != nil {
			t.Fatal(err)
		}
		checkRowsResult(t, fmt.Sprintf("trial %d: GreedyArgmax", trial), &e.res, &want, rows)
		for _, r := range rows.asked {
			if ids[r] >= 0 {
				t.Fatalf("trial %d: row %d read though its argmax %d was given", trial, r, ids[r])
			}
		}
	}
	if accepted == 0 {
		t.Fatal("no trial accepted a draft token: the comparison never walked below the root")
	}
	// A row the device could not rank is ranked on the host, with Greedy's error.
	e.fillRows([]int{1, 2}, false)
	e.logits[3] = float32(math.NaN())
	n := e.tree.Len() + 1
	for r := range n {
		ids[r] = 0
	}
	ids[0] = -1
	werr := e.ver.Greedy(&e.tree, e.logits, &want)
	gerr := e.ver.GreedyArgmax(&e.tree, ids[:n], &countingRows{logits: e.logits}, &e.res)
	if werr == nil || gerr == nil || !strings.Contains(gerr.Error(), "row 0") {
		t.Fatalf("a NaN root row: Greedy %v, GreedyArgmax %v; want both to fail naming row 0", werr, gerr)
	}
	ids[0] = V
	if err := e.ver.GreedyArgmax(&e.tree, ids[:n], &countingRows{logits: e.logits}, &e.res); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Fatalf("an argmax of %d: %v, want an error naming the vocabulary", V, err)
	}
	if err := e.ver.GreedyArgmax(&e.tree, ids[:n-1], &countingRows{logits: e.logits}, &e.res); err == nil {
		t.Fatal("one argmax short of the rows was accepted")
	}
}
