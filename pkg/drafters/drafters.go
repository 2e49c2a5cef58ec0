// Package drafters defines what a speculative-decoding drafter method is to
// the rest of drafter: how its exports are recognised and loaded (Method),
// what a loaded drafter is asked for (Drafter: check a decoding setup, make
// proposers for it), and how it drafts during decoding (Proposer). Each
// method is a package below this one (medusa, eagle3) holding everything it
// is outside its training loop; the methods package lists them. The
// evaluation stage knows drafters only through these interfaces.
package drafters

import (
	"fmt"
	"strings"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// Kind names a drafter method, as drafter.json's "method" and eval's reports
// record it ("medusa", "eagle3").
type Kind string

// Mode is the shape of a draft.
type Mode string

// Draft shapes.
const (
	// ModeChain drafts one token per depth (Medusa: each head's top-1;
	// EAGLE-3: a chain of Depth tokens, greedy at temperature 0 and sampled
	// from the draft's distribution above it).
	ModeChain Mode = "chain"
	// ModeTree drafts a tree (Medusa: a static sparse tree; EAGLE-3:
	// EAGLE-2's dynamic tree).
	ModeTree Mode = "tree"
)

// Decoding is what a drafter is asked to draft and the sampling rule its
// tokens are verified under. Drafter.Configure fills the zero fields a method
// has defaults for and refuses settings that do not apply to it.
type Decoding struct {
	// Mode is ModeChain or ModeTree.
	Mode Mode
	// Depth is the number of drafted tokens of a chain, or of expansion
	// rounds of a dynamic tree.
	Depth int
	// Tree is a static tree's list of paths.
	Tree spec.Choices
	// TopK and TotalTokens shape a dynamic tree.
	TopK, TotalTokens int
	// HitK is the k of per-head top-k hit rates, for drafters that report
	// them (HitReporter).
	HitK int
	// Sampling is the target's sampling rule, which sampled drafts follow.
	Sampling sample.Params
	// Schedule decides each round how much of a chain goes to
	// verification (the zero value: all of it).
	Schedule Schedule
}

// ScheduleKind names a draft-length schedule.
type ScheduleKind string

// Draft-length schedules. Only a drafter that predicts its own acceptance
// (DSpark's confidence head) schedules; the others draft the fixed shape.
const (
	// ScheduleFixed verifies the whole chain every round.
	ScheduleFixed ScheduleKind = "fixed"
	// ScheduleThreshold stops the chain before the first token (after the
	// first) whose cumulative product of confidences, the predicted chance
	// that it and every token before it are accepted, is below Threshold.
	ScheduleThreshold ScheduleKind = "threshold"
	// ScheduleSPS is DSpark's scheduler (paper §3.2) for one request: it
	// grows the chain while the expected tokens of a round divided by the
	// round's cost, τ(ℓ)/RoundCost[ℓ] with τ(ℓ) = 1 + Σ_{j≤ℓ} Π_{i≤j} c_i,
	// keeps improving, and stops at the first token where it does not.
	ScheduleSPS ScheduleKind = "sps"
)

// Schedule is a draft-length schedule with its parameters. The decision
// reads only the drafter's own confidences, never the target's verdict,
// so every schedule is lossless.
type Schedule struct {
	// Kind is the schedule; "" means ScheduleFixed.
	Kind ScheduleKind
	// Threshold is ScheduleThreshold's cut, in (0, 1).
	Threshold float64
	// RoundCost[n] is ScheduleSPS's cost of a round that drafts and then
	// verifies the root and n drafted tokens, in decode steps of the
	// target: the inverse of the paper's engine steps per second at
	// verification width n+1, which counts the drafter's part of a step
	// as well. It holds at least Depth+1 entries; Configure leaves nil for
	// the decoding loop to measure.
	RoundCost []float64
	// Calibration is what the drafter's confidences are calibrated with,
	// filled by Configure for a schedule that reads them ("sts", or
	// "none" for raw confidences).
	Calibration string
}

// Scheduled reports whether s reads confidences (not the fixed schedule).
func (s Schedule) Scheduled() bool { return s.Kind != "" && s.Kind != ScheduleFixed }

// Validate checks the schedule's parameters for a chain of depth tokens.
func (s Schedule) Validate(depth int) error {
	switch s.Kind {
	case "", ScheduleFixed:
	case ScheduleThreshold:
		if !(s.Threshold > 0 && s.Threshold < 1) {
			return Refuse([]Setting{SettingThreshold}, "the confidence threshold %g is outside (0, 1)", s.Threshold)
		}
	case ScheduleSPS:
		// nil is left for the decoding loop to measure before it makes
		// the proposer (which needs it).
		if s.RoundCost != nil && len(s.RoundCost) < depth+1 {
			return Refuse([]Setting{SettingRoundCost}, "%d round costs for a chain of %d tokens: want one per verified length, the root alone to the whole chain (%d)", len(s.RoundCost), depth, depth+1)
		}
		for n, c := range s.RoundCost {
			if !(c > 0) || c > 1e6 {
				return Refuse([]Setting{SettingRoundCost}, "round cost %d (%g) is not a finite positive number", n, c)
			}
		}
	default:
		return Refuse([]Setting{SettingSchedule}, "unknown schedule %q: want fixed, threshold or sps", s.Kind)
	}
	return nil
}

// RequireFixed refuses a schedule other than the fixed one for a drafter
// that has no confidences to schedule with (named by who).
func RequireFixed(d Decoding, who string) error {
	if d.Schedule.Scheduled() {
		return Refuse([]Setting{SettingSchedule}, "%s drafts have no confidence head to schedule the draft length with; the %s schedule needs a DSpark draft trained with one", who, d.Schedule.Kind)
	}
	return nil
}

// Setting names a field of Decoding in errors, so that a command can name
// the flag that set it.
type Setting string

// The Decoding fields a SettingError can name.
const (
	SettingMode        Setting = "mode"
	SettingDepth       Setting = "depth"
	SettingTree        Setting = "tree"
	SettingTopK        Setting = "topk"
	SettingTotalTokens Setting = "total-tokens"
	SettingSchedule    Setting = "schedule"
	SettingThreshold   Setting = "confidence-threshold"
	SettingRoundCost   Setting = "round-cost"
)

// SettingError is a decoding setting the drafter cannot use: Settings are
// the fields at fault (the first is the one to change) and Msg says why,
// in the drafter's words.
type SettingError struct {
	Settings []Setting
	Msg      string
}

// Error names the settings and the reason.
func (e *SettingError) Error() string {
	names := make([]string, len(e.Settings))
	for i, s := range e.Settings {
		names[i] = string(s)
	}
	return strings.Join(names, ", ") + ": " + e.Msg
}

// Refuse returns a *SettingError for settings with the message format makes.
func Refuse(settings []Setting, format string, a ...any) error {
	return &SettingError{Settings: settings, Msg: fmt.Sprintf(format, a...)}
}

// Method is one drafter architecture: the export layouts it reads and how
// to load them. A Method holds no state.
type Method interface {
	// Kind names the method.
	Kind() Kind
	// Layouts lists the export layouts Detect reports, the one to use
	// first where a train output folder holds several exports of the method
	// (they carry the same weights).
	Layouts() []string
	// Detect reports the layout of the method's export held directly in dir,
	// "" when dir holds none; an error when it holds one the method cannot
	// read (an unsupported variant, a config without its weights file).
	Detect(dir string) (layout string, err error)
	// Wants says in words what Detect looks for, for the message when no
	// method finds a drafter.
	Wants() string
	// Load loads the export of the given layout in dir for target, checking
	// it against its config exactly, against prov (the drafter.json found
	// for it; nil when there is none) and against the target's geometry.
	Load(dir, layout string, target *model.Model, prov *Provenance) (Drafter, error)
	// Shape describes in words the draft a decoding setup (as Configure
	// returned it) makes, nodes being the most nodes of one draft.
	Shape(d Decoding, nodes int) string
	// Capture says what the method trains on by default for a target of
	// config c: the captures drafter distill makes by default hold the
	// union of every method's (methods.DefaultLayers).
	Capture(c *checkpoint.Config) CaptureNeeds
}

// CaptureNeeds are the captured target states a method's training reads by
// default, besides the tokens and loss mask every method reads.
type CaptureNeeds struct {
	// Layers are Hugging Face hidden_states indices (repeats allowed, in the
	// order the method fuses them); empty when the method reads none.
	Layers []int
	// FinalNorm is whether it reads the last hidden state after the final
	// norm (every method today: the target's distribution comes from it).
	FinalNorm bool
}

// Drafter is a drafter loaded for one target model.
type Drafter interface {
	// Kind names the drafter's method.
	Kind() Kind
	// Configure checks a decoding setup against the drafter and returns it
	// with the method's defaults filled in. Its errors are usage mistakes
	// (a setting that does not fit the drafter).
	Configure(d Decoding) (Decoding, error)
	// NewProposer makes a proposer for a setup Configure returned.
	NewProposer(d Decoding, opt ProposerOptions) (Proposer, error)
}

// ProposerOptions are what a proposer needs from the decoding loop.
type ProposerOptions struct {
	// Capacity bounds the committed positions of one sequence (the longest
	// prompt, the generated tokens and the verification's slack), for the
	// drafter's own caches.
	Capacity int
	// RNG is the decoding loop's random stream: sampled drafts draw from it,
	// so that drafting and verification share one stream per prompt.
	RNG *sample.RNG
}

// Proposer is a drafter at decoding time, for one sequence at a time. The
// decoding loop calls Start once per prompt after the target's prefill, then
// alternates Propose (draft a tree after the newest token) and Accept (the
// target's verdict), and Finish when the prompt ends.
type Proposer interface {
	// Taps are the hidden-state indices the drafter reads from the target's
	// passes (model.Options.Taps).
	Taps() []int
	// MaxNodes bounds the nodes of one proposed tree.
	MaxNodes() int
	// Start begins a prompt: res holds the prefill pass over prompt (taps
	// for every row), first is the target's first generated token.
	Start(prompt []int, first int, res *model.Result) error
	// Propose drafts the tree after the newest token into t; root is the
	// newest token's index in the generated output.
	Propose(t *spec.Tree, root int) error
	// Accept feeds the verdict: rows are the verification rows kept (the
	// root's first), res the verification pass, tokens the accepted draft
	// tokens followed by the target's bonus token.
	Accept(rows []int, res *model.Result, tokens []int) error
	// Finish ends a prompt whose generated tokens are out.
	Finish(out []int)
}

// SampledProposer is a Proposer that may draft by sampling.
type SampledProposer interface {
	Proposer
	// DraftProbs returns the draft distributions the last proposed tree was
	// drawn from, rows in spec.Verifier.SampleRows' layout, or nil when it
	// was drafted deterministically.
	DraftProbs() []float32
}

// HeadHits counts how often draft head Head's best guess (Top1) or one of
// its K best (TopK) was the token the target produced, over Count guesses;
// the rates are filled by the report.
type HeadHits struct {
	Head     int     `json:"head"`
	K        int     `json:"k"`
	Count    int     `json:"count"`
	Top1     int     `json:"top1"`
	TopK     int     `json:"topk"`
	Top1Rate float64 `json:"top1_rate"`
	TopKRate float64 `json:"topk_rate"`
}

// HitReporter is a Proposer whose heads each guess one later token (Medusa's
// head h the token h+2 places on): it scores its guesses against the
// generated tokens at every Finish.
type HitReporter interface {
	Proposer
	// HeadHits returns the counts over every prompt finished so far, and
	// the name of a head in reports ("Medusa head").
	HeadHits() (label string, hits []HeadHits)
}
