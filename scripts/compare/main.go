// Command compare prints one table comparing `drafter eval --report` files:
// drafter, decoding shape (with a draft-length schedule), temperature, mean
// acceptance length, draft tokens proposed per verification, tokens/s with and
// without speculation, speed-up, the drafter's share of the time, its time per
// verification round in target decode steps (draft/round), the break-even
// acceptance length (eval.StepCost) and the lossless check. `make demo` uses it.
//
//	go run ./scripts/compare REPORT.json...
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/drafter-ai/drafter/eval"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: compare REPORT.json...")
		os.Exit(2)
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "report\tdrafter\tshape\ttemp\taccept len\tdrafted/step\tbaseline tok/s\tspec tok/s\tspeed-up\tdrafter share\tdraft/round\tbreak-even\tlossless\t")
	for _, path := range os.Args[1:] {
		r, err := eval.ReadReport(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			os.Exit(1)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%g\t%.2f\t%.2f\t%.0f\t%.0f\t%.2fx\t%.0f%%\t%.2f\t%.2f\t%s\t\n",
			strings.TrimSuffix(filepath.Base(path), ".json"), fmt.Sprintf("%s (%s)", r.Drafter.Kind, r.Drafter.Layout),
			shape(r), r.Sampling.Temperature, r.MeanAcceptLength, r.MeanDrafted, r.Baseline.TokensPerSec,
			r.Speculative.TokensPerSec, r.SpeedUp, 100*r.DrafterShare, r.Cost.Draft, r.Cost.BreakEven, lossless(r))
	}
	tw.Flush()
}

func shape(r *eval.Report) string {
	switch {
	case r.Mode == eval.ModeChain && r.Schedule != nil:
		return fmt.Sprintf("chain k=%d %s", r.Depth, r.Schedule.Kind)
	case r.Mode == eval.ModeChain:
		return fmt.Sprintf("chain k=%d", r.Depth)
	case r.TotalTokens > 0:
		return fmt.Sprintf("tree d=%d k=%d n=%d", r.Depth, r.TopK, r.TreeNodes)
	}
	return fmt.Sprintf("tree n=%d", r.TreeNodes)
}

func lossless(r *eval.Report) string {
	switch {
	case r.Lossy:
		return "LOSSY (typical)"
	case !r.Lossless.Checked:
		return "in distribution"
	case len(r.Lossless.Mismatches) == 0:
		return fmt.Sprintf("%d/%d equal", r.Lossless.Prompts, r.Lossless.Prompts)
	}
	return fmt.Sprintf("%d MISMATCHES", len(r.Lossless.Mismatches))
}
