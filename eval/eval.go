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

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Mode is the shape of the draft (drafters.Mode).
type Mode = drafters.Mode

// Draft shapes.
const (
	// ModeChain drafts one token per depth: Medusa's top-1 per head, EAGLE-3's
	// chain of Depth tokens (greedy at temperature 0; at temperature > 0 each
	// token sampled from the draft's distribution under the same sampling
	// rule, verified with min(1, p/q)).
	ModeChain = drafters.ModeChain
	// ModeTree drafts a tree: Medusa's static sparse tree (Config.Tree or the
	// default tree for the head count), EAGLE-2's dynamic tree.
	ModeTree = drafters.ModeTree
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

	// Mode is ModeChain or ModeTree; "" is the drafter's default shape
	// (Medusa and EAGLE-3: a tree; DFlash and DSpark: a chain).
	Mode Mode
	// Depth, Tree, TopK and TotalTokens shape the draft (see
	// drafters.Decoding): a chain's length or a dynamic tree's rounds, a
	// static tree's paths, a dynamic tree's branching and size. The drafter
	// fills the zero ones with its defaults (drafters.Drafter.Configure;
	// Medusa: all heads, spec.DefaultChoices; EAGLE-3: a chain of 4, a tree
	// of depth 7, top-k 8, 60 tokens) and refuses those that do not apply to
	// it with a ConfigError.
	Depth             int
	Tree              spec.Choices
	TopK, TotalTokens int
	// Typical, when set, verifies with Medusa's typical acceptance (lossy;
	// needs a positive temperature).
	Typical *spec.TypicalParams
	// HitK is the k of per-head top-k hit rates, for drafters that report
	// them (drafters.HitReporter; 0: 5).
	HitK int
	// Schedule is the draft-length schedule of a drafter that predicts its
	// own acceptance (drafters.Schedule; the zero value drafts the fixed
	// shape). An SPS schedule without RoundCost has it measured on the
	// first prompt before decoding (MeasureRoundCost); the report records
	// the costs used, which a rerun can pass to repeat the run exactly.
	Schedule drafters.Schedule
	// Progress, when set, is called after each prompt.
	Progress func(done, total int)
}

// Defaults for the fields of Config left zero that are not the drafter's
// (Drafter.Configure fills those).
const (
	DefaultMaxNewTokens = 96
	DefaultHitK         = 5
)

// withDefaults returns cfg with zero fields defaulted and checks it: the
// settings every drafter shares here, the draft's shape by the drafter d.
func (cfg Config) withDefaults(d *Drafter) (Config, error) {
	fail := func(format string, a ...any) (Config, error) {
		return cfg, &ConfigError{Err: fmt.Errorf(format, a...)}
	}
	if cfg.Mode != "" && cfg.Mode != ModeChain && cfg.Mode != ModeTree {
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
	dec, err := d.d.Configure(cfg.decoding())
	if err != nil {
		return fail("eval: %w", err)
	}
	if dec.Mode != ModeChain && dec.Mode != ModeTree {
		return cfg, fmt.Errorf("eval: the %s drafter configured the draft shape %q, not chain or tree", d.d.Kind(), dec.Mode)
	}
	cfg.Mode, cfg.Depth, cfg.Tree, cfg.TopK, cfg.TotalTokens, cfg.HitK, cfg.Schedule = dec.Mode, dec.Depth, dec.Tree, dec.TopK, dec.TotalTokens, dec.HitK, dec.Schedule
	return cfg, nil
}

// decoding is what cfg asks of the drafter.
func (cfg Config) decoding() drafters.Decoding {
	return drafters.Decoding{Mode: cfg.Mode, Depth: cfg.Depth, Tree: cfg.Tree, TopK: cfg.TopK, TotalTokens: cfg.TotalTokens,
		HitK: cfg.HitK, Sampling: cfg.Sampling, Schedule: cfg.Schedule}
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
	measured := false
	if cfg.Schedule.Kind == drafters.ScheduleSPS && cfg.Schedule.RoundCost == nil {
		if cfg.Schedule.RoundCost, err = MeasureRoundCost(m, d, cfg, prompts[0].Tokens, roundCostReps); err != nil {
			return nil, fmt.Errorf("eval: measuring the round cost for the sps schedule: %w", err)
		}
		measured = true
	}
	r, err := newRunner(m, d, cfg, prompts)
	if err != nil {
		return nil, err
	}
	rep := r.newReport(prompts)
	if rep.Schedule != nil {
		rep.Schedule.Measured = measured
	}
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

// draftProbs returns the proposer's draft rows for the last tree, nil when it
// was drafted deterministically.
func (r *runner) draftProbs() []float32 {
	if r.sampled == nil {
		return nil
	}
	return r.sampled.DraftProbs()
}

// runner holds the buffers of one Run.
type runner struct {
	m       *model.Model
	d       *Drafter
	cfg     Config
	prop    drafters.Proposer
	sampled drafters.SampledProposer // prop, when it can draft by sampling
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
	// devRows, on a device with memory of its own (a GPU), serves the
	// logits rows a verification pass left on the device instead: the pass
	// computes every row's logits in one product (the lm_head read once,
	// not once per row read) and, when greedy, ranks them there (argmax),
	// so that only ids come back to the host.
	devRows *deviceRows
	argmax  []int32

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
	drafted                  int
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
	r.prop, err = d.d.NewProposer(cfg.decoding(), drafters.ProposerOptions{Capacity: longest + cfg.MaxNewTokens + 2, RNG: r.rng})
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	r.sampled, _ = r.prop.(drafters.SampledProposer)
	// Verification taps the final post-norm state too, so that greedy and
	// sampled verification compute logits only for the rows they read.
	r.taps = slices.Clone(r.prop.Taps())
	r.finalTap = slices.Index(r.taps, m.NumLayers())
	if r.finalTap < 0 {
		r.finalTap = len(r.taps)
		r.taps = append(r.taps, m.NumLayers())
	}
	r.lazy = lazyRows{m: m, buf: make([]float32, (r.prop.MaxNodes()+1)*m.VocabSize()), v: m.VocabSize(), h: m.HiddenSize()}
	if !m.HostMemory() {
		r.devRows = &deviceRows{dev: m.Device(), buf: r.lazy.buf, v: m.VocabSize()}
		r.argmax = make([]int32, r.prop.MaxNodes()+1)
	}
	capacity := longest + cfg.MaxNewTokens + r.prop.MaxNodes() + 2
	if capacity > m.MaxPositions() {
		return nil, fmt.Errorf("eval: the longest prompt (%d tokens) plus %d new tokens and a %d-node draft need %d positions; the model attends over %d",
			longest, cfg.MaxNewTokens, r.prop.MaxNodes(), capacity, m.MaxPositions())
	}
	r.seq, err = m.NewSequence(capacity)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	n := r.prop.MaxNodes() + 1
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
	defer func() { r.prop.Finish(r.spec) }()
	if r.stop(first, 1) {
		return 0, nil
	}
	t0 := time.Now()
	if err := r.prop.Start(prompt, first, res); err != nil {
		return 0, err
	}
	drafted += time.Since(t0)
	in := make([]model.Input, 1)
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		t0 = time.Now()
		if err := r.prop.Propose(&r.tree, len(r.spec)-1); err != nil {
			return 0, fmt.Errorf("drafting: %w", err)
		}
		drafted += time.Since(t0)
		r.drafted += r.tree.Len()
		r.tokens = append(r.tokens[:0], r.spec[len(r.spec)-1])
		r.parents = append(r.parents[:0], -1)
		for _, nd := range r.tree.Nodes() {
			r.tokens = append(r.tokens, nd.Token)
			r.parents = append(r.parents, nd.Parent+1) // Root (-1) maps to the root row 0
		}
		// Typical acceptance reads every row; greedy and sampled
		// verification read a few, computed on demand from the final state
		// on the CPU, left on a GPU (devRows).
		rows, vopt := model.LogitsNone, opt
		switch {
		case r.cfg.Typical != nil:
			rows = model.LogitsAll
		case r.devRows != nil:
			rows, vopt.DeviceLogits = model.LogitsAll, true
		}
		in[0] = model.Input{Seq: r.seq, Tokens: r.tokens, Parents: r.parents, Logits: rows}
		res, err := r.m.Forward(in, vopt)
		if err != nil {
			return 0, fmt.Errorf("verification pass: %w", err)
		}
		switch {
		case r.cfg.Typical != nil:
			err = r.ver.Typical(&r.tree, res.LogitsOf(0), *r.cfg.Typical, r.rng, &r.vres)
		case r.devRows != nil:
			err = r.verifyOnDevice(res.DeviceLogits)
		default:
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
		if err := r.prop.Accept(r.rows, res, r.vres.Tokens); err != nil {
			return 0, fmt.Errorf("feeding the drafter: %w", err)
		}
		drafted += time.Since(t0)
	}
}

// roundCostReps is how many timed rounds MeasureRoundCost takes the median
// of (after one warm-up round).
const roundCostReps = 9

// MeasureRoundCost measures what DSpark's SPS scheduler weighs expected
// tokens against (drafters.Schedule.RoundCost): the cost of a round that
// drafts with d (cfg's draft at its full length) and verifies a root and
// n = 0..cfg.Depth drafted tokens after prompt, in units of a one-position
// verification pass (a decode step). Drafting and the verification lengths
// are timed interleaved within each of reps rounds so that they share the
// machine's load; each is the median of its rounds. The costs are made
// non-decreasing: a longer pass measured faster is noise, and the
// scheduler must not be drawn to a length by it.
func MeasureRoundCost(m *model.Model, d *Drafter, cfg Config, prompt []int, reps int) ([]float64, error) {
	if len(prompt) == 0 || cfg.Depth < 1 || reps < 1 {
		return nil, fmt.Errorf("eval: measuring round costs needs a prompt, a chain of at least one token and rounds >= 1")
	}
	dec := cfg.decoding()
	dec.Schedule = drafters.Schedule{} // the whole chain: the drafter's part hardly depends on the length
	n := cfg.Depth + 1
	prop, err := d.d.NewProposer(dec, drafters.ProposerOptions{Capacity: len(prompt) + n + 2, RNG: sample.NewRNG(cfg.Seed, 0)})
	if err != nil {
		return nil, err
	}
	seq, err := m.NewSequence(len(prompt) + n + 1)
	if err != nil {
		return nil, err
	}
	res, err := m.Forward([]model.Input{{Seq: seq, Tokens: prompt, Logits: model.LogitsLast}}, model.Options{Taps: prop.Taps()})
	if err != nil {
		return nil, fmt.Errorf("prefill: %w", err)
	}
	first := prompt[len(prompt)-1] // any token: only the time counts
	if err := prop.Start(prompt, first, res); err != nil {
		return nil, err
	}
	defer prop.Finish(nil)
	tokens, parents := make([]int, n), make([]int, n)
	for i := range tokens {
		tokens[i] = prompt[i%len(prompt)]
		parents[i] = i - 1
	}
	// The taps speculate's verification reads: the drafter's and the
	// final state.
	taps := slices.Clone(prop.Taps())
	if !slices.Contains(taps, m.NumLayers()) {
		taps = append(taps, m.NumLayers())
	}
	opt, rows := model.Options{Taps: taps}, model.LogitsNone
	if !m.HostMemory() {
		// As speculate's verification runs on such a device.
		rows, opt.DeviceLogits = model.LogitsAll, true
	}
	verify, draft := make([][]float64, n), make([]float64, 0, reps)
	in := make([]model.Input, 1)
	var tree spec.Tree
	for rep := range reps + 1 {
		t0 := time.Now()
		if err := prop.Propose(&tree, 0); err != nil {
			return nil, fmt.Errorf("drafting: %w", err)
		}
		if rep > 0 {
			draft = append(draft, time.Since(t0).Seconds())
		}
		for l := 1; l <= n; l++ {
			in[0] = model.Input{Seq: seq, Tokens: tokens[:l], Parents: parents[:l], Logits: rows}
			t0 := time.Now()
			if _, err := m.Forward(in, opt); err != nil {
				return nil, fmt.Errorf("a verification pass of %d positions: %w", l, err)
			}
			dt := time.Since(t0).Seconds()
			if err := seq.Commit(nil); err != nil {
				return nil, err
			}
			if rep > 0 {
				verify[l-1] = append(verify[l-1], dt)
			}
		}
	}
	step := median(verify[0])
	if !(step > 0) {
		return nil, fmt.Errorf("a verification pass of one position measured %g s", step)
	}
	dr := median(draft)
	cost := make([]float64, n)
	for l := range cost {
		cost[l] = (dr + median(verify[l])) / step
		if l > 0 {
			cost[l] = max(cost[l], cost[l-1])
		}
	}
	return cost, nil
}

// median sorts x and returns its middle value.
func median(x []float64) float64 {
	slices.Sort(x)
	return x[len(x)/2]
}

// verifyOnDevice verifies the tree against the logits rows the pass left
// on the device: greedily from their argmax there (only the ids are read
// back), else by reading the rows the verifier asks for.
func (r *runner) verifyOnDevice(logits tensor.Tensor) error {
	r.devRows.logits = logits
	defer func() { r.devRows.logits = tensor.Tensor{} }()
	q := r.draftProbs()
	switch {
	case q != nil:
		return r.ver.SampleRows(&r.tree, r.devRows, q, r.rng, &r.vres)
	case r.cfg.Sampling.Greedy():
		n := logits.Rows()
		r.m.Device().SampleRows(r.argmax[:n], logits, 0, nil)
		return r.ver.GreedyArgmax(&r.tree, r.argmax[:n], r.devRows, &r.vres)
	}
	return r.ver.VerifyRows(&r.tree, r.devRows, r.rng, &r.vres)
}

// deviceRows serves a verification pass's logits rows from the device that
// holds them ([rows, V]), copying a row to the host when the verifier reads
// it.
type deviceRows struct {
	dev    tensor.Device
	logits tensor.Tensor
	buf    []float32 // [maxNodes+1, V]
	v      int
}

// Row implements spec.Rows.
func (d *deviceRows) Row(r int) ([]float32, error) {
	if r < 0 || r >= d.logits.Rows() {
		return nil, fmt.Errorf("eval: logits row %d of a %d-row verification pass", r, d.logits.Rows())
	}
	out := d.buf[r*d.v : (r+1)*d.v]
	d.dev.Read(out, d.logits.RowRange(r, r+1))
	return out, nil
}

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
