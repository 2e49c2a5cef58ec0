package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/pkg/exportcheck"
)

type checkExportOptions struct {
	Dir     string
	Engines []exportcheck.Engine
	Out     io.Writer
}

func newCmdCheckExport(runF func(*checkExportOptions) error) *cobra.Command {
	o := &checkExportOptions{}
	var engine string
	c := &cobra.Command{
		Use:   "check-export DIR [--engine vllm|sglang|trtllm|all]",
		Short: "Check an exported drafter against each serving engine's loading rules",
		Long: `check-export reads an exported drafter as vLLM, SGLang and TensorRT-LLM read it — the
config keys each engine looks at and the defaults it assumes for absent ones, the tensors
it builds parameters for (names, shapes, dtypes), the feature-layer id convention of each id
key, the draft-to-target vocabulary offsets (d2t), a block drafter's block size, mask token,
causality and label layout (DFlash's unshifted block against DSpark's shifted one) — and
prints one line per finding:

  LEVEL: ENGINES: FILE: KEY: what the engine does

"error" is a mismatch: the engine would refuse the export, or load it and run another
drafter than the export describes (a switch it ignores, a tensor it skips without a word, a
layer it captures one off). "note" is a key an engine ignores or defaults without changing
this drafter, or only in the engine versions the note names. The exit status is 1 when
there is an error.

DIR is one export folder (train's out/eagle3, out/vllm, out/medusa, out/dflash or out/dspark)
or train's out/ (then every export in it, each for the engines that load its layout).
drafter.json beside the exports is compared too: the switches, feature layers, target layer
count, block size, mask token and causality it records.`,
		Example: `  drafter check-export drafters/eagle3
  drafter check-export drafters/eagle3/eagle3 --engine sglang
  drafter check-export drafters/medusa --engine vllm
  drafter check-export drafters/dflash --engine sglang`,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("%s takes one export folder, got %d arguments", c.CommandPath(), len(args))
			}
			es, err := exportcheck.ParseEngines(engine)
			if err != nil {
				return usagef("--engine: %v", err)
			}
			o.Dir, o.Engines, o.Out = args[0], es, c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return runCheckExport(o)
		},
	}
	c.Flags().StringVar(&engine, "engine", "all", "vllm, sglang, trtllm, or all (each export for the engines that load its layout)")
	return c
}

func runCheckExport(o *checkExportOptions) error {
	r, err := exportcheck.Check(o.Dir, exportcheck.Options{Engines: o.Engines})
	if err != nil {
		return err
	}
	for _, l := range r.Lines() {
		fmt.Fprintln(o.Out, l)
	}
	var checked []string
	for _, ex := range r.Exports {
		es := make([]string, len(ex.Engines))
		for i, e := range ex.Engines {
			es[i] = string(e)
		}
		checked = append(checked, fmt.Sprintf("%s (%s %s: %s)", ex.Dir, ex.Method, ex.Layout, strings.Join(es, ", ")))
	}
	fmt.Fprintf(o.Out, "checked %s: %d errors, %d notes\n", strings.Join(checked, "; "), r.Errors(), len(r.Findings)-r.Errors())
	if r.Failed() {
		return fmt.Errorf("check-export: %s: %d mismatches with the engines' loading rules (the error lines above)", o.Dir, r.Errors())
	}
	return nil
}
