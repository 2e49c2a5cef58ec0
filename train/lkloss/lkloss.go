// Package lkloss reads the trainers' --loss: the cross-entropy they have
// always trained with, or an LK loss (tensor.LK; Nebius, arXiv 2602.23881),
// which trains the draft toward the acceptance rate α of speculative
// sampling. Both trainers (train/eagle3, train/medusa) parse it here, so the
// names, the combinations and the recorded spelling are the same for both.
package lkloss

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The loss names --loss takes (speculators' and SpecForge's names for the
// LK forms).
const (
	// CE is the trainers' cross-entropy (EAGLE-3's soft cross-entropy toward
	// the target distribution, Medusa's toward the data's tokens), computed
	// exactly as before the LK losses existed.
	CE = "ce"
	// KL is Σ p·(log p - log q), the cross-entropy less p's entropy: the
	// same gradient as CE, computed by the LK kernel, with α logged.
	KL = "kl"
	// TV is 1 - α.
	TV = "tv"
	// NLA is -log max(α, 1e-5).
	NLA = "nla"
	// Hybrid is λ·KL + (1-λ)·TV with λ = exp(-η·α), α detached.
	Hybrid = "lk_hybrid"
)

// DefaultEta is Hybrid's η when none is given: the Nebius model cards' and
// speculators' 3.
const DefaultEta = 3.0

// Names lists the names --loss takes, for help texts and errors.
var Names = []string{CE, KL, TV, NLA, Hybrid}

// Loss is a parsed --loss.
type Loss struct {
	// CE selects the trainers' cross-entropy; LK is unused then.
	CE bool
	// LK is the LK loss (its forms' weights and η) otherwise.
	LK tensor.LK
}

// UsesEta reports whether the loss weighs Hybrid, the only form η changes.
func (l Loss) UsesEta() bool { return !l.CE && l.LK.Hybrid != 0 }

// Parse reads a --loss spec: "" (CE), one of Names, or a JSON object of
// names to weights, speculators' combinations such as {"kl":0.1,"tv":0.9}
// (weights 0 or more and finite, not normalised, at least one above 0; "ce"
// in an object weighs KL, the same gradient). eta is Hybrid's η, 0 or more
// (0 there means DefaultEta); it must be 0 when the loss does not weigh
// Hybrid, so that a run never records a setting that does nothing.
func Parse(spec string, eta float64) (Loss, error) {
	var l Loss
	s := strings.TrimSpace(spec)
	switch s {
	case "", CE:
		l.CE = true
	case KL:
		l.LK.KL = 1
	case TV:
		l.LK.TV = 1
	case NLA:
		l.LK.NLA = 1
	case Hybrid:
		l.LK.Hybrid = 1
	default:
		if !strings.HasPrefix(s, "{") {
			return l, fmt.Errorf("loss %q: want one of %s, or a JSON object of them to weights such as {\"kl\":0.1,\"tv\":0.9}", spec, strings.Join(Names, ", "))
		}
		var m map[string]float64
		d := json.NewDecoder(strings.NewReader(s))
		if err := d.Decode(&m); err != nil || d.More() {
			return l, fmt.Errorf("loss %q: not a JSON object of loss names to weights (%v)", spec, err)
		}
		var total float64
		for name, w := range m {
			if !(w >= 0) || math.IsInf(w, 0) {
				return l, fmt.Errorf("loss %q: weight %g of %q: want a finite weight of 0 or more", spec, w, name)
			}
			total += w
			switch name {
			case CE, KL:
				l.LK.KL += w
			case TV:
				l.LK.TV += w
			case NLA:
				l.LK.NLA += w
			case Hybrid:
				l.LK.Hybrid += w
			default:
				return l, fmt.Errorf("loss %q: unknown loss %q in the combination (want %s)", spec, name, strings.Join(Names, ", "))
			}
		}
		if !(total > 0) {
			return l, fmt.Errorf("loss %q: no loss has a weight above 0", spec)
		}
	}
	switch {
	case !(eta >= 0) || math.IsInf(eta, 0):
		return l, fmt.Errorf("lk-eta %g: want a finite value of 0 or more", eta)
	case eta != 0 && !l.UsesEta():
		return l, fmt.Errorf("lk-eta %g: only %s weighs λ by η, and loss %s does not use it", eta, Hybrid, Canonical(l))
	case l.UsesEta():
		l.LK.Eta = eta
		if eta == 0 {
			l.LK.Eta = DefaultEta
		}
	}
	return l, nil
}

// Canonical is l as a run records it: a name when l is one form of weight
// 1 (or CE), else the JSON object of its non-zero weights (encoding/json
// sorts the keys), so that two spellings of the same loss record the same
// setting.
func Canonical(l Loss) string {
	if l.CE {
		return CE
	}
	w := map[string]float64{}
	for name, v := range map[string]float64{KL: l.LK.KL, TV: l.LK.TV, NLA: l.LK.NLA, Hybrid: l.LK.Hybrid} {
		if v != 0 {
			w[name] = v
		}
	}
	if len(w) == 1 {
		for name, v := range w {
			if v == 1 {
				return name
			}
		}
	}
	b, _ := json.Marshal(w) // a map of finite floats always encodes
	return string(b)
}

// Recorded returns the loss spec and η (both as Parse takes them) as a run
// records them: the canonical spelling, and η as used (DefaultEta for 0) only
// when the loss weighs Hybrid (0 otherwise), so that every spelling of the
// same training records the same settings. A spec Parse refuses is returned
// as it is: the trainers validate it before.
func Recorded(spec string, eta float64) (string, float64) {
	l, err := Parse(spec, eta)
	if err != nil {
		return spec, eta
	}
	if l.UsesEta() {
		return Canonical(l), l.LK.Eta
	}
	return Canonical(l), 0
}
