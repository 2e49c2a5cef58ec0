package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/eval"
	"github.com/drafter-ai/drafter/pkg/inspect"
)

type inspectOptions struct {
	Model   string
	Drafter string
	JSON    bool
	Out     io.Writer
}

func newCmdInspect(runF func(*inspectOptions) error) *cobra.Command {
	o := &inspectOptions{}
	c := &cobra.Command{
		Use:   "inspect --model DIR | --drafter DIR",
		Short: "Show what drafter reads from a checkpoint or a drafter",
		Long: `inspect opens a Hugging Face checkpoint folder the way every other command does and prints
its architecture, parameter count, dtypes, geometry, tokenizer family, whether it has a chat
template, the EAGLE-3 default feature layers (Hugging Face hidden_states indices 2, L/2, L-3, or 1, (L+1)/2, L below 7 layers)
and the checkpoint fingerprint that drafters are bound to.

With --drafter it finds the drafter in a train output folder (or one export folder) as
drafter eval does and prints its method, layout, provenance and target fingerprint, after
checking every file against the SHA256SUMS drafter train wrote with them: a damaged file
exits 1 naming it; an export from before the checksums is shown with a warning.`,
		Example: `  drafter inspect --model models/stories260k
  drafter inspect --model /models/my-sft --json
  drafter inspect --drafter runs/eagle3`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			// One subject per run: the flags name different kinds of folder.
			switch {
			case o.Model == "" && o.Drafter == "":
				return usagef(`required flag(s) "model" not set (or --drafter DIR to inspect a drafter)`)
			case o.Model != "" && o.Drafter != "":
				return usagef("give --model or --drafter, not both")
			}
			o.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return runInspect(o)
		},
	}
	fs := c.Flags()
	fs.StringVar(&o.Model, "model", "", "Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json)")
	fs.StringVar(&o.Drafter, "drafter", "", "drafter folder: drafter train's --out, or one export folder inside it")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object")
	return c
}

func runInspect(o *inspectOptions) error {
	var r interface{ WriteText(io.Writer) error }
	if o.Drafter != "" {
		dr, err := inspectDrafter(o.Drafter)
		if err != nil {
			return err
		}
		r = dr
	} else {
		mr, err := inspect.Inspect(o.Model, fileCache())
		if err != nil {
			return err
		}
		r = mr
	}
	if o.JSON {
		return writeJSON(o.Out, r)
	}
	return r.WriteText(o.Out)
}

// inspectDrafter finds the drafter in dir as drafter eval does, which
// verifies its files against their SHA256SUMS.
func inspectDrafter(dir string) (*inspect.DrafterReport, error) {
	info, err := eval.Detect(dir)
	if err != nil {
		return nil, err
	}
	return &inspect.DrafterReport{Dir: dir, Kind: string(info.Kind), Layout: info.Layout, ExportDir: info.Dir,
		Provenance: info.Provenance, TargetFingerprint: info.TargetFingerprint,
		Sums: info.Sums, Verified: info.Verified, Warning: info.Warning}, nil
}
