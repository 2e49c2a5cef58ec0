package dspark

import (
	"fmt"
	"math"
	"slices"
)

// CalibrationSTS names Sequential Temperature Scaling (DSpark §3.2).
const CalibrationSTS = "sts"

// Calibration is the confidence head's calibration on held-out blocks: per
// slot k a temperature T_k that the slot's confidence logit is divided by,
// fitted by Sequential Temperature Scaling so that the cumulative product
// Π_{i≤k} σ(z_i/T_i) predicts whether the first k+1 drafts are accepted.
// Acceptance differs with the serving rule, so there is one set per rule:
// Greedy (a draft is accepted when it is the target's argmax) and Sampled
// (speculative sampling at temperature 1: a draft is accepted with
// probability α = 1 - ½‖p_d - p_t‖₁). train writes it into drafter.json;
// eval reads it from there (no engine's config key for it is known).
type Calibration struct {
	// Method is CalibrationSTS.
	Method string `json:"method"`
	// Greedy and Sampled are the per-slot temperatures, one per slot of
	// the block.
	Greedy  []float64 `json:"greedy"`
	Sampled []float64 `json:"sampled"`
	// Blocks is the number of held-out blocks fitted on.
	Blocks int `json:"blocks"`
	// ECE is each rule's expected calibration error of the cumulative
	// products per slot, before (every T_k = 1) and after the fit, on the
	// blocks fitted on (after = before where the fit is not applied).
	ECE CalibrationECE `json:"ece"`
	// Cross is each rule's check that its fit generalises; a rule whose
	// fit does not keeps every T_k = 1.
	Cross CalibrationCross `json:"cross_fit"`
}

// CalibrationCross holds both rules' cross-fit checks.
type CalibrationCross struct {
	Greedy  CrossFit `json:"greedy"`
	Sampled CrossFit `json:"sampled"`
}

// CrossFit is a fit's check on blocks it did not see: the held-out blocks
// split in two folds, each fitted and scored on the other; Before and
// After are the mean ECE per slot (weighted by the blocks reaching each
// slot) with every T = 1 and with the other fold's temperatures. Applied
// says whether the fit lowered it, and so whether the rule's temperatures
// are the fit's (else all 1).
type CrossFit struct {
	Before  float64 `json:"ece_before"`
	After   float64 `json:"ece_after"`
	Applied bool    `json:"applied"`
}

// CalibrationECE are the ECEs per slot of both rules before and after
// calibration.
type CalibrationECE struct {
	GreedyBefore  []float64 `json:"greedy_before"`
	GreedyAfter   []float64 `json:"greedy_after"`
	SampledBefore []float64 `json:"sampled_before"`
	SampledAfter  []float64 `json:"sampled_after"`
}

// Validate checks c for a block of B slots: a known method and B finite
// positive temperatures per rule.
func (c *Calibration) Validate(B int) error {
	if c.Method != CalibrationSTS {
		return fmt.Errorf("confidence_calibration.method %q: want %q", c.Method, CalibrationSTS)
	}
	for _, set := range []struct {
		name string
		t    []float64
	}{{"greedy", c.Greedy}, {"sampled", c.Sampled}} {
		if len(set.t) != B {
			return fmt.Errorf("confidence_calibration.%s holds %d temperatures, want one per slot of the block (%d)", set.name, len(set.t), B)
		}
		for k, v := range set.t {
			if !(v > 0) || math.IsInf(v, 0) {
				return fmt.Errorf("confidence_calibration.%s[%d] = %g: want a finite positive temperature", set.name, k, v)
			}
		}
	}
	return nil
}

// Temperatures returns the per-slot temperatures for a serving rule:
// greedy verification or speculative sampling.
func (c *Calibration) Temperatures(greedy bool) []float64 {
	if greedy {
		return c.Greedy
	}
	return c.Sampled
}

// CalibrationBins is the number of equal-width bins over [0, 1] the fit's
// ECE uses: 15, the common choice since Guo et al. (2017), so that the ECEs
// recorded compare with published ones.
const CalibrationBins = 15

// The temperature grid: 10^(i/stsPerDecade) for i in [-stsSteps, stsSteps],
// 40 points a decade (a step of 10^(1/40) ≈ 1.059, finer than the ECE of a
// few thousand blocks can tell apart) over 10^±1.3 ≈ 0.05..20, with i = 0
// giving T = 1 exactly.
const (
	stsPerDecade = 40
	stsSteps     = 52
)

// STSGrid returns the temperatures the fit searches, in the order it tries
// them: 1 first, then outwards alternately above and below 1, so that a
// strict improvement is needed to move away from 1 and ties go to the
// temperature nearest 1 (a head that is already calibrated keeps T = 1).
func STSGrid() []float64 {
	g := make([]float64, 0, 2*stsSteps+1)
	g = append(g, 1)
	for i := 1; i <= stsSteps; i++ {
		g = append(g, math.Pow(10, float64(i)/stsPerDecade), math.Pow(10, -float64(i)/stsPerDecade))
	}
	return g
}

// ECE is the expected calibration error of predictions p against outcomes
// y (same length; outcomes may be soft, in [0, 1]) over bins equal-width
// bins of [0, 1]: Σ_b (W_b/W)·|mean_b p − mean_b y| = Σ_b |Σ_b w·(p − y)| / W,
// the weighted means taken within each bin. w holds per-item weights (nil:
// every item weighs 1). A prediction of exactly 1 falls in the last bin;
// predictions outside [0, 1] are clamped into the end bins. No items (or
// zero total weight) give 0.
func ECE(p, y, w []float64, bins int) (float64, error) {
	if len(y) != len(p) || (w != nil && len(w) != len(p)) {
		return 0, fmt.Errorf("ece: %d predictions, %d outcomes and %d weights: want as many of each", len(p), len(y), len(w))
	}
	if bins < 1 {
		return 0, fmt.Errorf("ece: %d bins: want at least 1", bins)
	}
	e := newECEBins(bins)
	for i, v := range p {
		wi := 1.0
		if w != nil {
			wi = w[i]
		}
		e.add(v, y[i], wi)
	}
	return e.value(), nil
}

// eceBins accumulates an ECE: per bin Σ w·(p − y), and the total weight.
// The fit reuses one across its grid so that its loop allocates nothing.
type eceBins struct {
	diff []float64
	w    float64
}

func newECEBins(bins int) *eceBins { return &eceBins{diff: make([]float64, bins)} }

func (e *eceBins) reset() {
	clear(e.diff)
	e.w = 0
}

func (e *eceBins) add(p, y, w float64) {
	// The bin is chosen on the clamped value: converting a float beyond
	// int's range is implementation-defined in Go. p = 1 (and NaN, which
	// no bin holds) go last.
	n, b := len(e.diff), 0
	switch {
	case p >= 1 || math.IsNaN(p):
		b = n - 1
	case p > 0:
		b = min(int(p*float64(n)), n-1)
	}
	e.diff[b] += w * (p - y)
	e.w += w
}

func (e *eceBins) value() float64 {
	if e.w <= 0 {
		return 0
	}
	var s float64
	for _, d := range e.diff {
		s += math.Abs(d)
	}
	return s / e.w
}

// STSFit is one serving rule's Sequential Temperature Scaling fit.
type STSFit struct {
	// Temperatures are T_k per slot (1 where no block reaches slot k).
	Temperatures []float64
	// Before and After are the ECEs per slot of the cumulative products
	// Π_{i≤k} σ(z_i) and Π_{i≤k} σ(z_i/T_i) against the prefix outcomes,
	// over the blocks valid through slot k (0 where there are none).
	Before, After []float64
	// Counts are the number of blocks valid through each slot.
	Counts []int
}

// FitSTS fits Sequential Temperature Scaling on held-out blocks of B
// slots. logits and outcomes are [n·B], block-major: slot k of block b at
// b·B+k, the confidence logit z_k and the conditional outcome of slot k
// given slots < k accepted (greedy: 1 when the draft is the target's
// argmax, else 0; sampled: the acceptance probability α_k ∈ [0, 1]).
// valid[b] ∈ [0, B] is the number of leading slots of block b that have a
// label (a block near the end of a response has fewer; entries past it are
// ignored). For k = 0..B-1 in turn, with T_0..T_{k-1} fixed, T_k is the
// grid temperature (STSGrid) minimising the ECE (CalibrationBins bins) of
// Π_{i≤k} σ(z_i/T_i) against the prefix outcome Π_{i≤k} y_i over the
// blocks valid through k: the product is what a scheduler reads as the
// probability that the first k+1 drafts are all accepted. Deterministic.
func FitSTS(B int, logits, outcomes []float64, valid []int) (*STSFit, error) {
	if B < 1 {
		return nil, fmt.Errorf("sts: block size %d: want at least 1", B)
	}
	n := len(valid)
	if len(logits) != n*B || len(outcomes) != n*B {
		return nil, fmt.Errorf("sts: %d logits and %d outcomes for %d blocks of %d slots: want %d of each", len(logits), len(outcomes), n, B, n*B)
	}
	for b, v := range valid {
		if v < 0 || v > B {
			return nil, fmt.Errorf("sts: block %d has %d valid slots: want 0..%d", b, v, B)
		}
		for k := range v {
			z, y := logits[b*B+k], outcomes[b*B+k]
			if math.IsNaN(z) || math.IsInf(z, 0) {
				return nil, fmt.Errorf("sts: block %d slot %d: confidence logit %g is not finite", b, k, z)
			}
			if !(y >= 0 && y <= 1) {
				return nil, fmt.Errorf("sts: block %d slot %d: outcome %g outside [0, 1]", b, k, y)
			}
		}
	}
	f := &STSFit{Temperatures: make([]float64, B), Before: make([]float64, B), After: make([]float64, B), Counts: make([]int, B)}
	grid := STSGrid()
	// Per block the running products through the previous slot: of the
	// fitted predictions, of the uncalibrated ones and of the outcomes.
	// Blocks that end drop out; the survivors are compacted in place, with
	// their slot's logit and outcome gathered beside them, so that the grid
	// loop reads contiguous slices and allocates nothing.
	idx := make([]int, 0, n)
	for b, v := range valid {
		if v > 0 {
			idx = append(idx, b)
		}
	}
	pFit, pRaw, pY := make([]float64, len(idx)), make([]float64, len(idx)), make([]float64, len(idx))
	z := make([]float64, len(idx))
	for i := range idx {
		pFit[i], pRaw[i], pY[i] = 1, 1, 1
	}
	e := newECEBins(CalibrationBins)
	for k := range B {
		m := 0
		for i, b := range idx {
			if valid[b] <= k {
				continue
			}
			idx[m], pFit[m], pRaw[m], pY[m] = b, pFit[i], pRaw[i], pY[i]*outcomes[b*B+k]
			z[m] = logits[b*B+k]
			m++
		}
		idx, pFit, pRaw, pY, z = idx[:m], pFit[:m], pRaw[:m], pY[:m], z[:m]
		f.Counts[k] = m
		f.Temperatures[k] = 1
		if m == 0 {
			continue
		}
		e.reset()
		for i := range m {
			pRaw[i] *= logistic(z[i])
			e.add(pRaw[i], pY[i], 1)
		}
		f.Before[k] = e.value()
		best, bestT := math.Inf(1), 1.0
		for _, T := range grid {
			e.reset()
			inv := 1 / T
			for i := range m {
				e.add(pFit[i]*logistic(z[i]*inv), pY[i], 1)
			}
			// A relative margin keeps rounding noise from moving T off 1
			// (or off a nearer grid point) on an exact tie.
			if v := e.value(); v < best*(1-1e-12) {
				best, bestT = v, T
			}
		}
		f.Temperatures[k], f.After[k] = bestT, best
		inv := 1 / bestT
		for i := range m {
			pFit[i] *= logistic(z[i] * inv)
		}
	}
	return f, nil
}

// PrefixECE is the ECE per slot (CalibrationBins bins) of the cumulative
// products Π_{i≤k} σ(z_i/T_i) against the prefix outcomes Π_{i≤k} y_i over
// the blocks valid through slot k, for blocks in FitSTS's layout and given
// temperatures (nil: every T_i = 1): a calibration's quality on blocks it
// was not fitted on.
func PrefixECE(B int, logits, outcomes []float64, valid []int, temps []float64) ([]float64, error) {
	if B < 1 || len(valid)*B != len(logits) || len(logits) != len(outcomes) || (temps != nil && len(temps) != B) {
		return nil, fmt.Errorf("prefix ece: %d logits, %d outcomes, %d blocks of %d slots and %d temperatures: want n·B of each, n blocks and B temperatures", len(logits), len(outcomes), len(valid), B, len(temps))
	}
	out := make([]float64, B)
	p, y := make([]float64, len(valid)), make([]float64, len(valid))
	for b := range valid {
		p[b], y[b] = 1, 1
	}
	e := newECEBins(CalibrationBins)
	for k := range B {
		inv := 1.0
		if temps != nil {
			inv = 1 / temps[k]
		}
		e.reset()
		for b, v := range valid {
			if v <= k {
				continue
			}
			if v > B {
				return nil, fmt.Errorf("prefix ece: block %d has %d valid slots: want 0..%d", b, v, B)
			}
			p[b] *= logistic(logits[b*B+k] * inv)
			y[b] *= outcomes[b*B+k]
			e.add(p[b], y[b], 1)
		}
		out[k] = e.value()
	}
	return out, nil
}

// logistic is σ(x) = 1/(1+e^{-x}) in float64 (session.go's sigmoid is
// σ(z/T) in float32, for serving). For x far below 0, exp(-x) is +Inf and
// the result 0, as it should be.
func logistic(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// Calibrate fits both serving rules' temperatures on the same held-out
// blocks (FitSTS's layout; greedy and sampled are the two rules'
// conditional outcomes) and returns the Calibration drafter.json holds. A
// rule's fit is applied only when it generalises: fitted on one half of the
// blocks, it must lower the ECE on the other half (crossFit). On a small
// held-out set the ECE-minimising temperatures fit the bins' noise (on the
// bundled model's 378-block halves the greedy fit raised the other half's
// ECE), and a scheduler reading such confidences would cut good drafts; a
// rule whose fit does not generalise keeps every T_k = 1.
func Calibrate(B int, logits, greedy, sampled []float64, valid []int) (*Calibration, error) {
	c := &Calibration{Method: CalibrationSTS}
	for _, r := range []struct {
		name          string
		outcomes      []float64
		temps         *[]float64
		before, after *[]float64
		cross         *CrossFit
	}{
		{"greedy", greedy, &c.Greedy, &c.ECE.GreedyBefore, &c.ECE.GreedyAfter, &c.Cross.Greedy},
		{"sampled", sampled, &c.Sampled, &c.ECE.SampledBefore, &c.ECE.SampledAfter, &c.Cross.Sampled},
	} {
		f, err := FitSTS(B, logits, r.outcomes, valid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
		if *r.cross, err = crossFit(B, logits, r.outcomes, valid); err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
		*r.temps, *r.before, *r.after = f.Temperatures, f.Before, f.After
		if !r.cross.Applied {
			*r.temps = slices.Repeat([]float64{1}, B)
			*r.after = f.Before
		}
	}
	for _, v := range valid {
		if v > 0 {
			c.Blocks++
		}
	}
	return c, nil
}

// crossFit splits the blocks in two folds (even and odd), fits each fold
// and scores the fit on the other, and returns the mean over both folds of
// the ECE per slot weighted by the blocks that reach the slot, with every
// T = 1 and with the other fold's fit; Applied when the fit's is lower.
func crossFit(B int, logits, outcomes []float64, valid []int) (CrossFit, error) {
	var cf CrossFit
	var wsum float64
	for fold := range 2 {
		var fl, fo, sl, so []float64
		var fv, sv []int
		for b, v := range valid {
			l, o := logits[b*B:(b+1)*B], outcomes[b*B:(b+1)*B]
			if b%2 == fold {
				fl, fo, fv = append(fl, l...), append(fo, o...), append(fv, v)
			} else {
				sl, so, sv = append(sl, l...), append(so, o...), append(sv, v)
			}
		}
		fit, err := FitSTS(B, fl, fo, fv)
		if err != nil {
			return cf, err
		}
		before, err := PrefixECE(B, sl, so, sv, nil)
		if err != nil {
			return cf, err
		}
		after, err := PrefixECE(B, sl, so, sv, fit.Temperatures)
		if err != nil {
			return cf, err
		}
		for k := range B {
			n := 0
			for _, v := range sv {
				if v > k {
					n++
				}
			}
			cf.Before += float64(n) * before[k]
			cf.After += float64(n) * after[k]
			wsum += float64(n)
		}
	}
	if wsum > 0 {
		cf.Before /= wsum
		cf.After /= wsum
	}
	cf.Applied = cf.After < cf.Before
	return cf, nil
}
