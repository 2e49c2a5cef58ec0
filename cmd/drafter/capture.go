package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/capture/distill"
	"github.com/drafter-ai/drafter/pkg/target"
)

// Bounds of the capture flags, against typos.
const (
	// maxBatch bounds --batch: every sequence decoded (or prefilled)
	// together holds its own KV cache for its whole context, so a batch in
	// the thousands only spends memory, and a mistyped --batch 80000000000
	// would not even allocate its slot table.
	maxBatch = 1024
	// maxShardMB bounds --shard-mb at 1 TiB, far above any shard a reader
	// wants to map, and far below an int64 count of bytes.
	maxShardMB = 1 << 20
)

// captureFlags are the output flags distill and capture share.
type captureFlags struct {
	out, dtype   string
	layers       []int
	batch        int
	shardRows    int64
	shardMB      float64
	force, quiet bool
	json         bool
}

func (f *captureFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.out, "out", "", "output directory (shards, manifest.json, responses.jsonl)")
	fs.IntSliceVar(&f.layers, "layers", nil, "Hugging Face hidden_states indices to store, e.g. 2,16,29, in any order (stored sorted, each once; default: the EAGLE-3 layers 2, L/2, L-3, or 1, (L+1)/2, L below 7 layers; index L is the last layer's output before the final norm); the state after the final norm is always stored as final_norm")
	fs.StringVar(&f.dtype, "dtype", "float16", "storage type of the states: float16 or float32")
	fs.IntVar(&f.batch, "batch", 8, fmt.Sprintf("sequences run through the model together, 1 to %d (distill on a GPU: default from its free memory after the weights, at most 64)", maxBatch))
	fs.Int64Var(&f.shardRows, "shard-rows", 0, "close a shard after this many rows (token positions); 0: no row limit")
	floatVar(fs, &f.shardMB, "shard-mb", 1024, fmt.Sprintf("close a shard after this many MiB, above 0 and at most %d (1 TiB); fractions are allowed", maxShardMB))
	fs.BoolVar(&f.force, "force", false, "delete the capture in --out and start over (default: resume it)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar or summary on stderr")
	fs.BoolVar(&f.json, "json", false, "print the run's summary on stdout as one JSON object (progress stays on stderr)")
}

func (f *captureFlags) checks() []flagCheck {
	return []flagCheck{
		{"layers", slices.ContainsFunc(f.layers, func(k int) bool { return k < 0 }), "Hugging Face hidden_states indices >= 0 (0 is the embedding output)"},
		{"batch", f.batch < 1 || f.batch > maxBatch, fmt.Sprintf("an integer from 1 to %d", maxBatch)},
		{"shard-rows", f.shardRows < 0, "0 (no row limit) or a positive number of rows"},
		{"shard-mb", !(f.shardMB > 0 && f.shardMB <= maxShardMB), fmt.Sprintf("a size in MiB above 0 and at most %d", maxShardMB)},
	}
}

// resolve checks the capture flags of c and the command's own checks, and
// returns the storage type and where the progress goes (nil with --quiet).
func (f *captureFlags) resolve(c *cobra.Command, own ...flagCheck) (capture.DType, io.Writer, error) {
	if err := checkFlags(c, append(f.checks(), own...)); err != nil {
		return "", nil, err
	}
	d, err := capture.ParseDType(f.dtype)
	if err != nil {
		return "", nil, usagef("--dtype %s: want float16 or float32 (bfloat16 is not supported: Arrow has no bfloat16 type)", f.dtype)
	}
	if f.quiet {
		return d, nil, nil
	}
	return d, c.ErrOrStderr(), nil
}

// shardBytes is --shard-mb in bytes, at least one.
func (f *captureFlags) shardBytes() int64 {
	return max(1, int64(math.Round(f.shardMB*(1<<20))))
}

// checkLayers resolves --layers for t as the capture will, so that an index
// the model does not have is a command-line mistake found before any work.
func checkLayers(t *target.Target, layers []int) error {
	if layers == nil {
		return nil
	}
	if _, err := distill.Layers(t.Config, t.Model.NumLayers(), layers); err != nil {
		return &usageError{fmt.Errorf("--layers: %w", err)}
	}
	return nil
}

type captureOptions struct {
	Model   string
	Capture distill.CaptureOptions
	JSON    bool
	Out     io.Writer
	Device  deviceChoice
}

func newCmdCapture(runF func(*captureOptions) error) *cobra.Command {
	o := &captureOptions{}
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
		Args:    noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p := &o.Capture
			var err error
			if p.DType, p.Progress, err = cf.resolve(c); err != nil {
				return err
			}
			p.Out, p.Batch, p.Layers, p.ShardRows, p.ShardBytes, p.Force = cf.out, cf.batch, cf.layers, cf.shardRows, cf.shardBytes(), cf.force
			o.JSON, o.Out = cf.json, c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return runCapture(c.Context(), o)
		},
	}
	fs := c.Flags()
	o.Device.register(c)
	fs.StringVar(&o.Model, "model", "", "Hugging Face checkpoint folder")
	fs.StringVar(&o.Capture.Conversations, "conversations", "", "conversations file (.jsonl: messages, conversations or prompt+response)")
	fs.BoolVar(&o.Capture.SkipInvalid, "skip-invalid", false, "skip (and count) malformed records and conversations longer than the context")
	cf.register(fs)
	requireFlags(c, "model", "conversations", "out")
	return c
}

func runCapture(ctx context.Context, o *captureOptions) error {
	t, dev, err := loadTarget(o.Model, &o.Device)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer t.Close()
	if err := checkLayers(t, o.Capture.Layers); err != nil {
		return err
	}
	sum, err := distill.Capture(ctx, t, o.Capture)
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSON(o.Out, struct {
			summaryJSON
			Conversations int `json:"conversations"`
		}{newSummaryJSON("capture", sum), sum.Prompts})
	}
	return nil
}

// summaryJSON is what distill and capture print with --json: the counts of
// the run and its final manifest.
type summaryJSON struct {
	Command string `json:"command"`
	Out     string `json:"out"`
	// Skipped malformed records, TooLong those skipped for their length
	// (both with --skip-invalid).
	Skipped int `json:"skipped"`
	TooLong int `json:"too_long"`
	// Samples in this run's share; Resumed of them were already stored.
	Samples        int               `json:"samples"`
	Resumed        int               `json:"resumed"`
	Seconds        float64           `json:"seconds"`
	CaptureSeconds float64           `json:"capture_seconds"`
	Manifest       *capture.Manifest `json:"manifest"`
}

func newSummaryJSON(command string, sum *distill.Summary) summaryJSON {
	return summaryJSON{Command: command, Out: sum.Out, Skipped: sum.Skipped, TooLong: sum.TooLong, Samples: sum.Samples,
		Resumed: sum.Resumed, Seconds: sum.Seconds, CaptureSeconds: sum.CaptureSeconds, Manifest: sum.Manifest}
}

// writeJSON prints v as one indented JSON object.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
