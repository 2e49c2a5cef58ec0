package spec

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/sample"
)

// Result is the outcome of verifying one draft tree.
type Result struct {
	// Path holds the accepted node indices from depth 1 down; its length is
	// the number of accepted draft tokens.
	Path []int
	// Tokens holds the accepted tokens followed by Bonus: everything this
	// step commits, len(Path)+1 tokens.
	Tokens []int
	// Bonus is the target's own token after the accepted path (sampled from
	// the target's distribution at the last accepted position, or from the
	// residual distribution after rejections).
	Bonus int
	// Reached is the deepest depth at which a draft token was examined:
	// len(Path)+1 when the last accepted position had children, len(Path)
	// when verification ran off the bottom of the tree. Depths 1..Reached
	// were tried, 1..len(Path) accepted.
	Reached int
}

// Accepted reports the number of accepted draft tokens.
func (r *Result) Accepted() int { return len(r.Path) }

// reset prepares r for a new verification, keeping its memory.
func (r *Result) reset() {
	r.Path, r.Tokens, r.Bonus, r.Reached = r.Path[:0], r.Tokens[:0], -1, 0
}

// finish fills Tokens and Reached once Path and Bonus are set.
func (r *Result) finish(t *Tree) {
	for _, i := range r.Path {
		r.Tokens = append(r.Tokens, t.nodes[i].Token)
	}
	r.Tokens = append(r.Tokens, r.Bonus)
	last := Root
	if len(r.Path) > 0 {
		last = r.Path[len(r.Path)-1]
	}
	r.Reached = len(r.Path)
	if t.FirstChild(last) >= 0 {
		r.Reached++
	}
}

// Verifier checks draft trees against the target's logits. It holds scratch
// buffers (nothing is allocated per step once they have grown) and is not
// safe for concurrent use.
//
// Every method takes logits as (t.Len()+1) rows of Vocab() values, row 0 for
// the root and row i+1 for node i (see the package documentation): the target
// run once on the root token followed by t.Tokens() under t.AncestorMask().
type Verifier struct {
	s      *sample.Sampler
	vocab  int
	p, q   []float32
	rowArg []int // per row: argmax, or -1 when not computed
	flat   flatRows
	lazy   rowCheck
	ok     []bool
	score  []float64
}

// NewVerifier returns a verifier that applies s's decoding rule: the target's
// distribution at every position is s.Probs of its logits, so verification
// reproduces plain decoding with s exactly.
func NewVerifier(s *sample.Sampler) *Verifier {
	v := s.Vocab()
	return &Verifier{s: s, vocab: v, p: make([]float32, v), q: make([]float32, v)}
}

// Vocab reports the vocabulary size of the logits rows.
func (v *Verifier) Vocab() int { return v.vocab }

// Sampler returns the sampler whose rule the verifier applies.
func (v *Verifier) Sampler() *sample.Sampler { return v.s }

// checkRows validates the row layout of logits (and of draft when not nil)
// and that every drafted token is inside the vocabulary.
func (v *Verifier) checkRows(t *Tree, logits, draft []float32) error {
	want := (t.Len() + 1) * v.vocab
	if len(logits) != want {
		return fmt.Errorf("spec: target logits of length %d for a tree of %d nodes: want %d ((nodes+1) rows of %d)", len(logits), t.Len(), want, v.vocab)
	}
	if draft != nil && len(draft) != want {
		return fmt.Errorf("spec: draft probabilities of length %d for a tree of %d nodes: want %d ((nodes+1) rows of %d)", len(draft), t.Len(), want, v.vocab)
	}
	return v.checkTokens(t)
}

// checkTokens checks that every drafted token is inside the vocabulary.
func (v *Verifier) checkTokens(t *Tree) error {
	for i, n := range t.nodes {
		if n.Token >= v.vocab {
			return fmt.Errorf("spec: node %d token %d outside the vocabulary of %d", i, n.Token, v.vocab)
		}
	}
	return nil
}

func (v *Verifier) row(x []float32, r int) []float32 { return x[r*v.vocab : (r+1)*v.vocab] }

// Verify verifies t with the sampler's rule: Greedy for greedy parameters,
// Sample otherwise (with draft == nil: deterministic drafts).
func (v *Verifier) Verify(t *Tree, logits []float32, rng *sample.RNG, res *Result) error {
	if v.s.Params().Greedy() {
		return v.Greedy(t, logits, res)
	}
	return v.Sample(t, logits, nil, rng, res)
}

// Rows yields the target's logits rows of one verification on demand, in the
// layout of the package documentation: row 0 for the root, row i+1 for node
// i, each Vocab() values. A target that computes logits only for the rows a
// verification reads (greedy verification reads the root's and the accepted
// nodes', sampling those along its walk) saves the output layer on the rest.
type Rows interface {
	// Row returns row r. The slice must stay valid until the verification
	// returns.
	Row(r int) ([]float32, error)
}

// VerifyRows is Verify with the logits rows read from rows on demand; each
// row is asked for at most once per call. Its outcome is Verify's on the same
// rows.
func (v *Verifier) VerifyRows(t *Tree, rows Rows, rng *sample.RNG, res *Result) error {
	if err := v.checkTokens(t); err != nil {
		return err
	}
	v.lazy = rowCheck{src: rows, vocab: v.vocab}
	defer func() { v.lazy.src = nil }()
	if v.s.Params().Greedy() {
		return v.greedy(t, &v.lazy, nil, res)
	}
	return v.sample(t, &v.lazy, nil, rng, res)
}

// GreedyArgmax is Greedy with the target's argmax of every row already
// computed where its logits are (a GPU's tensor.Device.SampleRows at
// temperature 0, so that a verification copies ids, not rows, to the host):
// argmax[r] for row r, lowest id on ties, or -1 for a row the device could
// not rank (a NaN or infinite logit), which is then read from rows so that
// such a row fails or ranks exactly as Greedy would. Its outcome is
// Greedy's on the same rows.
func (v *Verifier) GreedyArgmax(t *Tree, argmax []int32, rows Rows, res *Result) error {
	if err := v.checkTokens(t); err != nil {
		return err
	}
	if len(argmax) < t.Len()+1 {
		return fmt.Errorf("spec: %d argmax values for a tree of %d nodes: want %d (one per row)", len(argmax), t.Len(), t.Len()+1)
	}
	for r, a := range argmax[:t.Len()+1] {
		if int(a) >= v.vocab || a < -1 {
			return fmt.Errorf("spec: argmax %d of target logits row %d is outside the vocabulary of %d", a, r, v.vocab)
		}
	}
	v.lazy = rowCheck{src: rows, vocab: v.vocab}
	defer func() { v.lazy.src = nil }()
	return v.greedy(t, &v.lazy, argmax, res)
}

// SampleRows is Sample (sampled or, with draft == nil, deterministic drafts)
// with the target's logits rows read from rows on demand; each row is asked
// for at most once per call. draft, when not nil, holds (t.Len()+1) rows of
// Vocab() draft probabilities in Sample's layout. Its outcome is Sample's on
// the same rows.
func (v *Verifier) SampleRows(t *Tree, rows Rows, draft []float32, rng *sample.RNG, res *Result) error {
	if err := v.checkTokens(t); err != nil {
		return err
	}
	if want := (t.Len() + 1) * v.vocab; draft != nil && len(draft) != want {
		return fmt.Errorf("spec: draft probabilities of length %d for a tree of %d nodes: want %d ((nodes+1) rows of %d)", len(draft), t.Len(), want, v.vocab)
	}
	v.lazy = rowCheck{src: rows, vocab: v.vocab}
	defer func() { v.lazy.src = nil }()
	return v.sample(t, &v.lazy, draft, rng, res)
}

// flatRows serves rows from one [(n+1)·V] slice.
type flatRows struct {
	logits []float32
	vocab  int
}

func (f *flatRows) Row(r int) ([]float32, error) {
	return f.logits[r*f.vocab : (r+1)*f.vocab], nil
}

// rowCheck checks the length of every row a Rows source returns.
type rowCheck struct {
	src   Rows
	vocab int
}

func (c *rowCheck) Row(r int) ([]float32, error) {
	row, err := c.src.Row(r)
	if err != nil {
		return nil, fmt.Errorf("spec: target logits row %d: %w", r, err)
	}
	if len(row) != c.vocab {
		return nil, fmt.Errorf("spec: target logits row %d has %d values: want %d (the vocabulary size)", r, len(row), c.vocab)
	}
	return row, nil
}

// Greedy accepts the longest path whose every token is the target's argmax
// (lowest id on ties) at its parent's position, then appends the target's
// argmax at the last accepted position. Among equally long paths (possible
// only when siblings repeat a token) the first in node order wins. It ignores
// the sampler's parameters.
func (v *Verifier) Greedy(t *Tree, logits []float32, res *Result) error {
	if err := v.checkRows(t, logits, nil); err != nil {
		return err
	}
	v.flat = flatRows{logits: logits, vocab: v.vocab}
	defer func() { v.flat.logits = nil }()
	return v.greedy(t, &v.flat, nil, res)
}

// greedy is Greedy over rows read on demand; known, when not nil, holds
// rows' argmax values computed already (-1 where not).
func (v *Verifier) greedy(t *Tree, rows Rows, known []int32, res *Result) error {
	res.reset()
	n := t.Len()
	v.grow(n)
	for i := range n + 1 {
		v.rowArg[i] = -1
		if known != nil && known[i] >= 0 {
			v.rowArg[i] = int(known[i])
		}
	}
	argmax := func(r int) (int, error) {
		if v.rowArg[r] < 0 {
			row, err := rows.Row(r)
			if err != nil {
				return -1, err
			}
			a, err := sample.Argmax(row)
			if err != nil {
				return -1, fmt.Errorf("spec: target logits row %d: %w", r, err)
			}
			v.rowArg[r] = a
		}
		return v.rowArg[r], nil
	}
	best, bestDepth := Root, 0
	for i, node := range t.nodes {
		v.ok[i] = false
		if node.Parent != Root && !v.ok[node.Parent] {
			continue
		}
		a, err := argmax(node.Parent + 1)
		if err != nil {
			return err
		}
		if node.Token == a {
			v.ok[i] = true
			if node.Depth > bestDepth {
				best, bestDepth = i, node.Depth
			}
		}
	}
	if best != Root {
		res.Path = t.Path(best, res.Path)
	}
	a, err := argmax(best + 1)
	if err != nil {
		return err
	}
	res.Bonus = a
	res.finish(t)
	return nil
}

func (v *Verifier) grow(n int) {
	if cap(v.ok) < n+1 {
		v.ok = make([]bool, n+1)
		v.rowArg = make([]int, n+1)
		v.score = make([]float64, n+1)
	}
	v.ok, v.rowArg, v.score = v.ok[:n+1], v.rowArg[:n+1], v.score[:n+1]
}

// Sample is lossless speculative sampling over a tree: the committed tokens
// are distributed exactly as if drawn one by one from the target with the
// sampler's rule. It walks down from the root; at each position with target
// distribution p it tries the children in order:
//
//   - Deterministic drafts (draft == nil: top-k trees such as EAGLE-2's or
//     Medusa's, whose tokens are chosen without sampling): child x is
//     accepted with probability p(x); on rejection x is removed from p and p
//     renormalised. This is speculative sampling against a draft that puts
//     all its mass on x, applied to each sibling in turn, and it is what
//     EAGLE does with sampling.
//   - Sampled drafts (draft != nil): the children of a position were drawn
//     one after another from the draft distribution q of draft's row for
//     that position, each without replacement of the earlier ones (a chain
//     is the one-child case). Child x is accepted with probability
//     min(1, p(x)/q(x)); on rejection p becomes norm(max(0, p - q)) and x
//     is removed from q, which is renormalised (SpecInfer's multi-round
//     rule in EAGLE's without-replacement form).
//
// When a child is accepted the walk moves to it and continues with the
// target's distribution there. When every child is rejected, or the position
// has none, the bonus token is drawn from the current (residual) p.
//
// Why this is lossless: at a position, let p_i be the residual before the
// i-th child and q_i its draft distribution. Given the rejected history, the
// i-th child is drawn from q_i, so one step is ordinary speculative sampling
// of p_i with proposal q_i, which emits a token distributed as p_i provided
// that, after a rejection, the emitted token is distributed as
// norm(max(0, p_i - q_i)) = p_{i+1}. It is, by induction from the last child
// (whose rejection leads to a draw from p_{i+1} itself), because p_{i+1}
// depends only on the history before child i. Hence the emitted token is
// distributed as p_1 = p, whichever sibling emits it; deterministic drafts are
// the case q_i = point mass at the i-th child.
//
// draft, when not nil, has the same row layout and length as logits and holds
// probabilities (not necessarily normalised); only the rows of positions with
// children are read. A drafted token with zero draft probability is an error.
func (v *Verifier) Sample(t *Tree, logits, draft []float32, rng *sample.RNG, res *Result) error {
	if err := v.checkRows(t, logits, draft); err != nil {
		return err
	}
	v.flat = flatRows{logits: logits, vocab: v.vocab}
	defer func() { v.flat.logits = nil }()
	return v.sample(t, &v.flat, draft, rng, res)
}

// sample is Sample over rows read on demand.
func (v *Verifier) sample(t *Tree, rows Rows, draft []float32, rng *sample.RNG, res *Result) error {
	res.reset()
	p, q := v.p, v.q
	cur := Root
	for {
		r := cur + 1
		row, err := rows.Row(r)
		if err != nil {
			return err
		}
		if err := v.s.Probs(row, p); err != nil {
			return fmt.Errorf("spec: target logits row %d: %w", r, err)
		}
		pmass := sum64(p)
		var qmass float64
		if draft != nil && t.FirstChild(cur) >= 0 {
			copy(q, v.row(draft, r))
			for _, x := range q {
				if !(x >= 0) || x > math.MaxFloat32 {
					return fmt.Errorf("spec: draft probabilities row %d hold %v: want finite non-negative values", r, x)
				}
				qmass += float64(x)
			}
		}
		accepted := Root
		for c := t.FirstChild(cur); c >= 0; c = t.nextSibling[c] {
			x := t.nodes[c].Token
			if draft == nil {
				px := float64(p[x])
				if px <= 0 {
					continue // the target cannot emit x here: rejected for sure
				}
				if rng.Float64()*pmass < px {
					accepted = c
					break
				}
				// Recompute the mass rather than subtract: when x was the
				// last token with mass, the next candidate then sees its
				// exact share.
				p[x] = 0
				pmass = sum64(p)
				continue
			}
			qx := float64(q[x])
			if !(qx > 0) {
				return fmt.Errorf("spec: node %d token %d has draft probability 0 in row %d: sampled drafts must come from the draft distribution", c, x, r)
			}
			// Accept with probability min(1, (p(x)/pmass) / (q(x)/qmass)).
			if rng.Float64()*qx*pmass < float64(p[x])*qmass {
				accepted = c
				break
			}
			// p <- norm(max(0, p/pmass - q/qmass)); q <- q without x.
			ip, iq := 1/pmass, 1/qmass
			var sum float64
			for i, pv := range p {
				d := float64(pv)*ip - float64(q[i])*iq
				if d > 0 {
					p[i] = float32(d)
					sum += float64(float32(d))
				} else {
					p[i] = 0
				}
			}
			if !(sum > 0) {
				// p == q up to rounding: in exact arithmetic the acceptance
				// above was certain, so accept x (a measure-zero event).
				accepted = c
				break
			}
			pmass = sum
			q[x] = 0
			qmass = sum64(q)
		}
		if accepted == Root {
			b, err := sample.SampleProbs(p, rng)
			if err != nil {
				return fmt.Errorf("spec: residual distribution at row %d: %w", r, err)
			}
			res.Bonus = b
			if cur != Root {
				res.Path = t.Path(cur, res.Path)
			}
			res.finish(t)
			return nil
		}
		cur = accepted
	}
}

// sum64 returns the float64 sum of x.
func sum64(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	return s
}

// TypicalParams configures Medusa's typical acceptance.
type TypicalParams struct {
	// Epsilon is the hard threshold (Medusa's posterior_threshold, default
	// 0.09).
	Epsilon float64
	// Alpha scales the entropy-dependent threshold (Medusa's
	// posterior_alpha, default 0.3).
	Alpha float64
}

// DefaultTypicalParams returns Medusa's defaults: epsilon 0.09, alpha 0.3.
func DefaultTypicalParams() TypicalParams { return TypicalParams{Epsilon: 0.09, Alpha: 0.3} }

// Validate reports an out-of-range field.
func (tp TypicalParams) Validate() error {
	if !(tp.Epsilon >= 0 && tp.Epsilon <= 1) || !(tp.Alpha >= 0) || math.IsInf(tp.Alpha, 1) {
		return fmt.Errorf("spec: typical acceptance epsilon %v, alpha %v: want epsilon in [0, 1] and a finite alpha >= 0", tp.Epsilon, tp.Alpha)
	}
	return nil
}

// Typical is Medusa's typical acceptance (lossy, opt-in): a drafted token x
// at a position whose target distribution is p = softmax(logits /
// temperature) over the whole vocabulary is accepted when
//
//	p(x) > min(epsilon, alpha * exp(-H(p))),  H(p) = -sum p log(p + 1e-5)
//
// (Medusa's formula, including its 1e-5 smoothing inside the log), and a node
// is accepted when its whole path is. The longest accepted path wins, ties
// going to the highest sum of log p(x) along the path, then to the first in
// node order. The bonus token is drawn with the sampler's full rule at the
// last accepted position. The sampler's temperature must be positive; its
// top-k, top-p and min-p affect only the bonus token, as in Medusa.
func (v *Verifier) Typical(t *Tree, logits []float32, tp TypicalParams, rng *sample.RNG, res *Result) error {
	if err := tp.Validate(); err != nil {
		return err
	}
	temp := v.s.Params().Temperature
	if !(temp > 0) {
		return fmt.Errorf("spec: typical acceptance needs a positive temperature; the sampler is greedy (use Greedy)")
	}
	if err := v.checkRows(t, logits, nil); err != nil {
		return err
	}
	res.reset()
	n := t.Len()
	v.grow(n)
	best, bestDepth, bestScore := Root, 0, math.Inf(-1)
	// Visit positions whose path is accepted (the root first, then accepted
	// nodes in index order, which comes before their children) and judge
	// their children.
	judge := func(parent int) error {
		first := t.FirstChild(parent)
		if first < 0 {
			return nil
		}
		r := parent + 1
		row := v.row(logits, r)
		_, mx, err := rowMax(row)
		if err != nil {
			return fmt.Errorf("spec: target logits row %d: %w", r, err)
		}
		invT := 1 / temp
		var sum float64
		for _, l := range row {
			sum += math.Exp((float64(l) - float64(mx)) * invT)
		}
		var h float64
		for _, l := range row {
			pi := math.Exp((float64(l)-float64(mx))*invT) / sum
			h -= pi * math.Log(pi+1e-5)
		}
		thr := math.Min(tp.Epsilon, tp.Alpha*math.Exp(-h))
		base := 0.0
		if parent != Root {
			base = v.score[parent]
		}
		for c := first; c >= 0; c = t.nextSibling[c] {
			x := t.nodes[c].Token
			px := math.Exp((float64(row[x])-float64(mx))*invT) / sum
			v.ok[c] = px > thr
			if !v.ok[c] {
				continue
			}
			v.score[c] = base + math.Log(px)
			d := t.nodes[c].Depth
			if d > bestDepth || d == bestDepth && v.score[c] > bestScore {
				best, bestDepth, bestScore = c, d, v.score[c]
			}
		}
		return nil
	}
	for i := range n {
		v.ok[i] = false
	}
	if err := judge(Root); err != nil {
		return err
	}
	for i := range n {
		if v.ok[i] {
			if err := judge(i); err != nil {
				return err
			}
		}
	}
	if best != Root {
		res.Path = t.Path(best, res.Path)
	}
	b, err := v.s.Sample(v.row(logits, best+1), rng)
	if err != nil {
		return fmt.Errorf("spec: target logits row %d: %w", best+1, err)
	}
	res.Bonus = b
	res.finish(t)
	return nil
}

// rowMax validates a logits row and returns its argmax and maximum.
func rowMax(row []float32) (int, float32, error) {
	a, err := sample.Argmax(row)
	if err != nil {
		return -1, 0, err
	}
	return a, row[a], nil
}
