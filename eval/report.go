package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/methods"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// ReportVersion is the version of the report's JSON layout.
const ReportVersion = 1

// Report is the outcome of one Run, written with --report as JSON.
type Report struct {
	Version int `json:"version"`
	// Model and ModelFingerprint identify the target (filled by the caller).
	Model            string `json:"model,omitempty"`
	ModelFingerprint string `json:"model_fingerprint,omitempty"`
	// Drafter is what was evaluated.
	Drafter DrafterInfo `json:"drafter"`
	// Settings.
	Mode         Mode                `json:"mode"`
	Sampling     sample.Params       `json:"sampling"`
	Seed         uint64              `json:"seed"`
	MaxNewTokens int                 `json:"max_new_tokens"`
	Depth        int                 `json:"depth,omitempty"`
	TopK         int                 `json:"top_k,omitempty"`
	TotalTokens  int                 `json:"total_tokens,omitempty"`
	Tree         spec.Choices        `json:"tree,omitempty"`
	TreeNodes    int                 `json:"tree_nodes"`
	Typical      *spec.TypicalParams `json:"typical,omitempty"`
	// Schedule is the draft-length schedule, for a drafter that scheduled
	// one (nil: the fixed draft shape).
	Schedule *ScheduleInfo `json:"schedule,omitempty"`
	// Acceptance: "greedy", "speculative-sampling" (both lossless) or
	// "typical" (lossy: the output distribution differs from the target's).
	Acceptance string `json:"acceptance"`
	Lossy      bool   `json:"lossy"`
	Prompts    int    `json:"prompts"`
	// PromptFile is the prompt file (--prompts), PromptSHA256 its bytes'
	// SHA-256 and Limit the --limit used (0: all prompts), filled by the
	// caller: a baseline report must have been measured on the same prompts.
	// Reports of older drafters lack the hash.
	PromptFile   string `json:"prompt_file,omitempty"`
	PromptSHA256 string `json:"prompt_sha256,omitempty"`
	Limit        int    `json:"limit"`

	// MeanAcceptLength is the tokens committed per verification forward,
	// the target's own token included (τ).
	MeanAcceptLength float64 `json:"mean_accept_length"`
	// AcceptLengthHist[n] counts verification steps that accepted n-1 draft
	// tokens, i.e. committed n tokens with the target's own (index 0 unused).
	// A step cut short by an end-of-sequence token or the token limit is
	// binned by what it accepted, though Stats.Tokens counts what it kept.
	AcceptLengthHist []int `json:"accept_length_histogram"`
	// MeanDrafted is the draft tokens proposed per verification step: the
	// draft's size (fewer where a schedule cut it).
	MeanDrafted float64 `json:"mean_drafted"`
	// AcceptRateByDepth[d-1] is the share of steps that accepted a draft token
	// at depth d among those that examined one.
	AcceptRateByDepth []float64  `json:"accept_rate_by_depth"`
	Stats             spec.Stats `json:"stats"`
	// HeadHits are per-head hit rates against the tokens the target
	// produced, from drafters that report them (drafters.HitReporter:
	// Medusa's heads, those the chain or tree reaches; empty for EAGLE-3).
	HeadHits []drafters.HeadHits `json:"head_hits,omitempty"`

	Baseline    Speed   `json:"baseline"`
	Speculative Speed   `json:"speculative"`
	SpeedUp     float64 `json:"speed_up"`
	// DrafterShare is the fraction of the speculative run's time spent in
	// the drafter.
	DrafterShare float64 `json:"drafter_share"`
	// Cost is the speculative run's time per verification in units of one
	// baseline step: why speculation is or is not faster on this machine.
	Cost StepCost `json:"step_cost"`

	Lossless  Lossless       `json:"lossless"`
	PerPrompt []PromptResult `json:"per_prompt"`

	// headLabel names a head in HeadHits' table ("Medusa head").
	headLabel string
}

// ScheduleInfo is the draft-length schedule a run used.
type ScheduleInfo struct {
	Kind      drafters.ScheduleKind `json:"kind"`
	Threshold float64               `json:"threshold,omitempty"`
	// RoundCost is the SPS scheduler's cost of a round per verified
	// length (drafting included), in decode steps; Measured says whether
	// this run measured it (else it was given).
	RoundCost []float64 `json:"round_cost,omitempty"`
	Measured  bool      `json:"round_cost_measured,omitempty"`
	// Calibration is what the confidences were calibrated with ("sts",
	// "none").
	Calibration string `json:"calibration"`
}

// StepCost breaks the speculative run's time per verification forward down
// in units of the baseline's time per forward (a decode step). Verify is the
// target's verification forward (with the acceptance work around it), Draft
// the drafter's time per verification, and BreakEven = Verify + Draft the
// tokens a verification must commit for speculation to match the baseline:
// SpeedUp = (Baseline.Forwards / Speculative.Forwards) / BreakEven, the
// first factor being the tokens committed per forward (about
// MeanAcceptLength).
type StepCost struct {
	Verify    float64 `json:"verify"`
	Draft     float64 `json:"draft"`
	BreakEven float64 `json:"break_even"`
}

// Speed is one decoder's throughput over all prompts (prefill included).
type Speed struct {
	Tokens       int     `json:"tokens"`
	Forwards     int     `json:"target_forwards"`
	Seconds      float64 `json:"seconds"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	// DrafterSeconds is the drafter's part of Seconds (speculative run only).
	DrafterSeconds float64 `json:"drafter_seconds,omitempty"`
}

// Lossless is the token-for-token comparison of speculative and baseline
// outputs, made at temperature 0.
type Lossless struct {
	// Checked is false when the comparison does not apply (temperature > 0:
	// outputs are equal in distribution, not token for token).
	Checked bool `json:"checked"`
	// Prompts counts the prompts compared; Mismatches lists those that differ.
	Prompts    int        `json:"prompts"`
	Mismatches []Mismatch `json:"mismatches"`
}

// Mismatch is the first difference between the speculative and the baseline
// output of one prompt.
type Mismatch struct {
	Prompt int    `json:"prompt"`
	ID     string `json:"id"`
	// Index is the first generated position that differs; Baseline and
	// Speculative are the tokens there (-1 past an output's end).
	Index       int `json:"index"`
	Baseline    int `json:"baseline"`
	Speculative int `json:"speculative"`
	// Margin is how far the baseline's chosen logit was above the runner-up
	// at Index: a margin near float32 rounding (1e-5) means a numerical tie
	// between the batched and the one-token forward, anything larger a bug.
	Margin         float64 `json:"margin"`
	BaselineLen    int     `json:"baseline_len"`
	SpeculativeLen int     `json:"speculative_len"`
}

// PromptResult is one prompt's outcome.
type PromptResult struct {
	ID                string  `json:"id"`
	PromptTokens      int     `json:"prompt_tokens"`
	Generated         int     `json:"generated"`
	BaselineGenerated int     `json:"baseline_generated"`
	Steps             int     `json:"steps"`
	MeanAcceptLength  float64 `json:"mean_accept_length"`
	Mismatch          bool    `json:"mismatch,omitempty"`
	// Output holds the speculative run's generated token ids.
	Output []int `json:"output"`
}

func (r *runner) newReport(prompts []Prompt) *Report {
	cfg := r.cfg
	rep := &Report{Version: ReportVersion, Drafter: *r.d.Info, Mode: cfg.Mode, Sampling: cfg.Sampling, Seed: cfg.Seed,
		MaxNewTokens: cfg.MaxNewTokens, Depth: cfg.Depth, TopK: cfg.TopK, TotalTokens: cfg.TotalTokens,
		Tree: cfg.Tree, TreeNodes: r.prop.MaxNodes(), Typical: cfg.Typical, Prompts: len(prompts)}
	switch {
	case cfg.Typical != nil:
		rep.Acceptance, rep.Lossy = "typical", true
	case cfg.Sampling.Greedy():
		rep.Acceptance = "greedy"
	default:
		rep.Acceptance = "speculative-sampling"
	}
	rep.Lossless.Checked = cfg.Sampling.Greedy()
	rep.Lossless.Mismatches = []Mismatch{}
	if sc := cfg.Schedule; sc.Scheduled() {
		rep.Schedule = &ScheduleInfo{Kind: sc.Kind, Threshold: sc.Threshold, RoundCost: sc.RoundCost, Calibration: sc.Calibration}
	}
	return rep
}

// finish fills the aggregate fields.
func (r *runner) finish(rep *Report) {
	st := r.stats
	rep.Stats = st
	rep.MeanAcceptLength = st.MeanAcceptLength()
	rep.AcceptLengthHist = make([]int, 1)
	// Stats.Hist is indexed by accepted draft tokens; shift by one for the
	// tokens a step commits with the target's own.
	for a, n := range st.Hist {
		for len(rep.AcceptLengthHist) <= a+1 {
			rep.AcceptLengthHist = append(rep.AcceptLengthHist, 0)
		}
		rep.AcceptLengthHist[a+1] += n
	}
	if st.Steps > 0 {
		rep.MeanDrafted = float64(r.drafted) / float64(st.Steps)
	}
	rep.AcceptRateByDepth = make([]float64, len(st.Tried))
	for d := range st.Tried {
		rep.AcceptRateByDepth[d] = st.AcceptRate(d + 1)
	}
	if hr, ok := r.prop.(drafters.HitReporter); ok {
		label, hits := hr.HeadHits()
		rep.headLabel = label
		rep.HeadHits = append([]drafters.HeadHits(nil), hits...)
		for i := range rep.HeadHits {
			h := &rep.HeadHits[i]
			if h.Count > 0 {
				h.Top1Rate = float64(h.Top1) / float64(h.Count)
				h.TopKRate = float64(h.TopK) / float64(h.Count)
			}
		}
	}
	rep.Baseline = Speed{Tokens: r.baseTokens, Forwards: r.baseForwards, Seconds: r.baseDur.Seconds()}
	rep.Speculative = Speed{Tokens: r.specTokens, Forwards: r.specFwd, Seconds: r.specDur.Seconds(), DrafterSeconds: r.drDur.Seconds()}
	for _, s := range []*Speed{&rep.Baseline, &rep.Speculative} {
		if s.Seconds > 0 {
			s.TokensPerSec = float64(s.Tokens) / s.Seconds
		}
	}
	if rep.Baseline.TokensPerSec > 0 {
		rep.SpeedUp = rep.Speculative.TokensPerSec / rep.Baseline.TokensPerSec
	}
	if rep.Speculative.Seconds > 0 {
		rep.DrafterShare = rep.Speculative.DrafterSeconds / rep.Speculative.Seconds
	}
	if b, s := rep.Baseline, rep.Speculative; b.Forwards > 0 && b.Seconds > 0 && s.Forwards > 0 {
		step := b.Seconds / float64(b.Forwards)
		rep.Cost.Verify = (s.Seconds - s.DrafterSeconds) / float64(s.Forwards) / step
		rep.Cost.Draft = s.DrafterSeconds / float64(s.Forwards) / step
		rep.Cost.BreakEven = rep.Cost.Verify + rep.Cost.Draft
	}
	rep.Lossless.Prompts = r.lossChecks
}

// LosslessError is returned by Report.CheckLossless when a speculative output
// differed from the baseline at temperature 0: a correctness failure of the
// decoder, not a weak drafter.
type LosslessError struct {
	Mismatches []Mismatch
	Prompts    int
}

// Error describes the failure.
func (e *LosslessError) Error() string {
	m := e.Mismatches[0]
	return fmt.Sprintf("speculative decoding is not lossless: %d of %d prompts differ from plain greedy decoding (first: prompt %d (%s) at generated token %d: baseline %d, speculative %d, baseline logit margin %.3g)",
		len(e.Mismatches), e.Prompts, m.Prompt, m.ID, m.Index, m.Baseline, m.Speculative, m.Margin)
}

// CheckLossless returns a *LosslessError when any prompt's speculative output
// differed from the baseline.
func (rep *Report) CheckLossless() error {
	if len(rep.Lossless.Mismatches) == 0 {
		return nil
	}
	return &LosslessError{Mismatches: rep.Lossless.Mismatches, Prompts: rep.Lossless.Prompts}
}

// WriteText prints the report as tables.
func (rep *Report) WriteText(w io.Writer) error {
	// Each section is its own table so that its columns fit its content.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, a ...any) {
		if format == "\t\n" {
			tw.Flush()
			fmt.Fprintln(w)
			tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			return
		}
		fmt.Fprintf(tw, format, a...)
	}
	d := rep.Drafter
	p("drafter\t%s (%s layout) in %s\n", d.Kind, d.Layout, d.Dir)
	if rep.Model != "" {
		p("target\t%s\n", rep.Model)
	}
	p("draft\t%s\n", rep.shape())
	p("decoding\t%s, %s acceptance%s, seed %d, %d prompts, up to %d new tokens\n", rep.Sampling, rep.Acceptance,
		map[bool]string{true: " (LOSSY: output distribution differs from the target's)", false: ""}[rep.Lossy], rep.Seed, rep.Prompts, rep.MaxNewTokens)
	p("\t\n")
	p("mean acceptance length\t%.3f tokens per target forward (%d tokens in %d verification steps)\n", rep.MeanAcceptLength, rep.Stats.Tokens, rep.Stats.Steps)
	p("draft tokens per step\t%.2f\n", rep.MeanDrafted)
	if sc := rep.Schedule; sc != nil && sc.RoundCost != nil {
		how := "given"
		if sc.Measured {
			how = "measured on the first prompt; --round-cost " + formatCosts(sc.RoundCost) + " repeats this run"
		}
		p("round cost\t%s decode steps to draft and verify 0..%d drafts (%s)\n", formatCosts(sc.RoundCost), len(sc.RoundCost)-1, how)
	}
	p("\t\n")
	p("tokens per step\tsteps\tshare\n")
	for n := 1; n < len(rep.AcceptLengthHist); n++ {
		p("%d\t%d\t%.1f%%\n", n, rep.AcceptLengthHist[n], pct(rep.AcceptLengthHist[n], rep.Stats.Steps))
	}
	p("\t\n")
	p("depth\ttried\taccepted\trate\n")
	for i, r := range rep.AcceptRateByDepth {
		p("%d\t%d\t%d\t%.3f\n", i+1, rep.Stats.Tried[i], rep.Stats.Accepted[i], r)
	}
	if len(rep.HeadHits) > 0 {
		p("\t\n")
		label := rep.headLabel
		if label == "" {
			label = "head"
		}
		p("%s\tpredicts\tguesses\ttop-1\ttop-%d\n", label, rep.HeadHits[0].K)
		for _, h := range rep.HeadHits {
			p("%d\tt+%d\t%d\t%.3f\t%.3f\n", h.Head, h.Head+2, h.Count, h.Top1Rate, h.TopKRate)
		}
	}
	p("\t\n")
	p("\ttokens\ttarget forwards\tseconds\ttokens/s\n")
	p("baseline\t%d\t%d\t%.2f\t%.1f\n", rep.Baseline.Tokens, rep.Baseline.Forwards, rep.Baseline.Seconds, rep.Baseline.TokensPerSec)
	p("speculative\t%d\t%d\t%.2f\t%.1f\n", rep.Speculative.Tokens, rep.Speculative.Forwards, rep.Speculative.Seconds, rep.Speculative.TokensPerSec)
	p("speed-up\t%.2fx (drafter %.1f%% of the speculative time)\n", rep.SpeedUp, 100*rep.DrafterShare)
	if c := rep.Cost; c.BreakEven > 0 {
		p("cost\ta verification costs %.2f decode steps of the target and %.2f of drafting: speculation pays above %.2f tokens per verification\n", c.Verify, c.Draft, c.BreakEven)
	}
	if rep.Lossless.Checked {
		if n := len(rep.Lossless.Mismatches); n == 0 {
			p("lossless\tyes: %d/%d prompts identical to greedy decoding\n", rep.Lossless.Prompts, rep.Lossless.Prompts)
		} else {
			p("lossless\tNO: %d/%d prompts differ from greedy decoding\n", n, rep.Lossless.Prompts)
			for _, m := range rep.Lossless.Mismatches {
				p("\tprompt %d (%s): first difference at token %d (baseline %d, speculative %d, logit margin %.3g)\n", m.Prompt, m.ID, m.Index, m.Baseline, m.Speculative, m.Margin)
			}
		}
	} else {
		p("lossless\tnot compared token for token at temperature > 0\n")
	}
	return tw.Flush()
}

// shape describes the draft shape in words, as the method of the report's
// drafter kind among methods.All words it.
func (rep *Report) shape() string {
	d := drafters.Decoding{Mode: rep.Mode, Depth: rep.Depth, Tree: rep.Tree, TopK: rep.TopK, TotalTokens: rep.TotalTokens, Sampling: rep.Sampling}
	if sc := rep.Schedule; sc != nil {
		d.Schedule = drafters.Schedule{Kind: sc.Kind, Threshold: sc.Threshold, RoundCost: sc.RoundCost, Calibration: sc.Calibration}
	}
	if m := methodOf(methods.All(), rep.Drafter.Kind); m != nil {
		return m.Shape(d, rep.TreeNodes)
	}
	return fmt.Sprintf("%s %s: depth %d, top-k %d, %d total tokens, %d nodes", rep.Drafter.Kind, rep.Mode, rep.Depth, rep.TopK, rep.TotalTokens, rep.TreeNodes)
}

// scheduleKind names the report's draft-length schedule.
func (rep *Report) scheduleKind() drafters.ScheduleKind {
	if rep.Schedule == nil {
		return drafters.ScheduleFixed
	}
	return rep.Schedule.Kind
}

// formatCosts writes costs as --round-cost takes them.
func formatCosts(c []float64) string {
	s := make([]string, len(c))
	for i, v := range c {
		s[i] = strconv.FormatFloat(v, 'g', 4, 64)
	}
	return strings.Join(s, ",")
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// WriteJSON writes the report to path atomically (temp file, fsync, rename).
func (rep *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("eval: encoding the report: %w", err)
	}
	return writeFileAtomic(path, append(b, '\n'))
}

// ReadReport reads a report written by WriteJSON (for --baseline).
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("eval: baseline report: %w", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("eval: baseline report %s: %w", path, err)
	}
	if rep.Version != ReportVersion {
		return nil, fmt.Errorf("eval: baseline report %s has version %d, want %d (a drafter eval --report file)", path, rep.Version, ReportVersion)
	}
	if rep.Stats.Steps == 0 {
		return nil, fmt.Errorf("eval: baseline report %s records no verification steps", path)
	}
	return &rep, nil
}

func writeFileAtomic(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data); err != nil {
		return fmt.Errorf("eval: %w", err) // atomicfile names the file
	}
	return nil
}

// Gate is the acceptance bar a release pipeline sets.
type Gate struct {
	// MinAcceptance fails a mean acceptance length below it (0: off).
	MinAcceptance float64
	// Baseline is an earlier report to compare with (nil: off); MaxDrop the
	// largest allowed drop of the mean acceptance length below it, in tokens
	// per forward, or as a fraction of the baseline's when Relative.
	Baseline *Report
	MaxDrop  float64
	Relative bool
}

// GateError is returned by Gate.Check when the drafter falls short; the
// command maps it to exit code 3.
type GateError struct {
	Reasons []string
}

// Error describes the failure.
func (e *GateError) Error() string {
	return "drafter failed the acceptance gate: " + strings.Join(e.Reasons, "; ")
}

// Check returns a *GateError listing every bar rep misses, or nil.
func (g Gate) Check(rep *Report) error {
	var why []string
	tau := rep.MeanAcceptLength
	if g.MinAcceptance > 0 && tau < g.MinAcceptance {
		why = append(why, fmt.Sprintf("mean acceptance length %.3f is below --min-acceptance %.3f", tau, g.MinAcceptance))
	}
	if b := g.Baseline; b != nil {
		floor := b.MeanAcceptLength - g.MaxDrop
		drop := fmt.Sprintf("%.3f", g.MaxDrop)
		if g.Relative {
			floor = b.MeanAcceptLength * (1 - g.MaxDrop)
			drop = fmt.Sprintf("%.3g%%", 100*g.MaxDrop)
		}
		if tau < floor {
			why = append(why, fmt.Sprintf("mean acceptance length %.3f dropped below the baseline report's %.3f by more than --max-drop %s (floor %.3f)",
				tau, b.MeanAcceptLength, drop, floor))
		}
	}
	if len(why) == 0 {
		return nil
	}
	return &GateError{Reasons: why}
}

// Comparable lists the settings in which rep differs from the baseline report
// b, which make a --max-drop comparison doubtful (an empty list when none).
func (rep *Report) Comparable(b *Report) []string {
	var d []string
	if rep.Sampling != b.Sampling {
		d = append(d, fmt.Sprintf("sampling %s vs %s", rep.Sampling, b.Sampling))
	}
	if rep.Drafter.Kind != b.Drafter.Kind {
		d = append(d, fmt.Sprintf("drafter kind %s vs %s", rep.Drafter.Kind, b.Drafter.Kind))
	}
	if rep.Mode != b.Mode || rep.Depth != b.Depth || rep.TopK != b.TopK || rep.TotalTokens != b.TotalTokens || rep.TreeNodes != b.TreeNodes {
		d = append(d, fmt.Sprintf("draft %q vs %q", rep.shape(), b.shape()))
	}
	if rep.scheduleKind() != b.scheduleKind() {
		d = append(d, fmt.Sprintf("draft-length schedule %s vs %s (a schedule trades acceptance length for shorter verifications)", rep.scheduleKind(), b.scheduleKind()))
	}
	if rep.MaxNewTokens != b.MaxNewTokens || rep.Prompts != b.Prompts {
		d = append(d, fmt.Sprintf("%d prompts x %d new tokens vs %d x %d", rep.Prompts, rep.MaxNewTokens, b.Prompts, b.MaxNewTokens))
	}
	return d
}
