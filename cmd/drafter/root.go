package main

import (
	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// newRootCmd builds the command tree. With stub set, every command calls it
// with its options (a *distillOptions, a *trainOptions, ...) once its flags
// are checked, instead of running: tests parse command lines without
// loading a model.
func newRootCmd(stub func(opts any) error) *cobra.Command {
	root := &cobra.Command{
		Use:   "drafter",
		Short: "Train speculative-decoding drafters for your fine-tuned checkpoint",
		Long: `drafter trains a drafter (Medusa-1 heads or an EAGLE-3 draft layer) against the exact
checkpoint you serve, and measures it with real speculative decoding:

  drafter distill   generate responses with the frozen target and capture its hidden states
  drafter train     train Medusa-1 heads or an EAGLE-3 draft layer on the captured shards
  drafter eval      run speculative decoding on held-out prompts and gate on acceptance

Helpers: inspect (what drafter sees in a checkpoint), tokenize (exact token ids and chat
rendering), generate (run the target model), capture (hidden states of existing answers),
check-export (an export against vLLM's, SGLang's and TensorRT-LLM's loading rules), bench
(the whole pipeline's speed on a random-weight model of a named shape).

Exit codes: 0 success; 1 bad input, an I/O failure or an interrupted run; 2 a command-line
mistake (an unknown command or flag, a missing or invalid flag value, flags that contradict
each other or do not apply), whichever command; 3 drafter eval's gate failed.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{err}
	})
	root.AddCommand(
		newCmdInspect(stubbed[inspectOptions](stub)),
		newCmdTokenize(stubbed[tokenizeOptions](stub)),
		newCmdGenerate(stubbed[generateOptions](stub)),
		newCmdDistill(stubbed[distillOptions](stub)),
		newCmdCapture(stubbed[captureOptions](stub)),
		newCmdTrain(stubbed[trainOptions](stub)),
		newCmdEval(stubbed[evalOptions](stub)),
		newCmdDevices(stubbed[devicesOptions](stub)),
		newCmdCheckExport(stubbed[checkExportOptions](stub)),
		newCmdBench(stubbed[benchOptions](stub)),
	)
	return root
}

// stubbed adapts stub to one command's run function; nil stays nil (run
// the command).
func stubbed[T any](stub func(any) error) func(*T) error {
	if stub == nil {
		return nil
	}
	return func(o *T) error { return stub(o) }
}
