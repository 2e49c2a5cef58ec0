package main

import (
	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "drafter",
		Short: "Train speculative-decoding drafters for your fine-tuned checkpoint",
		Long: `drafter trains a drafter (Medusa-1 heads or an EAGLE-3 draft layer) against the exact
checkpoint you serve, and measures it with real speculative decoding:

  drafter distill   generate responses with the frozen target and capture its hidden states
  drafter train     train Medusa-1 heads or an EAGLE-3 draft layer on the captured shards
  drafter eval      run speculative decoding on held-out prompts and gate on acceptance

Helpers: inspect (what drafter sees in a checkpoint), tokenize (exact token ids and chat
rendering), generate (run the target model).`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{err}
	})
	root.AddCommand(
		newInspectCmd(),
		newTokenizeCmd(),
		newGenerateCmd(),
		newDistillCmd(),
		newCaptureCmd(),
		newTrainCmd(),
		newEvalCmd(),
	)
	return root
}
