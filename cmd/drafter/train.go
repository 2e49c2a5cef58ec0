package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/train/run"
)

func newTrainCmd() *cobra.Command {
	var f run.Flags
	var asJSON bool
	c := &cobra.Command{
		Use:   "train --method medusa|eagle3 --model DIR --data DIR[,DIR...] --out DIR",
		Short: "Train Medusa-1 heads or an EAGLE-3 draft layer on captured hidden states",
		Long: `train reads the shards drafter distill captured from --model and trains a drafter on them,
with the target frozen:

  medusa  Medusa-1 heads on the target's final post-norm state; head h predicts the token at
          t+h+2. Exported for vLLM (out/vllm/) and FasterDecoding/TensorRT-LLM (out/medusa/).
  eagle3  one EAGLE-3 draft layer over the fused low/middle/high target features, trained with
          training-time test. Exported to out/eagle3/ (--format native or speculators).

Every capture directory must come from exactly this checkpoint (its manifest's model
fingerprint is checked) and hold the columns the method reads. The defaults train well
without tuning: medusa picks its batch and epoch cap from the data's size, eagle3 trains one
sample per update (SpecForge's recipe) up to an epoch cap; training stops when the held-out
metric stops improving (medusa: the chain acceptance its heads give on held-out responses;
eagle3: the held-out loss), and the best weights are exported. Flags left out keep the
method's trainer defaults.

out/ also receives metrics.jsonl, checkpoint.safetensors and drafter.json (method, target
fingerprint, the data manifests' SHA-256, all arguments, final held-out metrics). Ctrl-C
stops cleanly with a checkpoint; run the same command with --resume to continue: the result
is identical to an uninterrupted run. A resume with different settings is refused.`,
		Example: `  drafter train --method medusa --model models/stories260k --data caps/stories --out drafters/medusa
  drafter train --method eagle3 --model /models/my-sft --data caps/a,caps/b --out drafters/eagle3 --format speculators
  drafter train --method eagle3 --model /models/my-sft --data caps/a --out drafters/eagle3 --resume`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.Given = map[string]string{}
			cmd.Flags().Visit(func(fl *pflag.Flag) {
				if fl.Name != "json" {
					f.Given[fl.Name] = fl.Value.String()
				}
			})
			opt, err := f.Options(cmd.ErrOrStderr())
			var fe *run.FlagError
			if errors.As(err, &fe) {
				return &usageError{err}
			}
			if err != nil {
				return err
			}
			opt.Cache = filecache.New(filecache.Dir(os.Getenv(filecache.EnvDir)))
			res, err := run.Run(cmd.Context(), opt)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res.Provenance)
			}
			for _, e := range res.Exports {
				fmt.Fprintln(cmd.OutOrStdout(), e)
			}
			return nil
		},
	}
	fs := c.Flags()
	f.Register(fs)
	fs.BoolVar(&asJSON, "json", false, "print drafter.json on stdout when done")
	for _, n := range []string{"method", "model", "data", "out"} {
		c.MarkFlagRequired(n)
	}
	return c
}
