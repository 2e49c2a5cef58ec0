package main

import (
	"encoding/json"
	"os"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/pkg/inspect"
)

func newInspectCmd() *cobra.Command {
	var model string
	var asJSON bool
	c := &cobra.Command{
		Use:   "inspect --model DIR",
		Short: "Show what drafter reads from a checkpoint",
		Long: `inspect opens a Hugging Face checkpoint folder the way every other command does and prints
its architecture, parameter count, dtypes, geometry, tokenizer family, whether it has a chat
template, the EAGLE-3 default feature layers (Hugging Face hidden_states indices 2, L/2, L-3, or 1, (L+1)/2, L below 7 layers)
and the checkpoint fingerprint that drafters are bound to.`,
		Example: `  drafter inspect --model models/stories260k
  drafter inspect --model /models/my-sft --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := inspect.Inspect(model, fileCache())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return r.WriteText(os.Stdout)
		},
	}
	c.Flags().StringVar(&model, "model", "", "Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	c.MarkFlagRequired("model")
	return c
}
