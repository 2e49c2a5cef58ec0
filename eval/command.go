package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/drafter-ai/drafter/data"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/target"
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
	// with (read into Gate.Baseline). A baseline measured on other prompts
	// (another prompt file, or another number of prompts) is refused with a
	// *BaselineError unless AllowBaselineMismatch, which warns instead.
	Gate                  Gate
	BaselinePath          string
	AllowBaselineMismatch bool
	// Device runs the target and the drafter (nil: the CPU device).
	Device tensor.Device
	// Log receives warnings and notes (nil: discarded).
	Log io.Writer
	// Cache keeps the model's tensor digests between runs (nil: none).
	Cache *filecache.Cache
}

// Evaluate runs the whole command: it checks that the report and plots can
// be written and that the baseline report was made on the same prompts, checks
// the drafter against the model's fingerprint, decodes every prompt both
// ways, prints the report to out and writes the requested files, then checks
// losslessness and the gate. The report is returned (with the files written)
// even when a check fails. Errors a pipeline must tell apart: *StaleError
// (the drafter was trained for another checkpoint), *BaselineError (the
// baseline was measured on other prompts), *LosslessError (speculative
// output differed from greedy decoding: a decoder bug) and *GateError (the
// drafter fell short).
func Evaluate(ctx context.Context, opt Options, out io.Writer) (*Report, error) {
	logw := opt.Log
	if logw == nil {
		logw = io.Discard
	}
	if err := checkOutputs(opt.ReportPath, opt.PlotDir); err != nil {
		return nil, err
	}
	promptHash, err := data.PromptHash(opt.PromptsPath)
	if err != nil {
		return nil, fmt.Errorf("eval: --prompts: %w", err)
	}
	var baseline *Report
	if opt.BaselinePath != "" {
		b, err := ReadReport(opt.BaselinePath)
		if err != nil {
			return nil, err
		}
		baseline = b
		opt.Gate.Baseline = b
		if b.PromptSHA256 == "" {
			fmt.Fprintf(logw, "warning: the baseline report %s records no prompt-file hash (an older drafter wrote it): cannot check that it was measured on the same prompts\n", opt.BaselinePath)
		}
		if err := opt.checkBaseline(b, promptHash, -1, logw); err != nil {
			return nil, err
		}
	}
	info, err := Detect(opt.DrafterDir)
	if err != nil {
		return nil, err
	}
	if info.Warning != "" {
		fmt.Fprintln(logw, info.Warning)
	}
	t, err := target.Load(opt.ModelDir, opt.Device, opt.Cache)
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
	st, err := generate.Resolve(t, ov)
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
	if baseline != nil {
		if err := opt.checkBaseline(baseline, promptHash, len(prompts), logw); err != nil {
			return nil, err
		}
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
	if err := checkDraftFits(cfg, opt.Config, d, t.Model.MaxPositions()); err != nil {
		return nil, err
	}
	rep, err := Run(ctx, t.Model, d, prompts, cfg)
	if err != nil {
		return nil, err
	}
	rep.Model, rep.ModelFingerprint = opt.ModelDir, fp
	rep.PromptFile, rep.PromptSHA256, rep.Limit = opt.PromptsPath, promptHash, opt.Limit
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

// checkBaseline refuses (or, with AllowBaselineMismatch, warns about) a
// baseline report measured on other prompts than this run's: another prompt
// file (by SHA-256), or, once they are known (n >= 0), another number of
// prompts. A baseline without a recorded hash was warned about by the caller
// and passes.
func (opt *Options) checkBaseline(b *Report, hash string, n int, logw io.Writer) error {
	if b.PromptSHA256 == "" {
		return nil
	}
	var diffs []string
	if n < 0 && b.PromptSHA256 != hash {
		diffs = append(diffs, fmt.Sprintf("prompt file %s (sha256 %s), now %s (sha256 %s)", b.PromptFile, b.PromptSHA256, opt.PromptsPath, hash))
	}
	if n >= 0 && b.Prompts != n {
		diffs = append(diffs, fmt.Sprintf("%d prompts (--limit %d), now %d (--limit %d)", b.Prompts, b.Limit, n, opt.Limit))
	}
	if len(diffs) == 0 {
		return nil
	}
	if !opt.AllowBaselineMismatch {
		return &BaselineError{Path: opt.BaselinePath, Diffs: diffs}
	}
	fmt.Fprintf(logw, "warning: the baseline report %s was measured on other prompts: %s (comparing anyway: --allow-baseline-mismatch)\n",
		opt.BaselinePath, strings.Join(diffs, "; "))
	return nil
}

// BaselineError is a baseline report measured on other prompts than the run
// it would gate: the comparison would measure the prompts, not the drafter.
type BaselineError struct {
	// Path is the baseline report; Diffs say how its prompts differ.
	Path  string
	Diffs []string
}

// Error describes the mismatch and the way out.
func (e *BaselineError) Error() string {
	return fmt.Sprintf("eval: the baseline report %s was measured on other prompts: %s; compare with a report made on the same prompts, or pass --allow-baseline-mismatch",
		e.Path, strings.Join(e.Diffs, "; "))
}

// checkOutputs checks, before anything runs, that the report file and the
// plot folder can be written: the report's folder exists and takes a new
// file, the report is not a folder, and the plot folder is a writable folder
// or can be made in an existing one. It creates nothing that stays.
func checkOutputs(reportPath, plotDir string) error {
	if reportPath != "" {
		if fi, err := os.Stat(reportPath); err == nil && fi.IsDir() {
			return fmt.Errorf("eval: --report %s is a folder; give a file name", reportPath)
		}
		if err := checkWritableDir(filepath.Dir(reportPath)); err != nil {
			return fmt.Errorf("eval: --report %s: %w", reportPath, err)
		}
	}
	if plotDir != "" {
		fi, err := os.Stat(plotDir)
		switch {
		case err == nil && !fi.IsDir():
			return fmt.Errorf("eval: --plot %s is a file; give a folder", plotDir)
		case err == nil:
			err = checkWritableDir(plotDir)
		case errors.Is(err, fs.ErrNotExist):
			err = checkWritableDir(filepath.Dir(plotDir))
		}
		if err != nil {
			return fmt.Errorf("eval: --plot %s: %w", plotDir, err)
		}
	}
	return nil
}

// checkWritableDir checks that dir is an existing folder in which a file can
// be created, by creating and removing one.
func checkWritableDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the folder %s does not exist", dir)
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	f, err := os.CreateTemp(dir, ".drafter-eval-check-*")
	if err != nil {
		return fmt.Errorf("cannot write in the folder %s: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// Bounds of the draft-shape flags. A draft beyond them is no use (acceptance
// falls with every drafted step, and verifying a draft costs more than it
// saves long before), and the buffers it would need grow with the product of
// its size and the vocabulary, so that a mistyped value meets an out-of-memory
// instead of a message: they are usage errors, checked before anything runs.
const (
	// MaxDepth bounds --depth: drafted tokens of a chain, expansion rounds
	// of EAGLE-2's tree (default 4 and 7). A tree session holds MaxDepth *
	// MaxTopK nodes' draft logits at most (4096 rows over the draft
	// vocabulary: 512 MB at 32k ids).
	MaxDepth = 64
	// MaxTopK bounds --topk, EAGLE-2's children per node and frontier width
	// (default 8).
	MaxTopK = 64
	// MaxTotalTokens bounds --total-tokens, the positions one verification
	// of EAGLE-2's tree reads (default 60): the target's logits for all of
	// them take 1024 * 152k * 4 bytes (620 MB) for a 152k vocabulary.
	MaxTotalTokens = 1024
	// draftReserve is the positions the decoder's sequence holds beyond the
	// prompt, the new tokens and the draft's nodes (newRunner's capacity).
	draftReserve = 2
)

// checkDraftFits refuses, as a *ConfigError naming the flag, a draft shape
// out of its bounds (MaxDepth, MaxTopK, MaxTotalTokens; the CLI checks them
// first, this keeps Evaluate's other callers from the same allocations) or
// one that cannot fit the model's context whatever the prompt: its nodes,
// max new tokens, a one-token prompt and draftReserve need more positions
// than the model attends over. Like --max-new-tokens beyond the context, that
// is a value the flag cannot take with this model, not bad input: no prompt
// file makes it run. A prompt too long for a shape that fits stays an error
// of the input (Run reports it). given is the configuration as the user set
// it (zero fields: defaults), to name the flag they set; cfg has the model's
// sampling settings and max new tokens.
func checkDraftFits(cfg, given Config, d *Drafter, positions int) error {
	fail := func(format string, a ...any) error {
		return &ConfigError{Err: fmt.Errorf("eval: "+format, a...)}
	}
	for _, b := range []struct {
		flag      string
		v, lo, hi int
		unit      string
	}{
		{"depth", given.Depth, 1, MaxDepth, "drafted tokens or expansion rounds"},
		{"topk", given.TopK, 1, MaxTopK, "children"},
		{"total-tokens", given.TotalTokens, 2, MaxTotalTokens, "positions"},
	} {
		if b.v != 0 && (b.v < b.lo || b.v > b.hi) {
			return fail("--%s %d: want 0 (the default) or %d to %d %s", b.flag, b.v, b.lo, b.hi, b.unit)
		}
	}
	c, err := cfg.withDefaults(d)
	if err != nil {
		return err
	}
	room := positions - c.MaxNewTokens - 1 - draftReserve // the nodes a one-token prompt leaves room for
	var (
		flag, unit     string
		value, nodes   int
		lo, hi, offset int // the flag's range in its unit; value - nodes
		set            bool
	)
	switch {
	case c.Mode == ModeChain:
		flag, unit, value, nodes, lo, hi, set = "depth", "drafted tokens", c.Depth, c.Depth, 1, min(MaxDepth, room), given.Depth != 0
	case c.Tree != nil:
		flag, unit, value, nodes, lo, hi, set = "tree", "nodes", len(c.Tree), len(c.Tree), 1, room, given.Tree != nil
	default:
		offset = 1 // the root is a position, not a drafted node
		flag, unit, value, nodes, lo, hi, set = "total-tokens", "positions", c.TotalTokens, c.TotalTokens-1, 2, min(MaxTotalTokens, room+1), given.TotalTokens != 0
	}
	if nodes <= room {
		return nil
	}
	ctx := fmt.Sprintf("this model (it attends over %d positions) and --max-new-tokens %d", positions, c.MaxNewTokens)
	switch {
	case hi < lo:
		return fail("--max-new-tokens %d leaves no room for a draft with this model: it attends over %d positions, and a one-token prompt, the new tokens, %d reserved and a draft of at least %d %s need %d; lower --max-new-tokens",
			c.MaxNewTokens, positions, draftReserve, lo, unit, 1+c.MaxNewTokens+draftReserve+lo-offset)
	case !set:
		return fail("--max-new-tokens %d leaves room for a draft of %d to %d %s with this model (it attends over %d positions), and the default --%s is %d: lower --max-new-tokens or set --%s %d to %d",
			c.MaxNewTokens, lo, hi, unit, positions, flag, value, flag, lo, hi)
	case flag == "tree":
		return fail("--tree: a tree of %d nodes: want %d to %d nodes with %s", value, lo, hi, ctx)
	}
	return fail("--%s %d: want %d to %d %s with %s", flag, value, lo, hi, unit, ctx)
}
