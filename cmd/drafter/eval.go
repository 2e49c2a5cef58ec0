package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/eval"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/spec"
)

type evalOptions struct {
	Eval   eval.Options
	Out    io.Writer
	Device deviceChoice
}

func newCmdEval(runF func(*evalOptions) error) *cobra.Command {
	o := &evalOptions{}
	opt := &o.Eval
	var sf samplingFlags
	var mode, tree, typical, maxDrop, schedule, roundCost string
	var threshold float64
	var quiet bool
	c := &cobra.Command{
		Use:   "eval --model DIR --drafter DIR --prompts FILE [flags]",
		Short: "Measure a drafter with real speculative decoding and gate on acceptance",
		Long: `eval decodes every prompt twice with the target: plainly, one token per forward pass (the
baseline), and speculatively: the drafter proposes a chain or a tree of tokens, the target
verifies the whole draft in one forward pass with tree attention, and keeps the accepted path.
It prints the mean acceptance length (tokens per target forward, the target's own token
included), its distribution, the acceptance rate by draft depth, Medusa's per-head hit rates,
tokens/s with and without speculation, the speed-up and the drafter's share of the time.

--drafter is the train command's output folder or one export inside it; the kind is read from
the files: Medusa heads (vllm/ or medusa/ layout), an EAGLE-3 draft (native or speculators
layout), a DFlash draft (native or speculators) or a DSpark draft (DeepSpec or speculators).
A drafter whose drafter.json records another target fingerprint than --model's is
refused as stale unless --allow-mismatch.

Draft shapes (--mode; by default a tree for Medusa and EAGLE-3, a chain for DFlash and DSpark):
  Medusa  chain  top-1 of each head (--depth heads, default all)
          tree   static sparse tree: the calibrated tree train recorded in drafter.json (the
                 --tree-nodes paths most likely accepted given each head's held-out rank
                 accuracies), else 3/2/2/1 candidates per depth (33 nodes for 4 heads), or
                 --tree '[[0],[1],[0,0],...]' (a JSON list of paths of top-k indices, Medusa's
                 medusa_choices; or a file holding one)
  EAGLE-3 chain  chain of --depth tokens (default 4): the draft's top-1 at temperature 0,
                 sampled from the draft's distribution (warped like the target's) above it
          tree   EAGLE-2 dynamic tree: --depth expansion rounds (default 7), --topk children
                 per node and frontier width (default 8; not the sampling --top-k), best
                 --total-tokens kept, the root included (default 60)

  DFlash  chain  one block forward drafts --depth tokens (default the block's B-1)
  DSpark  chain  one backbone pass, then the Markov head per token: --depth tokens (default
                 the block B); with a confidence head --schedule sets the length per round:
                 fixed (all --depth), threshold (stop before the first token whose cumulative
                 confidence, calibrated by train on held-out data when drafter.json records
                 it, is below --confidence-threshold) or sps (DSpark's scheduler: the length
                 whose expected tokens per unit of round cost is highest, growing the chain
                 until that stops improving; the round costs, drafting included, are measured
                 on the first prompt unless --round-cost gives them, and printed so that a
                 rerun repeats the run). Every schedule reads only the draft's own
                 confidences: lossless.

Acceptance: greedy at temperature 0 (exact); lossless speculative sampling above it (the
output is distributed exactly as plain sampling); --typical EPS,ALPHA opts into Medusa's
typical acceptance, which is lossy and marked so in the report. At temperature 0 eval checks
that every speculative output equals the baseline token for token and fails otherwise.

Sampling defaults come from generation_config.json as for distill (greedy unless it sets
do_sample); --max-new-tokens defaults to 96 here, not to the model's limit.

--report and --plot are checked before anything runs (their folder must exist and be
writable, --report must not be a folder). The report records the prompt file's SHA-256 and
--limit; a --baseline report measured on other prompts (another file, or another number of
them) is refused unless --allow-baseline-mismatch, and one that records no prompt hash (made
by an older drafter) is compared with a warning.

Exit codes: 0 the drafter passed; 1 an error, including a speculative output that differs from
greedy decoding (a decoder bug), a stale drafter and a baseline made on other prompts; 2 a
command-line mistake; 3 the drafter fell short of the gate (--min-acceptance, or --baseline
with --max-drop). The report and plots are written before the checks, so a failed run still
leaves them for inspection.`,
		Example: `  drafter eval --model models/stories260k --drafter runs/medusa --prompts data/prompts/stories-eval.jsonl
  drafter eval --model models/stories260k --drafter runs/eagle3 --prompts data/prompts/stories-eval.jsonl \
      --mode chain --depth 7 --temperature 1 --report eagle-t1.json --plot plots/
  # release gate: stop a fine-tune whose new drafter lost more than 5% acceptance
  drafter eval --model /models/sft-v2 --drafter out/eagle3 --prompts heldout.jsonl \
      --baseline reports/sft-v1.json --max-drop 5% --min-acceptance 2.5 --report reports/sft-v2.json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			checks := append(sf.checks(),
				flagCheck{"limit", opt.Limit < 0, "0 (all prompts) or a positive number of prompts"},
				flagCheck{"mode", mode != "" && mode != string(eval.ModeChain) && mode != string(eval.ModeTree), "chain or tree"},
				flagCheck{"depth", opt.Config.Depth < 0 || opt.Config.Depth > eval.MaxDepth,
					fmt.Sprintf("0 (the default for the drafter and --mode) or 1 to %d (drafted tokens of a chain, expansion rounds of a tree)", eval.MaxDepth)},
				flagCheck{"topk", opt.Config.TopK < 0 || opt.Config.TopK > eval.MaxTopK,
					fmt.Sprintf("0 (the default, 8) or 1 to %d children per node", eval.MaxTopK)},
				// 1 would verify the root alone: no draft at all.
				flagCheck{"total-tokens", opt.Config.TotalTokens < 0 || opt.Config.TotalTokens == 1 || opt.Config.TotalTokens > eval.MaxTotalTokens,
					fmt.Sprintf("0 (the default, 60) or 2 to %d positions (the root and at least one drafted token)", eval.MaxTotalTokens)},
				flagCheck{"min-acceptance", opt.Gate.MinAcceptance < 0, "0 (no gate) or a positive mean acceptance length"},
			)
			if err := checkFlags(c, checks); err != nil {
				return err
			}
			opt.Sampling = sf.overrides(c.Flags())
			opt.Config.Seed = sf.seed
			opt.Config.Mode = eval.Mode(mode)
			var err error
			if tree != "" {
				if opt.Config.Tree, err = parseTree(tree); err != nil {
					return err
				}
			}
			if typical != "" {
				if opt.Config.Typical, err = parseTypical(typical); err != nil {
					return err
				}
			}
			if opt.Config.Schedule, err = parseSchedule(c, schedule, threshold, roundCost); err != nil {
				return err
			}
			switch {
			case maxDrop != "" && opt.BaselinePath == "":
				return usagef("--max-drop needs --baseline OLD.json")
			case maxDrop == "" && opt.BaselinePath != "":
				return usagef("--baseline needs --max-drop (e.g. 0.2 or 5%%)")
			case opt.AllowBaselineMismatch && opt.BaselinePath == "":
				return usagef("--allow-baseline-mismatch applies to --baseline")
			case maxDrop != "":
				if opt.Gate.MaxDrop, opt.Gate.Relative, err = parseDrop(maxDrop); err != nil {
					return err
				}
			}
			stderr := c.ErrOrStderr()
			opt.Log = stderr
			opt.Cache = fileCache()
			if !quiet {
				opt.Config.Progress = func(done, total int) {
					fmt.Fprintf(stderr, "\reval: prompt %d/%d", done, total)
					if done == total {
						fmt.Fprintln(stderr)
					}
				}
			}
			o.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return runEval(c.Context(), o)
		},
	}
	fs := c.Flags()
	o.Device.register(c)
	fs.StringVar(&opt.ModelDir, "model", "", "Hugging Face checkpoint folder of the target")
	fs.StringVar(&opt.DrafterDir, "drafter", "", "train output folder, or one export inside it (vllm/, medusa/, eagle3/, dflash/, dspark/)")
	fs.StringVar(&opt.PromptsPath, "prompts", "", "held-out prompt file (.jsonl or .txt, as for distill)")
	fs.IntVar(&opt.Limit, "limit", 0, "evaluate only the first N prompts (0: all)")
	sf.register(fs)
	fs.Lookup("max-new-tokens").Usage = fmt.Sprintf("most tokens to generate per prompt, at least 1 and less than the model's context (default %d)", eval.DefaultMaxNewTokens)
	fs.BoolVar(&opt.IgnoreEOS, "ignore-eos", false, "generate --max-new-tokens on every prompt, ignoring end-of-sequence tokens")
	fs.StringVar(&mode, "mode", "", "draft shape: chain or tree (default: tree for Medusa and EAGLE-3, chain for DFlash and DSpark)")
	fs.IntVar(&opt.Config.Depth, "depth", 0, fmt.Sprintf("chain: drafted tokens (Medusa: heads used; default all heads, EAGLE-3: 4); EAGLE-2 tree: expansion rounds (default 7); at most %d", eval.MaxDepth))
	fs.IntVar(&opt.Config.TopK, "topk", 0, fmt.Sprintf("EAGLE-2 tree: children per node and nodes kept per depth, 1 to %d (default 8)", eval.MaxTopK))
	fs.IntVar(&opt.Config.TotalTokens, "total-tokens", 0, fmt.Sprintf("EAGLE-2 tree: positions verified, root included, 2 to %d (default 60)", eval.MaxTotalTokens))
	fs.StringVar(&tree, "tree", "", "Medusa static tree: a JSON list of paths, e.g. [[0],[1],[0,0]], or a file holding one")
	fs.StringVar(&schedule, "schedule", string(drafters.ScheduleFixed), "draft length per round of a DSpark draft with a confidence head: fixed (the whole chain), threshold (cut at --confidence-threshold) or sps (the scheduler weighing the expected tokens of a round against its cost)")
	floatVar(fs, &threshold, "confidence-threshold", 0.5, "--schedule threshold: stop the chain before the first token whose cumulative confidence (predicted chance that it and every token before it are accepted) is below this, in (0, 1)")
	fs.StringVar(&roundCost, "round-cost", "", "--schedule sps: the cost of a round that drafts and verifies 0, 1, ... tokens, in decode steps of the target, comma-separated (at least depth+1 values; default: measured on the first prompt, and printed to repeat the run)")
	fs.StringVar(&typical, "typical", "", "Medusa typical acceptance EPS,ALPHA (e.g. 0.09,0.3; EPS in [0,1], ALPHA >= 0): lossy, needs --temperature > 0")
	fs.BoolVar(&opt.AllowMismatch, "allow-mismatch", false, "measure a drafter trained for another target fingerprint instead of refusing it")
	fs.StringVar(&opt.ReportPath, "report", "", "write the report as JSON to this file (its folder must exist)")
	fs.StringVar(&opt.PlotDir, "plot", "", "draw PNG charts (acceptance lengths, acceptance by depth) into this folder (created if its parent exists)")
	fs.BoolVar(&opt.JSON, "json", false, "print the report as JSON instead of tables")
	floatVar(fs, &opt.Gate.MinAcceptance, "min-acceptance", 0, "gate: exit 3 when the mean acceptance length is below this (0: no gate)")
	fs.StringVar(&opt.BaselinePath, "baseline", "", "gate: an earlier --report file, made on the same prompts, to compare with (needs --max-drop)")
	fs.StringVar(&maxDrop, "max-drop", "", "gate: exit 3 when the mean acceptance length is below --baseline's by more than this (tokens per forward, e.g. 0.2, or a percentage, e.g. 5%)")
	fs.BoolVar(&opt.AllowBaselineMismatch, "allow-baseline-mismatch", false, "compare with a --baseline made on other prompts (another file or --limit), with a warning, instead of refusing it")
	fs.BoolVar(&quiet, "quiet", false, "no progress line")
	requireFlags(c, "model", "drafter", "prompts")
	return c
}

func runEval(ctx context.Context, o *evalOptions) error {
	o.Eval.Cache = fileCache()
	dev, err := o.Device.open()
	if err != nil {
		return err
	}
	defer dev.Close()
	o.Eval.Device = dev
	_, err = eval.Evaluate(ctx, o.Eval, o.Out)
	var ge *eval.GateError
	var se *drafters.SettingError
	var ce *eval.ConfigError
	switch {
	case errors.As(err, &ge):
		return &gateError{err}
	case errors.As(err, &se):
		return &usageError{settingError(se)}
	case errors.As(err, &ce):
		return &usageError{err}
	}
	return overrideUsage(err)
}

// settingError words a drafter's refusal of a decoding setting with the
// flags that set it.
func settingError(e *drafters.SettingError) error {
	flags := make([]string, len(e.Settings))
	for i, s := range e.Settings {
		flags[i] = "--" + string(s) // the settings are named as eval's flags
	}
	return fmt.Errorf("eval: %s: %s", strings.Join(flags, " and "), e.Msg)
}

// parseSchedule reads --schedule with the flags that parameterise it,
// refusing a parameter given for another schedule.
func parseSchedule(c *cobra.Command, kind string, threshold float64, costs string) (drafters.Schedule, error) {
	s := drafters.Schedule{Kind: drafters.ScheduleKind(kind)}
	switch s.Kind {
	case drafters.ScheduleFixed, drafters.ScheduleThreshold, drafters.ScheduleSPS:
	default:
		return s, usagef("--schedule %q: want fixed, threshold or sps", kind)
	}
	if c.Flags().Changed("confidence-threshold") && s.Kind != drafters.ScheduleThreshold {
		return s, usagef("--confidence-threshold applies to --schedule threshold")
	}
	if costs != "" && s.Kind != drafters.ScheduleSPS {
		return s, usagef("--round-cost applies to --schedule sps")
	}
	switch s.Kind {
	case drafters.ScheduleThreshold:
		if !(threshold > 0 && threshold < 1) {
			return s, usagef("--confidence-threshold %g: want a number in (0, 1)", threshold)
		}
		s.Threshold = threshold
	case drafters.ScheduleSPS:
		if costs == "" {
			break
		}
		for i, f := range strings.Split(costs, ",") {
			v, err := parseFinite(f)
			if err != nil || !(v > 0) {
				return s, usagef("--round-cost %q: value %d (%q) is not a positive number", costs, i+1, strings.TrimSpace(f))
			}
			s.RoundCost = append(s.RoundCost, v)
		}
	}
	return s, nil
}

// parseTypical parses --typical "EPS,ALPHA" (e.g. "0.09,0.3", Medusa's
// defaults).
func parseTypical(s string) (*spec.TypicalParams, error) {
	a, b, ok := strings.Cut(s, ",")
	if !ok {
		return nil, usagef("--typical %q: want EPS,ALPHA, e.g. 0.09,0.3", s)
	}
	eps, err1 := parseFinite(a)
	alpha, err2 := parseFinite(b)
	if err := errors.Join(err1, err2); err != nil {
		return nil, usagef("--typical %q: want two finite numbers EPS,ALPHA, e.g. 0.09,0.3", s)
	}
	tp := &spec.TypicalParams{Epsilon: eps, Alpha: alpha}
	if err := tp.Validate(); err != nil {
		return nil, usagef("--typical %q: want EPS in [0, 1] and ALPHA >= 0", s)
	}
	return tp, nil
}

// parseTree reads --tree: a JSON list of paths given inline (starting with
// '[') or the name of a file holding one.
func parseTree(s string) (spec.Choices, error) {
	data := []byte(s)
	if t := strings.TrimSpace(s); !strings.HasPrefix(t, "[") {
		b, err := os.ReadFile(s)
		if err != nil {
			return nil, usagef("--tree: %w (want a JSON list of paths such as [[0],[1],[0,0]], or a file holding one)", err)
		}
		data = b
	}
	c, err := spec.ParseChoices(data)
	if err != nil {
		return nil, usagef("--tree: %w", err)
	}
	return c, nil
}

// parseDrop reads --max-drop: an absolute drop in mean acceptance length
// ("0.2") or a percentage of the baseline's ("5%").
func parseDrop(s string) (drop float64, relative bool, err error) {
	t := strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(t, "%"); ok {
		v, err := parseFinite(p)
		if err != nil || v < 0 || v > 100 {
			return 0, false, usagef("--max-drop %q: want a percentage between 0%% and 100%%", s)
		}
		return v / 100, true, nil
	}
	v, err := parseFinite(t)
	if err != nil || v < 0 {
		return 0, false, usagef("--max-drop %q: want a non-negative number of tokens per forward (e.g. 0.2) or a percentage (e.g. 5%%)", s)
	}
	return v, false, nil
}
