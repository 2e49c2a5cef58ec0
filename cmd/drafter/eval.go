package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/pkg/eval"
)

func newEvalCmd() *cobra.Command {
	var opt eval.Options
	var sf samplingFlags
	var mode, tree, typical, maxDrop string
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
the files: Medusa heads (vllm/ or medusa/ layout) or an EAGLE-3 draft (native or speculators
layout). A drafter whose drafter.json records another target fingerprint than --model's is
refused as stale unless --allow-mismatch.

Draft shapes (--mode):
  Medusa  chain  top-1 of each head (--depth heads, default all)
          tree   static sparse tree: the default tree for the head count (3/2/2/1 candidates
                 per depth, 33 nodes for 4 heads), or --tree '[[0],[1],[0,0],...]' (a JSON
                 list of paths of top-k indices, Medusa's medusa_choices; or a file holding one)
  EAGLE-3 chain  chain of --depth tokens (default 4): the draft's top-1 at temperature 0,
                 sampled from the draft's distribution (warped like the target's) above it
          tree   EAGLE-2 dynamic tree: --depth expansion rounds (default 7), --topk children
                 per node and frontier width (default 8; not the sampling --top-k), best
                 --total-tokens kept, the root included (default 60)

Acceptance: greedy at temperature 0 (exact); lossless speculative sampling above it (the
output is distributed exactly as plain sampling); --typical EPS,ALPHA opts into Medusa's
typical acceptance, which is lossy and marked so in the report. At temperature 0 eval checks
that every speculative output equals the baseline token for token and fails otherwise.

Sampling defaults come from generation_config.json as for distill (greedy unless it sets
do_sample); --max-new-tokens defaults to 96 here, not to the model's limit.

Exit codes: 0 the drafter passed; 1 an error, including a speculative output that differs from
greedy decoding (a decoder bug); 2 a command-line mistake; 3 the drafter fell short of the gate
(--min-acceptance, or --baseline with --max-drop). The report and plots are written before the
checks, so a failed run still leaves them for inspection.`,
		Example: `  drafter eval --model models/stories260k --drafter runs/medusa --prompts data/prompts/stories-eval.jsonl
  drafter eval --model models/stories260k --drafter runs/eagle3 --prompts data/prompts/stories-eval.jsonl \
      --mode chain --depth 7 --temperature 1 --report eagle-t1.json --plot plots/
  # release gate: stop a fine-tune whose new drafter lost more than 5% acceptance
  drafter eval --model /models/sft-v2 --drafter out/eagle3 --prompts heldout.jsonl \
      --baseline reports/sft-v1.json --max-drop 5% --min-acceptance 2.5 --report reports/sft-v2.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opt.Sampling = sf.overrides(cmd)
			opt.Config.Seed = sf.seed
			opt.Config.Mode = eval.Mode(mode)
			var err error
			if tree != "" {
				if opt.Config.Tree, err = eval.ParseTree(tree); err != nil {
					return &usageError{err}
				}
			}
			if typical != "" {
				if opt.Config.Typical, err = eval.ParseTypical(typical); err != nil {
					return &usageError{err}
				}
			}
			if maxDrop != "" {
				if opt.BaselinePath == "" {
					return &usageError{fmt.Errorf("--max-drop needs --baseline OLD.json")}
				}
				if opt.Gate.MaxDrop, opt.Gate.Relative, err = eval.ParseDrop(maxDrop); err != nil {
					return &usageError{err}
				}
			} else if opt.BaselinePath != "" {
				return &usageError{fmt.Errorf("--baseline needs --max-drop (e.g. 0.2 or 5%%)")}
			}
			stderr := cmd.ErrOrStderr()
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
			_, err = eval.Evaluate(cmd.Context(), opt, cmd.OutOrStdout())
			var ge *eval.GateError
			var ce *eval.ConfigError
			switch {
			case errors.As(err, &ge):
				return &gateError{msg: ge.Error()}
			case errors.As(err, &ce):
				return &usageError{err}
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&opt.ModelDir, "model", "", "Hugging Face checkpoint folder of the target")
	f.StringVar(&opt.DrafterDir, "drafter", "", "train output folder, or one export inside it (vllm/, medusa/, eagle3/)")
	f.StringVar(&opt.PromptsPath, "prompts", "", "held-out prompt file (.jsonl or .txt, as for distill)")
	f.IntVar(&opt.Limit, "limit", 0, "evaluate only the first N prompts (0: all)")
	sf.add(c)
	f.Lookup("max-new-tokens").Usage = fmt.Sprintf("most tokens to generate per prompt (default %d)", eval.DefaultMaxNewTokens)
	f.BoolVar(&opt.IgnoreEOS, "ignore-eos", false, "generate --max-new-tokens on every prompt, ignoring end-of-sequence tokens")
	f.StringVar(&mode, "mode", "tree", "draft shape: chain or tree")
	f.IntVar(&opt.Config.Depth, "depth", 0, "chain: drafted tokens (Medusa: heads used; default all heads, EAGLE-3: 4); EAGLE-2 tree: expansion rounds (default 7)")
	f.IntVar(&opt.Config.TopK, "topk", 0, "EAGLE-2 tree: children per node and nodes kept per depth (default 8)")
	f.IntVar(&opt.Config.TotalTokens, "total-tokens", 0, "EAGLE-2 tree: positions verified, root included (default 60)")
	f.StringVar(&tree, "tree", "", "Medusa static tree: a JSON list of paths, e.g. [[0],[1],[0,0]], or a file holding one")
	f.StringVar(&typical, "typical", "", "Medusa typical acceptance EPS,ALPHA (e.g. 0.09,0.3): lossy, needs --temperature > 0")
	f.BoolVar(&opt.AllowMismatch, "allow-mismatch", false, "measure a drafter trained for another target fingerprint instead of refusing it")
	f.StringVar(&opt.ReportPath, "report", "", "write the report as JSON to this file")
	f.StringVar(&opt.PlotDir, "plot", "", "draw PNG charts (acceptance lengths, acceptance by depth) into this folder")
	f.BoolVar(&opt.JSON, "json", false, "print the report as JSON instead of tables")
	f.Float64Var(&opt.Gate.MinAcceptance, "min-acceptance", 0, "gate: exit 3 when the mean acceptance length is below this")
	f.StringVar(&opt.BaselinePath, "baseline", "", "gate: an earlier --report file to compare with (needs --max-drop)")
	f.StringVar(&maxDrop, "max-drop", "", "gate: exit 3 when the mean acceptance length is below --baseline's by more than this (tokens per forward, e.g. 0.2, or a percentage, e.g. 5%)")
	f.BoolVar(&quiet, "quiet", false, "no progress line")
	c.MarkFlagRequired("model")
	c.MarkFlagRequired("drafter")
	c.MarkFlagRequired("prompts")
	return c
}
