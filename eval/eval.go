// Package eval measures a drafter with real speculative decoding against the
// target model it was trained for, the way `drafter eval` runs it.
//
// For every prompt it runs plain autoregressive decoding with the target (the
// baseline) and speculative decoding with the drafter: each step the drafter
// proposes a chain or a tree of tokens after the newest token, the target
// verifies the whole tree in one forward pass with tree attention, and only the
// accepted path stays in the target's KV cache. The same verification pass taps
// the hidden states the drafter reads next (Medusa: the final post-norm state;
// EAGLE-3: its three feature layers), so the target never runs twice for a step.
//
// Acceptance is greedy at temperature 0, lossless speculative sampling above it
// (pkg/spec), or Medusa's typical acceptance when asked (lossy). At temperature
// 0 the speculative output must equal the baseline output token for token;
// Report.Lossless counts the prompts where it does not.
package eval

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// Mode is the shape of the draft.
type Mode string

// Draft shapes.
const (
	// ModeChain drafts one token per depth: Medusa's top-1 per head, EAGLE-3's
	// chain of Depth tokens (greedy at temperature 0; at temperature > 0 each
	// token sampled from the draft's distribution under the same sampling
	// rule, verified with min(1, p/q)).
	ModeChain Mode = "chain"
	// ModeTree drafts a tree: Medusa's static sparse tree (Config.Tree or the
	// default tree for the head count), EAGLE-2's dynamic tree.
	ModeTree Mode = "tree"
)

// Config selects how Run decodes.
type Config struct {
	// Sampling is the decoding rule of both the baseline and the speculative
	// run; temperature 0 is greedy and turns on the losslessness check.
	Sampling sample.Params
	// Seed keys the random streams: prompt i draws from stream i of Seed.
	Seed uint64
	// MaxNewTokens bounds each prompt's generated tokens.
	MaxNewTokens int
	// EOS lists the token ids that end generation (they are kept in the
	// output); empty runs every prompt to MaxNewTokens.
	EOS []int

	// Mode is ModeChain or ModeTree (default ModeTree).
	Mode Mode
	// Depth is, in chain mode, the number of drafted tokens (Medusa: heads
	// used, 0 = all heads; EAGLE-3: k, 0 = 4); for the EAGLE-2 tree, the
	// number of expansion rounds (0 = 7). Unused by Medusa trees.
	Depth int
	// Tree is Medusa's static tree (nil: spec.DefaultChoices for the head count).
	Tree spec.Choices
	// TopK and TotalTokens configure EAGLE-2's dynamic tree (0: 8 and 60).
	TopK, TotalTokens int
	// Typical, when set, verifies with Medusa's typical acceptance (lossy;
	// needs a positive temperature).
	Typical *spec.TypicalParams
	// HitK is the k of the Medusa per-head top-k hit rate (0: 5).
	HitK int
	// Progress, when set, is called after each prompt.
	Progress func(done, total int)
}

// Defaults for the fields of Config left zero.
const (
	DefaultMaxNewTokens = 96
	DefaultEagleChain   = 4
	DefaultEagleDepth   = 7
	DefaultEagleTopK    = 8
	DefaultEagleTotal   = 60
	DefaultHitK         = 5
)

// withDefaults returns cfg with zero fields defaulted and checks it against
// the drafter d.
func (cfg Config) withDefaults(d *Drafter) (Config, error) {
	fail := func(format string, a ...any) (Config, error) {
		return cfg, &ConfigError{Err: fmt.Errorf(format, a...)}
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeTree
	}
	if cfg.Mode != ModeChain && cfg.Mode != ModeTree {
		return fail("eval: mode %q: want chain or tree", cfg.Mode)
	}
	if cfg.MaxNewTokens == 0 {
		cfg.MaxNewTokens = DefaultMaxNewTokens
	}
	if cfg.MaxNewTokens < 1 {
		return fail("eval: max new tokens %d: want at least 1", cfg.MaxNewTokens)
	}
	if err := cfg.Sampling.Validate(); err != nil {
		return fail("eval: %w", err)
	}
	if cfg.HitK == 0 {
		cfg.HitK = DefaultHitK
	}
	if cfg.Depth < 0 || cfg.TopK < 0 || cfg.TotalTokens < 0 || cfg.HitK < 1 {
		return fail("eval: depth %d, top-k %d, total tokens %d: want non-negative values", cfg.Depth, cfg.TopK, cfg.TotalTokens)
	}
	if cfg.Typical != nil {
		if err := cfg.Typical.Validate(); err != nil {
			return fail("eval: typical acceptance: %w", err)
		}
		if cfg.Sampling.Greedy() {
			return fail("eval: typical acceptance needs a positive temperature (at temperature 0 acceptance is greedy and exact)")
		}
	}
	switch d.Info.Kind {
	case KindMedusa:
		heads := d.medusa.Heads
		if cfg.TopK != 0 || cfg.TotalTokens != 0 {
			return fail("eval: top-k and total tokens configure EAGLE-2's dynamic tree; a Medusa tree is set with a list of paths (--tree)")
		}
		if cfg.Mode == ModeChain {
			if cfg.Tree != nil {
				return fail("eval: a tree was given in chain mode; use tree mode for a static tree")
			}
			if cfg.Depth == 0 {
				cfg.Depth = heads
			}
			if cfg.Depth > heads {
				return fail("eval: chain depth %d exceeds the drafter's %d Medusa heads", cfg.Depth, heads)
			}
		} else {
			if cfg.Depth != 0 {
				return fail("eval: depth does not apply to a Medusa tree (its depth is the longest --tree path)")
			}
			if cfg.Tree == nil {
				cfg.Tree = spec.DefaultChoices(heads)
			}
			if err := cfg.Tree.Validate(); err != nil {
				return fail("eval: tree: %w", err)
			}
			if cfg.Tree.Depth() > heads {
				return fail("eval: tree paths reach depth %d but the drafter has %d Medusa heads", cfg.Tree.Depth(), heads)
			}
		}
	case KindEagle3:
		if cfg.Tree != nil {
			return fail("eval: a static tree (--tree) applies to Medusa heads; EAGLE-3 builds its tree dynamically (depth, top-k, total tokens)")
		}
		if cfg.Mode == ModeChain {
			if cfg.TopK != 0 || cfg.TotalTokens != 0 {
				return fail("eval: top-k and total tokens apply to the EAGLE-2 tree, not to chain mode")
			}
			if cfg.Depth == 0 {
				cfg.Depth = DefaultEagleChain
			}
		} else {
			if cfg.Depth == 0 {
				cfg.Depth = DefaultEagleDepth
			}
			if cfg.TopK == 0 {
				cfg.TopK = DefaultEagleTopK
			}
			if cfg.TotalTokens == 0 {
				cfg.TotalTokens = DefaultEagleTotal
			}
		}
	}
	return cfg, nil
}

// ConfigError is a decoding setting that does not fit the drafter (for
// example a static tree for an EAGLE-3 draft): a usage mistake.
type ConfigError struct{ Err error }

// Error describes the failure.
func (e *ConfigError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *ConfigError) Unwrap() error { return e.Err }

// Prompt is one tokenised prompt.
type Prompt struct {
	// ID names the prompt in reports (the record's id, or its line).
	ID string
	// Tokens is the model input, special tokens included.
	Tokens []int
}

// Run evaluates drafter d on the prompts with target m and returns the report.
// Each prompt is decoded twice, by the baseline and speculatively, one after
// the other so that both see the same machine load.
func Run(ctx context.Context, m *model.Model, d *Drafter, prompts []Prompt, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults(d)
	if err != nil {
		return nil, err
	}
	if len(prompts) == 0 {
		return nil, fmt.Errorf("eval: no prompts")
	}
	r, err := newRunner(m, d, cfg, prompts)
	if err != nil {
		return nil, err
	}
	rep := r.newReport(prompts)
	for i, p := range prompts {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("eval: interrupted after %d of %d prompts: %w", i, len(prompts), err)
		}
		if err := r.runPrompt(ctx, i, p, rep); err != nil {
			return nil, fmt.Errorf("eval: prompt %d (%s): %w", i, p.ID, err)
		}
		if cfg.Progress != nil {
			cfg.Progress(i+1, len(prompts))
		}
	}
	r.finish(rep)
	return rep, nil
}

// proposer is a drafter at decoding time. The runner calls start once per
// prompt after the target's prefill, then alternates propose (draft a tree
// after the newest token) and accept (the target's verdict).
type proposer interface {
	// taps are the hidden-state indices the drafter reads from the target.
	taps() []int
	// maxNodes bounds the nodes of one proposed tree.
	maxNodes() int
	// start begins a prompt: res holds the prefill pass over prompt (taps for
	// every row), first is the target's first generated token.
	start(prompt []int, first int, res *model.Result) error
	// propose drafts the tree after the newest token into t; root is the
	// newest token's index in the generated output.
	propose(t *spec.Tree, root int) error
	// accept feeds the verdict: rows are the verification rows kept (the
	// root's first), res the verification pass, tokens the accepted draft
	// tokens followed by the target's bonus token.
	accept(rows []int, res *model.Result, tokens []int) error
	// finish ends a prompt whose generated tokens are out.
	finish(out []int)
}

// sampledProposer is a proposer that may draft by sampling: draftProbs
// returns the draft distributions its last tree was drawn from (rows in
// spec.Verifier.SampleRows' layout), or nil for a deterministic draft.
type sampledProposer interface {
	proposer
	draftProbs() []float32
}

// draftProbs returns the proposer's draft rows for the last tree, nil when it
// was drafted deterministically.
func (r *runner) draftProbs() []float32 {
	if r.sampled == nil {
		return nil
	}
	return r.sampled.draftProbs()
}

// runner holds the buffers of one Run.
type runner struct {
	m       *model.Model
	d       *Drafter
	cfg     Config
	prop    proposer
	sampled sampledProposer // prop, when it can draft by sampling
	seq     *model.Sequence
	sampler *sample.Sampler
	ver     *spec.Verifier
	rng     *sample.RNG
	eos     []bool
	taps    []int
	// finalTap is the index in taps of the final post-norm state, which
	// lazy turns into the logits rows verification reads.
	finalTap int
	lazy     lazyRows

	tree    spec.Tree
	vres    spec.Result
	tokens  []int
	parents []int
	rows    []int
	base    []int
	spec    []int
	margins []float32

	stats                    spec.Stats
	baseDur, specDur, drDur  time.Duration
	baseTokens, specTokens   int
	baseForwards, specFwd    int
	promptTokens, lossChecks int
}

func newRunner(m *model.Model, d *Drafter, cfg Config, prompts []Prompt) (*runner, error) {
	sm, err := sample.NewSampler(m.VocabSize(), cfg.Sampling)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	r := &runner{m: m, d: d, cfg: cfg, sampler: sm, ver: spec.NewVerifier(sm), rng: sample.NewRNG(cfg.Seed, 0)}
	r.eos = make([]bool, m.VocabSize())
	for _, id := range cfg.EOS {
		if id < 0 || id >= len(r.eos) {
			return nil, fmt.Errorf("eval: end-of-sequence id %d is outside the vocabulary [0, %d)", id, len(r.eos))
		}
		r.eos[id] = true
	}
	longest := 0
	for i, p := range prompts {
		if len(p.Tokens) == 0 {
			return nil, fmt.Errorf("eval: prompt %d (%s) has no tokens", i, p.ID)
		}
		for _, t := range p.Tokens {
			if t < 0 || t >= m.VocabSize() {
				return nil, fmt.Errorf("eval: prompt %d (%s): token %d is outside the vocabulary [0, %d)", i, p.ID, t, m.VocabSize())
			}
		}
		longest = max(longest, len(p.Tokens))
	}
	switch d.Info.Kind {
	case KindMedusa:
		r.prop, err = newMedusaProposer(m, d.medusa, cfg)
	case KindEagle3:
		r.prop, err = newEagleProposer(m, d.eagle, cfg, longest+cfg.MaxNewTokens+2, r.rng)
	default:
		err = fmt.Errorf("eval: unknown drafter kind %q", d.Info.Kind)
	}
	if err != nil {
		return nil, err
	}
	r.sampled, _ = r.prop.(sampledProposer)
	// Verification taps the final post-norm state too, so that greedy and
	// sampled verification compute logits only for the rows they read.
	r.taps = slices.Clone(r.prop.taps())
	r.finalTap = slices.Index(r.taps, m.NumLayers())
	if r.finalTap < 0 {
		r.finalTap = len(r.taps)
		r.taps = append(r.taps, m.NumLayers())
	}
	r.lazy = lazyRows{m: m, buf: make([]float32, (r.prop.maxNodes()+1)*m.VocabSize()), v: m.VocabSize(), h: m.HiddenSize()}
	capacity := longest + cfg.MaxNewTokens + r.prop.maxNodes() + 2
	if capacity > m.MaxPositions() {
		return nil, fmt.Errorf("eval: the longest prompt (%d tokens) plus %d new tokens and a %d-node draft need %d positions; the model attends over %d",
			longest, cfg.MaxNewTokens, r.prop.maxNodes(), capacity, m.MaxPositions())
	}
	r.seq, err = m.NewSequence(capacity)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	n := r.prop.maxNodes() + 1
	r.tokens = make([]int, 0, n)
	r.parents = make([]int, 0, n)
	r.rows = make([]int, 0, n)
	r.base = make([]int, 0, cfg.MaxNewTokens)
	r.spec = make([]int, 0, cfg.MaxNewTokens+n)
	r.margins = make([]float32, 0, cfg.MaxNewTokens)
	return r, nil
}

// runPrompt decodes prompt i both ways and records the outcome.
func (r *runner) runPrompt(ctx context.Context, i int, p Prompt, rep *Report) error {
	t0 := time.Now()
	if err := r.baseline(p.Tokens, uint64(i)); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	t1 := time.Now()
	var st spec.Stats
	drafted, err := r.speculate(ctx, p.Tokens, uint64(i), &st)
	if err != nil {
		return fmt.Errorf("speculative decoding: %w", err)
	}
	t2 := time.Now()
	r.baseDur += t1.Sub(t0)
	r.specDur += t2.Sub(t1)
	r.drDur += drafted
	r.baseTokens += len(r.base)
	r.specTokens += len(r.spec)
	r.baseForwards += len(r.base)
	r.specFwd += st.Steps + 1
	r.promptTokens += len(p.Tokens)
	r.stats.Merge(&st)
	pr := PromptResult{ID: p.ID, PromptTokens: len(p.Tokens), Generated: len(r.spec), BaselineGenerated: len(r.base),
		Steps: st.Steps, MeanAcceptLength: st.MeanAcceptLength(), Output: slices.Clone(r.spec)}
	if r.cfg.Sampling.Greedy() {
		r.lossChecks++
		if mm := firstMismatch(r.base, r.spec); mm >= 0 {
			x := Mismatch{Prompt: i, ID: p.ID, Index: mm, BaselineLen: len(r.base), SpeculativeLen: len(r.spec)}
			if mm < len(r.base) {
				x.Baseline = r.base[mm]
				x.Margin = float64(r.margins[mm])
			} else {
				x.Baseline = -1
			}
			if mm < len(r.spec) {
				x.Speculative = r.spec[mm]
			} else {
				x.Speculative = -1
			}
			rep.Lossless.Mismatches = append(rep.Lossless.Mismatches, x)
			pr.Mismatch = true
		}
	}
	rep.PerPrompt = append(rep.PerPrompt, pr)
	return nil
}

// firstMismatch returns the first index where a and b differ (a length
// difference counts), or -1 when they are equal.
func firstMismatch(a, b []int) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}

// stop reports whether generation ends after token t with n tokens generated.
func (r *runner) stop(t, n int) bool {
	return r.eos[t] || n >= r.cfg.MaxNewTokens
}

// baseline decodes one token per target forward into r.base; at temperature 0
// it records the margin between the two best logits of every step.
func (r *runner) baseline(prompt []int, stream uint64) error {
	r.seq.Reset()
	r.rng.Reset(r.cfg.Seed, stream)
	r.base = r.base[:0]
	r.margins = r.margins[:0]
	in := []model.Input{{Seq: r.seq, Tokens: prompt, Logits: model.LogitsLast}}
	var one [1]int
	for {
		res, err := r.m.Forward(in, model.Options{})
		if err != nil {
			return err
		}
		lg := res.LogitsOf(0)
		t, err := r.sampler.Sample(lg, r.rng)
		if err != nil {
			return err
		}
		if r.cfg.Sampling.Greedy() {
			r.margins = append(r.margins, margin(lg, t))
		}
		r.base = append(r.base, t)
		if r.stop(t, len(r.base)) {
			return nil
		}
		one[0] = t
		in[0].Tokens = one[:]
	}
}

// margin returns how far the logit of best is above the runner-up.
func margin(lg []float32, best int) float32 {
	second := float32(0)
	found := false
	for i, v := range lg {
		if i != best && (!found || v > second) {
			second, found = v, true
		}
	}
	if !found {
		return 0
	}
	return lg[best] - second
}

// speculate decodes prompt speculatively into r.spec and returns the time the
// drafter took.
func (r *runner) speculate(ctx context.Context, prompt []int, stream uint64, st *spec.Stats) (time.Duration, error) {
	r.seq.Reset()
	r.rng.Reset(r.cfg.Seed, stream)
	r.spec = r.spec[:0]
	var drafted time.Duration
	opt := model.Options{Taps: r.taps}
	res, err := r.m.Forward([]model.Input{{Seq: r.seq, Tokens: prompt, Logits: model.LogitsLast}}, opt)
	if err != nil {
		return 0, err
	}
	first, err := r.sampler.Sample(res.LogitsOf(0), r.rng)
	if err != nil {
		return 0, err
	}
	r.spec = append(r.spec, first)
	defer func() { r.prop.finish(r.spec) }()
	if r.stop(first, 1) {
		return 0, nil
	}
	t0 := time.Now()
	if err := r.prop.start(prompt, first, res); err != nil {
		return 0, err
	}
	drafted += time.Since(t0)
	in := make([]model.Input, 1)
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		t0 = time.Now()
		if err := r.prop.propose(&r.tree, len(r.spec)-1); err != nil {
			return 0, fmt.Errorf("drafting: %w", err)
		}
		drafted += time.Since(t0)
		r.tokens = append(r.tokens[:0], r.spec[len(r.spec)-1])
		r.parents = append(r.parents[:0], -1)
		for _, nd := range r.tree.Nodes() {
			r.tokens = append(r.tokens, nd.Token)
			r.parents = append(r.parents, nd.Parent+1) // Root (-1) maps to the root row 0
		}
		// Typical acceptance reads every row; greedy and sampled
		// verification read a few, computed on demand from the final state.
		rows := model.LogitsNone
		if r.cfg.Typical != nil {
			rows = model.LogitsAll
		}
		in[0] = model.Input{Seq: r.seq, Tokens: r.tokens, Parents: r.parents, Logits: rows}
		res, err := r.m.Forward(in, opt)
		if err != nil {
			return 0, fmt.Errorf("verification pass: %w", err)
		}
		if r.cfg.Typical != nil {
			err = r.ver.Typical(&r.tree, res.LogitsOf(0), *r.cfg.Typical, r.rng, &r.vres)
		} else {
			r.lazy.hidden = res.HiddenOf(r.finalTap, 0)
			if q := r.draftProbs(); q != nil {
				err = r.ver.SampleRows(&r.tree, &r.lazy, q, r.rng, &r.vres)
			} else {
				err = r.ver.VerifyRows(&r.tree, &r.lazy, r.rng, &r.vres)
			}
			r.lazy.hidden = nil
		}
		if err != nil {
			return 0, fmt.Errorf("verification: %w", err)
		}
		r.rows = append(r.rows[:0], 0)
		for _, n := range r.vres.Path {
			r.rows = append(r.rows, n+1)
		}
		if err := r.seq.Commit(r.rows); err != nil {
			return 0, fmt.Errorf("committing the accepted path: %w", err)
		}
		kept, done := 0, false
		for _, t := range r.vres.Tokens {
			r.spec = append(r.spec, t)
			kept++
			if r.stop(t, len(r.spec)) {
				done = true
				break
			}
		}
		st.AddCounts(len(r.vres.Path), r.vres.Reached, kept)
		if done {
			return drafted, nil
		}
		t0 = time.Now()
		if err := r.prop.accept(r.rows, res, r.vres.Tokens); err != nil {
			return 0, fmt.Errorf("feeding the drafter: %w", err)
		}
		drafted += time.Since(t0)
	}
}

// chainChoices returns the static tree of a chain of depth heads: top-1 of
// each head.
func chainChoices(depth int) spec.Choices {
	c := make(spec.Choices, depth)
	for d := range depth {
		c[d] = make([]int, d+1)
	}
	return c
}

// topK writes the indices of the k largest values of x into idx, best first,
// ties to the lower index, and returns idx[:k].
func topK(x []float32, k int, idx []int) []int {
	k = min(k, len(x))
	idx = idx[:0]
	for i, v := range x {
		if len(idx) == k && v <= x[idx[k-1]] {
			continue
		}
		pos := len(idx)
		if len(idx) < k {
			idx = append(idx, i)
		} else {
			pos = k - 1
		}
		for pos > 0 && x[idx[pos-1]] < v {
			idx[pos] = idx[pos-1]
			pos--
		}
		idx[pos] = i
	}
	return idx
}

// defaultEagleLayers are the HF hidden_states indices EAGLE-3 fuses by
// default: 2, L/2 and L-3.
func defaultEagleLayers(L int) []int { return []int{2, L / 2, L - 3} }

// lazyRows computes the target's logits rows of a verification pass from its
// final post-norm states, only for the rows the verifier reads (one row at a
// time: the output-layer product of a one-token decode step).
type lazyRows struct {
	m      *model.Model
	hidden []float32 // [rows, H] final states of the pass
	buf    []float32 // [maxNodes+1, V]
	v, h   int
}

// Row implements spec.Rows.
func (l *lazyRows) Row(r int) ([]float32, error) {
	if r < 0 || (r+1)*l.h > len(l.hidden) {
		return nil, fmt.Errorf("eval: logits row %d of a %d-row verification pass", r, len(l.hidden)/l.h)
	}
	out := l.buf[r*l.v : (r+1)*l.v]
	if err := l.m.LogitsFromHidden(out, l.hidden[r*l.h:(r+1)*l.h], 1); err != nil {
		return nil, err
	}
	return out, nil
}
