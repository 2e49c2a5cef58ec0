package distill

import (
	"fmt"
	"io"
	"strconv"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// maxAutoBatch bounds a batch chosen from free memory: beyond a few dozen
// sequences a decode step's products are wide enough to keep a GPU busy, and
// a wider batch only lengthens the scheduling block (blockPerBatch·batch
// samples regenerated on resume).
const maxAutoBatch = 64

// memoryReserve is the share of the device's total memory a batch leaves
// free besides its caches: the pass's activations (which grow with the
// batch's prefill rows), the logits, cuBLAS's workspace and the allocator's
// rounding. A tenth keeps the caches from taking the last bytes a pass needs
// without a model-by-model estimate of the activations.
const memoryReserve = 10

// batchMemory is what the batch's sizing read from the device.
type batchMemory struct {
	weights, free, total, reserve, perSeq int64
	// fits is how many sequences' caches the free memory holds.
	fits int
}

// chooseBatch sizes the batch's KV caches against the free memory of a
// device with memory of its own: with AutoBatch it chooses opt.Batch from it
// (or keeps a resumed run's), else it checks that opt.Batch fits; either
// way it reports the numbers in one line on opt.Progress. On the CPU device
// (no MemoryReporter) an AutoBatch run keeps opt.Batch.
func chooseBatch(t *target.Target, opt *Options, capacity, samples int) error {
	m := t.Model
	mr, ok := m.Device().(tensor.MemoryReporter)
	if !ok {
		return nil
	}
	perSeq, _ := m.SequenceBytes(capacity)
	free, total, err := mr.MemInfo()
	if err != nil {
		return fmt.Errorf("distill: reading the device's free memory: %w", err)
	}
	var weights int64
	for _, n := range m.Memory().Bytes {
		weights += n
	}
	bm := sizeBatch(weights, free, total, perSeq)
	how := "--batch"
	if opt.AutoBatch {
		how = "from free memory"
		if b, ok := resumedBatch(opt); ok {
			opt.Batch, how = b, "as the resumed run"
		} else {
			opt.Batch = max(1, min(bm.fits, maxAutoBatch, samples))
		}
	}
	if opt.Batch > bm.fits {
		return fmt.Errorf("distill: --batch %d does not fit the device %s: each sequence's KV cache of %d positions takes %s, and %s are free of %s after the weights (%s), less a reserve of %s for the activations: at most %d sequences fit; lower --batch",
			opt.Batch, m.Device().Name(), capacity, bytesText(perSeq), bytesText(free), bytesText(total), bytesText(bm.weights), bytesText(bm.reserve), bm.fits)
	}
	if opt.Progress != nil {
		writeBatchLine(opt.Progress, m.Device().Name(), bm, capacity, opt.Batch, how)
	}
	return nil
}

// sizeBatch applies the rule: the caches may take the free memory less a
// reserve of a tenth of the total, whole sequences of perSeq bytes each.
func sizeBatch(weights, free, total, perSeq int64) batchMemory {
	bm := batchMemory{weights: weights, free: free, total: total, reserve: total / memoryReserve, perSeq: perSeq}
	if avail := free - bm.reserve; avail > 0 && perSeq > 0 {
		bm.fits = int(min(avail/perSeq, 1<<30))
	}
	return bm
}

// writeBatchLine reports the batch's sizing in one line.
func writeBatchLine(w io.Writer, dev string, bm batchMemory, capacity, batch int, how string) {
	fmt.Fprintf(w, "distill: %s: weights %s, %s free of %s; KV cache %s per sequence of %d positions; batch %d (%s, %d fit)\n",
		dev, bytesText(bm.weights), bytesText(bm.free), bytesText(bm.total), bytesText(bm.perSeq), capacity, batch, how, bm.fits)
}

// writeEngineLine says where the run samples and how its states reach the
// host, in one line.
func writeEngineLine(w io.Writer, eng *generate.Engine) {
	where := "on the host (top-k, top-p or min-p: pkg/sample)"
	if eng.SamplesOnDevice() {
		where = "on the device"
	}
	how := "read at the end of each pass"
	if eng.CapturesAsync() {
		how = "copied to pinned host memory on a second stream during the next pass"
	}
	fmt.Fprintf(w, "distill: tokens drawn %s; states %s\n", where, how)
}

// resumedBatch returns the batch an unfinished run in opt.Out recorded, when
// there is one to resume (not with --force): its block schedule, which a
// resumed run must repeat, depends on it.
func resumedBatch(opt *Options) (int, bool) {
	if opt.Force {
		return 0, false
	}
	man, err := capture.ReadManifest(opt.Out)
	if err != nil {
		return 0, false // no capture there (or an unreadable one, which resuming reports)
	}
	b, err := strconv.Atoi(man.Args["batch"])
	if err != nil || b < 1 {
		return 0, false
	}
	return b, true
}

// bytesText renders a byte count for people.
func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
