package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/spec"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Options is everything `drafter eval` takes.
type Options struct {
	ModelDir, DrafterDir, PromptsPath string
	// Limit evaluates only the first Limit prompts (0: all).
	Limit int
	// Sampling overrides the model's generation_config.json sampling
	// settings (as distill and generate do); MaxNewTokens is
	// DefaultMaxNewTokens when not overridden, so that runs stay comparable.
	Sampling generate.Overrides
	// Config is the decoding setup; its Sampling, MaxNewTokens and EOS are
	// filled from the model and Sampling (EOS left empty with IgnoreEOS).
	Config    Config
	IgnoreEOS bool
	// AllowMismatch measures a drafter trained for another target
	// fingerprint instead of refusing it.
	AllowMismatch bool
	// ReportPath, when set, receives the report as JSON; PlotDir the PNG
	// charts; JSON prints the report as JSON instead of tables.
	ReportPath, PlotDir string
	JSON                bool
	// Gate is the acceptance bar; BaselinePath an earlier report to compare
	// with (read into Gate.Baseline).
	Gate         Gate
	BaselinePath string
	// Backend runs the target and the drafter (nil: tensor.CPU()).
	Backend tensor.Backend
	// Log receives warnings and notes (nil: discarded).
	Log io.Writer
	// Cache keeps the model's tensor digests between runs (nil: none).
	Cache *filecache.Cache
}

// Evaluate runs the whole command: it checks the drafter against the model's
// fingerprint, decodes every prompt both ways, prints the report to out and
// writes the requested files, then checks losslessness and the gate. The
// report is returned (with the files written) even when a check fails.
// Errors a pipeline must tell apart: *StaleError (the drafter was trained
// for another checkpoint), *LosslessError (speculative output differed from
// greedy decoding: a decoder bug) and *GateError (the drafter fell short).
func Evaluate(ctx context.Context, opt Options, out io.Writer) (*Report, error) {
	logw := opt.Log
	if logw == nil {
		logw = io.Discard
	}
	var baseline *Report
	if opt.BaselinePath != "" {
		b, err := ReadReport(opt.BaselinePath)
		if err != nil {
			return nil, err
		}
		baseline = b
		opt.Gate.Baseline = b
	}
	info, err := Detect(opt.DrafterDir)
	if err != nil {
		return nil, err
	}
	t, err := generate.Load(opt.ModelDir, opt.Backend, opt.Cache)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	defer t.Close()
	fp := t.Fingerprint
	if err := CheckFingerprint(info, opt.ModelDir, fp); err != nil {
		if !opt.AllowMismatch {
			return nil, err
		}
		fmt.Fprintf(logw, "warning: %v (measuring anyway: --allow-mismatch)\n", err)
	} else if info.TargetFingerprint == "" {
		fmt.Fprintf(logw, "note: drafter %s records no target fingerprint; cannot check it was trained for this model\n", info.Dir)
	}
	ov := opt.Sampling
	if ov.MaxNewTokens == nil {
		n := DefaultMaxNewTokens
		ov.MaxNewTokens = &n
	}
	st, err := t.Settings(ov)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	for _, w := range st.Warnings {
		fmt.Fprintf(logw, "warning: %s\n", w)
	}
	prompts, err := LoadPrompts(t, opt.PromptsPath, opt.Limit)
	if err != nil {
		return nil, err
	}
	d, err := LoadDrafter(info, t.Model)
	if err != nil {
		return nil, err
	}
	cfg := opt.Config
	cfg.Sampling, cfg.MaxNewTokens = st.Params, st.MaxNewTokens
	if !opt.IgnoreEOS {
		cfg.EOS = t.Stop
	}
	rep, err := Run(ctx, t.Model, d, prompts, cfg)
	if err != nil {
		return nil, err
	}
	rep.Model, rep.ModelFingerprint = opt.ModelDir, fp
	if baseline != nil {
		for _, diff := range rep.Comparable(baseline) {
			fmt.Fprintf(logw, "warning: the baseline report %s was measured differently: %s\n", opt.BaselinePath, diff)
		}
	}
	if opt.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(out)
	}
	if err != nil {
		return rep, fmt.Errorf("eval: printing the report: %w", err)
	}
	if opt.ReportPath != "" {
		if err := rep.WriteJSON(opt.ReportPath); err != nil {
			return rep, err
		}
	}
	if opt.PlotDir != "" {
		if err := rep.WritePlots(opt.PlotDir); err != nil {
			return rep, err
		}
	}
	if err := rep.CheckLossless(); err != nil {
		return rep, err
	}
	return rep, opt.Gate.Check(rep)
}

// ParseTypical parses --typical "EPS,ALPHA" (e.g. "0.09,0.3", Medusa's
// defaults).
func ParseTypical(s string) (*spec.TypicalParams, error) {
	a, b, ok := strings.Cut(s, ",")
	if !ok {
		return nil, fmt.Errorf("--typical %q: want EPS,ALPHA, e.g. 0.09,0.3", s)
	}
	eps, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
	alpha, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("--typical %q: want two numbers EPS,ALPHA: %w", s, err)
	}
	tp := &spec.TypicalParams{Epsilon: eps, Alpha: alpha}
	if err := tp.Validate(); err != nil {
		return nil, fmt.Errorf("--typical %q: %w", s, err)
	}
	return tp, nil
}

// ParseTree reads --tree: a JSON list of paths given inline (starting with
// '[') or the name of a file holding one.
func ParseTree(s string) (spec.Choices, error) {
	data := []byte(s)
	if t := strings.TrimSpace(s); !strings.HasPrefix(t, "[") {
		b, err := os.ReadFile(s)
		if err != nil {
			return nil, fmt.Errorf("--tree: %w (want a JSON list of paths such as [[0],[1],[0,0]], or a file holding one)", err)
		}
		data = b
	}
	c, err := spec.ParseChoices(data)
	if err != nil {
		return nil, fmt.Errorf("--tree: %w", err)
	}
	return c, nil
}

// ParseDrop reads --max-drop: an absolute drop in mean acceptance length
// ("0.2") or a percentage of the baseline's ("5%").
func ParseDrop(s string) (drop float64, relative bool, err error) {
	t := strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 || v > 100 {
			return 0, false, fmt.Errorf("--max-drop %q: want a percentage between 0%% and 100%%", s)
		}
		return v / 100, true, nil
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 {
		return 0, false, fmt.Errorf("--max-drop %q: want a non-negative number of tokens per forward (e.g. 0.2) or a percentage (e.g. 5%%)", s)
	}
	return v, false, nil
}
