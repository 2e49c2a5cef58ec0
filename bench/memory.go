package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/medusa"
)

// gib is a binary gigabyte.
const gib = 1 << 30

// MemoryError is a run that does not fit: Need bytes of Where's memory
// (host or the device's name) against Free.
type MemoryError struct {
	Shape, Where string
	Need, Free   int64
	What         string
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("bench: the %s shape needs about %.1f GiB of %s memory (%s) but %.1f GiB is free; choose a smaller shape, --layers, or a machine with more memory",
		e.Shape, float64(e.Need)/gib, e.Where, e.What, float64(e.Free)/gib)
}

// need estimates the peak memory of a run: the model's weights (the
// 16-bit matrices and the float32 draw of the largest one as NewRandomAs
// builds them), its KV caches and activations and the drafters whose steps
// are timed beside it, then, after the model is freed, the trainers' state: the
// output layers in float32, Medusa's heads (their lm_head copies: values,
// gradients and AdamW's two moments) and EAGLE-3's draft layer with its
// draft-vocabulary head (the same four copies) and TTT's logits. On a GPU
// the weights and the trainers' state live on the device and their host
// values stay on the host too, so host and device both need it. A margin of
// 10% and 1 GiB covers activations, caches and the runtime.
func need(cfg *checkpoint.Config, o *Options) int64 {
	H, V, I := int64(cfg.HiddenSize), int64(cfg.VocabSize), int64(cfg.IntermediateSize)
	params := cfg.NumParams()
	weights := params*int64(o.DType.Size()) + V*H*4
	// The KV caches of the batch-32 sequences and the distillation's 64,
	// in float32.
	kv := int64(cfg.NumLayers) * 2 * int64(cfg.NumKVHeads*cfg.HeadDim) * 4 *
		(DecodeBatch*int64(o.Prompt+o.Decode+TreeNodes) + DistillBatch*int64(o.DistillPrompt+o.DistillTokens))
	// The widest pass's activations: 32 prompts or 64 distilled prompts.
	rows := max(DecodeBatch*int64(o.Prompt), DistillBatch*int64(o.DistillPrompt))
	acts := rows * (4*H + 3*I) * 4

	out := V * H * 4
	if !cfg.TieWordEmbeddings {
		out *= 2
	}
	mc := medusa.DefaultConfig()
	heads := int64(mc.Heads) * int64(mc.Layers) * (H*H + H)
	if !o.MedusaSharedLMHead {
		heads += int64(mc.Heads) * V * H
	}
	ec := eagle3.DefaultConfig()
	N := int64(min(ec.DraftVocab, cfg.VocabSize))
	q := int64(cfg.NumHeads * cfg.HeadDim)
	kvw := int64(cfg.NumKVHeads * cfg.HeadDim)
	draft := 3*H*H + 2*H*(q+2*kvw) + q*H + 3*H*I + N*H
	ttt := int64(o.TrainTokens) * int64(ec.Steps+2) * (N + V) * 4
	// The draft steps run beside the model: the heads' float32 values (and
	// the random lm_head they are made from), then the draft layer's.
	phase1 := weights + kv + acts + 4*(V*H+heads+draft)
	phase2 := out + 4*4*max(heads, draft) + ttt
	return (max(phase1, phase2)*11)/10 + gib
}

// checkMemory refuses a run that would not fit the host's available memory
// or, on a device that reports it, the device's free memory.
func checkMemory(cfg *checkpoint.Config, o *Options) error {
	n := need(cfg, o)
	what := fmt.Sprintf("%s weights of %d parameters, then the trainers' state", o.DType, cfg.NumParams())
	free := o.freeHost
	if free == nil {
		free = hostAvailable
	}
	avail, err := free()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if n > avail {
		return &MemoryError{Shape: o.Shape, Where: "host", Need: n, Free: avail, What: what}
	}
	if d, ok := o.Device.(interface {
		MemInfo() (free, total int64, err error)
	}); ok {
		f, _, err := d.MemInfo()
		if err != nil {
			return fmt.Errorf("bench: the device's free memory: %w", err)
		}
		if n > f {
			return &MemoryError{Shape: o.Shape, Where: deviceName(o.Device), Need: n, Free: f, What: what}
		}
	}
	return nil
}

// hostAvailable returns MemAvailable of /proc/meminfo: the memory the
// kernel can give without swapping.
func hostAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("the host's available memory: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("the host's available memory: /proc/meminfo: %q: %w", sc.Text(), err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("the host's available memory: /proc/meminfo has no MemAvailable")
}
