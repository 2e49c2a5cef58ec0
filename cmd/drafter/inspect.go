package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/pkg/inspect"
)

type inspectOptions struct {
	Model string
	JSON  bool
	Out   io.Writer
}

func newCmdInspect(runF func(*inspectOptions) error) *cobra.Command {
	o := &inspectOptions{}
	c := &cobra.Command{
		Use:   "inspect --model DIR",
		Short: "Show what drafter reads from a checkpoint",
		Long: `inspect opens a Hugging Face checkpoint folder the way every other command does and prints
its architecture, parameter count, dtypes, geometry, tokenizer family, whether it has a chat
template, the EAGLE-3 default feature layers (Hugging Face hidden_states indices 2, L/2, L-3, or 1, (L+1)/2, L below 7 layers)
and the checkpoint fingerprint that drafters are bound to.`,
		Example: `  drafter inspect --model models/stories260k
  drafter inspect --model /models/my-sft --json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return runInspect(o)
		},
	}
	fs := c.Flags()
	fs.StringVar(&o.Model, "model", "", "Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json)")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object")
	requireFlags(c, "model")
	return c
}

func runInspect(o *inspectOptions) error {
	r, err := inspect.Inspect(o.Model, fileCache())
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSON(o.Out, r)
	}
	return r.WriteText(o.Out)
}
