package dspark

import (
	"fmt"
	"slices"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// ConfidenceReporter is a DSpark proposer's view of its confidence head:
// the probability, per slot of the last proposed chain, that the slot's
// draft is accepted given that the slots before it were (NaN without a
// confidence head). A scheduler multiplies them for the expected
// acceptance of a prefix (methods.md §4).
type ConfidenceReporter interface {
	drafters.Proposer
	Confidences() []float32
}

var _ ConfidenceReporter = (*proposer)(nil)

// proposer drafts DSpark chains: each round runs the backbone once on the
// block after the newest token, then the Markov loop over the slots (add
// slot k's bias for the previous token, take the argmax at temperature 0
// or sample from the serving rule's draft distribution q above it, which
// it keeps for verification by speculative sampling). A schedule
// (drafters.Schedule) stops the chain early on the confidence head's
// calibrated confidences.
type proposer struct {
	m      *model.Model
	d      *Draft
	s      *Session
	tapIdx []int
	slot   []int // feature c is tap slot[c]
	depth  int
	sched  drafters.Schedule
	temps  []float64 // per slot calibration temperatures (nil: 1)

	feats  []float32
	anchor int
	lg     []float32 // [V] slot logits
	conf   []float32 // [depth] the last chain's confidences (sigmoid)

	sampled bool
	dsm     *sample.Sampler
	rng     *sample.RNG
	q       []float32 // [(depth+1), V]
	qn      int       // the last chain's rows of q: (nodes+1)·V
}

func newProposer(m *model.Model, d *Draft, cfg drafters.Decoding, temps []float64, capacity int, rng *sample.RNG) (*proposer, error) {
	if cfg.Schedule.Scheduled() {
		if !d.Heads.Shape.Confidence {
			return nil, fmt.Errorf("dspark: the %s schedule needs a confidence head", cfg.Schedule.Kind)
		}
		if err := cfg.Schedule.Validate(cfg.Depth); err != nil {
			return nil, fmt.Errorf("dspark: %w", err)
		}
		if cfg.Schedule.Kind == drafters.ScheduleSPS && cfg.Schedule.RoundCost == nil {
			return nil, fmt.Errorf("dspark: the sps schedule needs the round cost per verified length (drafters.Schedule.RoundCost)")
		}
		if temps != nil && len(temps) < cfg.Depth {
			return nil, fmt.Errorf("dspark: %d calibration temperatures for a chain of %d", len(temps), cfg.Depth)
		}
	}
	p := &proposer{m: m, d: d, depth: cfg.Depth, sched: cfg.Schedule, temps: temps}
	for _, id := range d.LayerIDs {
		// HF index L is the last layer's output after the final norm in
		// Transformers' list; the captures (and the engines) read it
		// before the norm, which is the model's PreNormLast tap.
		tap := id
		if id == m.NumLayers() {
			tap = model.PreNormLast
		}
		j := slices.Index(p.tapIdx, tap)
		if j < 0 {
			j = len(p.tapIdx)
			p.tapIdx = append(p.tapIdx, tap)
		}
		p.slot = append(p.slot, j)
	}
	V := m.VocabSize()
	p.lg, p.conf = make([]float32, V), make([]float32, cfg.Depth)
	if !cfg.Sampling.Greedy() {
		sm, err := sample.NewSampler(V, cfg.Sampling)
		if err != nil {
			return nil, err
		}
		p.sampled, p.dsm, p.rng = true, sm, rng
		p.q = make([]float32, (cfg.Depth+1)*V)
	}
	s, err := d.NewSession(capacity)
	if err != nil {
		return nil, err
	}
	p.s = s
	return p, nil
}

// Taps implements drafters.Proposer.
func (p *proposer) Taps() []int { return p.tapIdx }

// MaxNodes implements drafters.Proposer.
func (p *proposer) MaxNodes() int { return p.depth }

// fuse gathers the feature layers of rows of res as [len(rows), F·H].
func (p *proposer) fuse(res *model.Result, rows []int) []float32 {
	H, F := p.m.HiddenSize(), len(p.slot)
	need := len(rows) * F * H
	if cap(p.feats) < need {
		p.feats = make([]float32, need)
	}
	f := p.feats[:need]
	for c, sl := range p.slot {
		hid := res.HiddenOf(sl, 0)
		for j, r := range rows {
			copy(f[(j*F+c)*H:(j*F+c+1)*H], hid[r*H:(r+1)*H])
		}
	}
	return f
}

// Start implements drafters.Proposer: the prompt's rows are the context,
// the first generated token the anchor.
func (p *proposer) Start(prompt []int, first int, res *model.Result) error {
	p.s.Crop(0)
	rows := make([]int, len(prompt))
	for i := range rows {
		rows[i] = i
	}
	p.anchor = first
	return p.s.Append(p.fuse(res, rows))
}

// Accept implements drafters.Proposer: the verified rows (the old anchor
// and the accepted drafts) join the context; the bonus token anchors the
// next block.
func (p *proposer) Accept(rows []int, res *model.Result, tokens []int) error {
	if len(tokens) == 0 {
		return fmt.Errorf("dspark: accept without a bonus token")
	}
	p.anchor = tokens[len(tokens)-1]
	return p.s.Append(p.fuse(res, rows))
}

// Propose implements drafters.Proposer.
func (p *proposer) Propose(t *spec.Tree, root int) error {
	t.Reset()
	if err := p.s.Backbone(p.anchor); err != nil {
		return err
	}
	V := len(p.lg)
	prev, parent := p.anchor, spec.Root
	// cum is the predicted chance that every slot so far is accepted, tau
	// the expected tokens of a round verifying them (the target's own
	// included).
	cum, tau := 1.0, 1.0
	n := 0
	for k := range p.depth {
		c, err := p.s.Step(k, prev, p.lg)
		if err != nil {
			return err
		}
		if p.temps != nil {
			c = sigmoid(p.s.ConfidenceLogit(), p.temps[k])
		}
		p.conf[k] = c
		// The schedules read the draft's own confidences, nothing the
		// target says: verification stays lossless. The first slot is
		// always drafted (the backbone pass is spent either way).
		if k > 0 && p.stop(cum*float64(c), tau, k) {
			break
		}
		cum *= float64(c)
		tau += cum
		var x int
		if p.sampled {
			q := p.q[k*V : (k+1)*V]
			if err := p.dsm.Probs(p.lg, q); err != nil {
				return fmt.Errorf("dspark: draft distribution at slot %d: %w", k, err)
			}
			if x, err = sample.SampleProbs(q, p.rng); err != nil {
				return fmt.Errorf("dspark: drawing slot %d from the draft: %w", k, err)
			}
		} else {
			x = argmax(p.lg)
		}
		if parent, err = t.Add(x, parent, 0, 0); err != nil {
			return err
		}
		prev = x
		n++
	}
	if p.sampled {
		// Verification reads a row per node and one past the chain
		// (cleared: never read); a schedule may have cut the chain short.
		p.qn = (n + 1) * V
		clear(p.q[n*V : p.qn])
	}
	return nil
}

// stop reports whether the schedule ends the chain before slot k, given
// next, the cumulative confidence through slot k, and tau, the expected
// tokens of verifying the k slots before it.
func (p *proposer) stop(next, tau float64, k int) bool {
	switch p.sched.Kind {
	case drafters.ScheduleThreshold:
		return next < p.sched.Threshold
	case drafters.ScheduleSPS:
		// Φ(ℓ) = τ(ℓ)/cost(ℓ): stop at the first slot that does not
		// raise the expected tokens per unit of round cost.
		cost := p.sched.RoundCost
		return (tau+next)*cost[k] <= tau*cost[k+1]
	}
	return false
}

// Confidences implements ConfidenceReporter: one value per slot of the
// chain (Depth), calibrated when the schedule is; those past the slot where
// a schedule stopped the last Propose are left from before.
func (p *proposer) Confidences() []float32 { return p.conf }

// DraftProbs implements drafters.SampledProposer.
func (p *proposer) DraftProbs() []float32 {
	if !p.sampled {
		return nil
	}
	return p.q[:p.qn]
}

// Finish implements drafters.Proposer.
func (p *proposer) Finish([]int) {}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
