package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/capture/distill"
	"github.com/drafter-ai/drafter/pkg/generate"
)

func newCaptureCmd() *cobra.Command {
	var modelDir, convs string
	var skipInvalid bool
	var cf captureFlags
	c := &cobra.Command{
		Use:   "capture --model DIR --conversations FILE --out DIR",
		Short: "Capture the target's hidden states for responses that already exist",
		Long: `capture stores the same shards as distill for conversations that already have their answers
(written by a serving engine at scale, or a dataset): one teacher-forced prefill per
conversation. The loss mask covers the assistant turns as the chat template delimits them
(end-of-turn markers included); for {"prompt", "response"} raw pairs it covers the response
and an appended EOS. Rerunning the same command resumes an interrupted capture.`,
		Example: `  drafter capture --model /models/my-sft --conversations served.jsonl --out /data/c1`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dt, err := cf.dtypeValue()
			if err != nil {
				return err
			}
			opt := distill.CaptureOptions{Conversations: convs, Out: cf.out, SkipInvalid: skipInvalid, Batch: cf.batch,
				Layers: cf.layers, DType: dt, ShardRows: cf.shardRows, ShardBytes: int64(cf.shardMB * (1 << 20)), Force: cf.force}
			if !cf.quiet {
				opt.Progress = os.Stderr
			}
			t, err := generate.Load(modelDir, nil, fileCache())
			if err != nil {
				return err
			}
			defer t.Close()
			_, err = distill.Capture(cmd.Context(), t, opt)
			return err
		},
	}
	c.Flags().StringVar(&modelDir, "model", "", "Hugging Face checkpoint folder")
	c.Flags().StringVar(&convs, "conversations", "", "conversations file (.jsonl: messages, conversations or prompt+response)")
	c.Flags().BoolVar(&skipInvalid, "skip-invalid", false, "skip (and count) malformed records and conversations longer than the context")
	cf.add(c)
	c.MarkFlagRequired("model")
	c.MarkFlagRequired("conversations")
	return c
}
