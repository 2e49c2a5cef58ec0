package cuda

import (
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// lossOps are the kernels of kernels/loss.cu: softmax, the cross-entropies
// and the LK losses and their row-loss sum, argmax, column gathers and top-k. The row kernels
// run a block per row, its size a function of the row's width only
// (lossBlock), so that a row's float64 sums, and a loss summed by one block
// in a fixed order, are the same bits on every call with the same inputs.
type lossOps struct {
	softmax, argmax, gatherCols *kernel
	ce, softCE, sum, ceEval     *kernel
	lk                          *kernel
	topk                        *kernel
	maxBlocks                   int // the most blocks of GatherCols' grid-stride grid
}

// init looks the group's kernels up once per device value (Open and
// Sibling), so that an op never searches the kernel table.
func (o *lossOps) init(d *Device) {
	o.softmax = d.fn("drafter_loss_softmax")
	o.argmax = d.fn("drafter_loss_argmax")
	o.gatherCols = d.fn("drafter_loss_gather_cols")
	o.ce = d.fn("drafter_loss_ce")
	o.softCE = d.fn("drafter_loss_soft_ce")
	o.lk = d.fn("drafter_loss_lk")
	o.sum = d.fn("drafter_loss_sum")
	o.ceEval = d.fn("drafter_loss_ce_eval")
	o.topk = d.fn("drafter_loss_topk")
	// Eight blocks of lossGatherBlock threads fill a multiprocessor; the
	// floor keeps a device reporting few SMs (the stand-in) launching
	// several.
	o.maxBlocks = max(8*d.sh.info.SMs, 64)
}

// The launch shapes: row kernels use 32 to lossMaxBlock threads (lossBlock),
// GatherCols' grid-stride loop lossGatherBlock.
const (
	lossMaxBlock    = 1024
	lossGatherBlock = 256
)

// topkSlots is the most candidates TopK sorts in shared memory (8 bytes
// each: 32 KiB, within the 48 KiB a kernel gets without opting in). A
// vocabulary-wide row with k up to the block's threads leaves a few
// hundred; more (ties or masks at the top, or k past 1024) take the
// kernel's radix-select path.
const topkSlots = 4096

// lossBlock is the block of a one-block-per-row kernel over rows of n
// values: about eight values per thread, whole warps, 32 to lossMaxBlock
// threads. It depends on n only: the reductions' order, and with it every
// float64 sum's bits, follow from the block size.
func lossBlock(n int) dim3 {
	return dim3{x: uint32(min(lossMaxBlock, max(32, ((n+7)/8+31)&^31))), y: 1, z: 1}
}

// lossGrid is a grid of one block per row.
func lossGrid(rows int) dim3 { return dim3{x: uint32(rows), y: 1, z: 1} }

// lossF32 panics unless x is a float32 tensor (the losses' only dtype).
func lossF32(op string, x tensor.Tensor) {
	if x.DType() != tensor.F32 {
		panic(fmt.Sprintf("cuda: %s of a %s tensor, want F32", op, x.DType()))
	}
}

// Softmax replaces each row of x with softmax(x·scale): the float32
// exponentials of (x - max)·scale over their float64 sum, as the CPU
// device computes them, one block per row.
func (d *Device) Softmax(x tensor.Tensor, scale float32) {
	lossF32("Softmax", x)
	if x.Empty() {
		return
	}
	n := x.Cols()
	d.args().ptr(x).i32(n).f32(scale)
	d.launch(d.loss.softmax, lossGrid(x.Rows()), lossBlock(n), 0)
}

// ArgMax writes into idx[r] the column of row r's first largest value,
// computed on the device (one block per row) and copied straight into idx,
// which holds no pointers.
func (d *Device) ArgMax(idx []int32, x tensor.Tensor) {
	lossF32("ArgMax", x)
	rows, n := x.Rows(), x.Cols()
	if len(idx) < rows {
		panic(fmt.Sprintf("cuda: ArgMax of %d rows into %d indices", rows, len(idx)))
	}
	if rows == 0 {
		return
	}
	if n == 0 {
		clear(idx[:rows])
		return
	}
	buf := d.scratch(scratchA, 4*rows)
	d.args().addr(buf).ptr(x).i32(n)
	d.launch(d.loss.argmax, lossGrid(rows), lossBlock(n), 0)
	d.toHost(unsafe.Pointer(&idx[0]), buf, 4*rows)
}

// GatherCols writes column cols[i] of src's rows into column i of out's. A
// column outside src (the CPU device panics on it; a kernel cannot) gives
// NaN.
func (d *Device) GatherCols(out, src, cols tensor.Tensor) {
	lossF32("GatherCols", out)
	lossF32("GatherCols", src)
	if cols.DType() != tensor.I32 || cols.Len() != out.Cols() || out.Rows() != src.Rows() {
		panic(fmt.Sprintf("cuda: GatherCols of %d %s columns from %dx%d into %dx%d", cols.Len(), cols.DType(), src.Rows(), src.Cols(), out.Rows(), out.Cols()))
	}
	total := out.Len()
	if total == 0 {
		return
	}
	grid := dim3{x: uint32(min((total+lossGatherBlock-1)/lossGatherBlock, d.loss.maxBlocks)), y: 1, z: 1}
	d.args().ptr(out).ptr(src).ptr(cols).i32(out.Rows()).i32(src.Cols()).i32(out.Cols())
	d.launch(d.loss.gatherCols, grid, dim3{x: lossGatherBlock, y: 1, z: 1}, 0)
}

// lossOperands checks the operands the cross-entropies share, as the CPU
// device does.
func lossOperands(op string, dlogits, logits, weights tensor.Tensor) {
	lossF32(op, logits)
	rows, v := logits.Rows(), logits.Cols()
	if !dlogits.Empty() && (dlogits.DType() != tensor.F32 || dlogits.Rows() != rows || dlogits.Cols() != v) {
		panic(fmt.Sprintf("cuda: %s: dlogits %s %dx%d for logits %dx%d", op, dlogits.DType(), dlogits.Rows(), dlogits.Cols(), rows, v))
	}
	if !weights.Empty() && (weights.DType() != tensor.F32 || weights.Len() != rows) {
		panic(fmt.Sprintf("cuda: %s: %d %s weights for %d rows", op, weights.Len(), weights.DType(), rows))
	}
}

// lossTotal sums the rows' losses the row kernel left in rowLoss (rows
// float64 values at buf+8) into buf with one block, in a fixed order (the
// block's size depends on rows only), and returns that one value.
func (d *Device) lossTotal(buf uint64, rows int) float64 {
	d.args().addr(buf).addr(buf + 8).i32(rows)
	d.launch(d.loss.sum, dim3{x: 1, y: 1, z: 1}, dim3{x: uint32(min(lossMaxBlock, (rows+31)&^31)), y: 1, z: 1}, 0)
	h := d.hostScratch(8)
	d.toHost(h, buf, 8)
	return *(*float64)(h)
}

// CrossEntropy returns the weighted cross-entropy of logits against
// targets, skipping rows of zero weight or negative target, and writes its
// gradient into dlogits when dlogits is not empty (overwritten; it may be
// logits). Each row's loss is computed in float64 by its block and the rows'
// losses summed by one block, in fixed orders: the same inputs give the same
// bits, with or without dlogits.
func (d *Device) CrossEntropy(dlogits, logits, targets, weights tensor.Tensor) float64 {
	if targets.DType() != tensor.I32 || targets.Len() != logits.Rows() {
		panic(fmt.Sprintf("cuda: CrossEntropy: %d %s targets for %d rows", targets.Len(), targets.DType(), logits.Rows()))
	}
	lossOperands("CrossEntropy", dlogits, logits, weights)
	rows, v := logits.Rows(), logits.Cols()
	if rows == 0 || v == 0 {
		return 0
	}
	buf := d.scratch(scratchA, 8*(1+rows))
	d.args().ptr(dlogits).ptr(logits).ptr(targets).ptr(weights).addr(buf + 8).i32(v)
	d.launch(d.loss.ce, lossGrid(rows), lossBlock(v), 0)
	return d.lossTotal(buf, rows)
}

// SoftCrossEntropy returns the weighted cross-entropy of logits against the
// target distributions p, skipping rows of zero weight, and writes its
// gradient into dlogits when dlogits is not empty (overwritten; it may be
// logits), with CrossEntropy's fixed-order float64 sums.
func (d *Device) SoftCrossEntropy(dlogits, logits, p, weights tensor.Tensor) float64 {
	if p.DType() != tensor.F32 || p.Rows() != logits.Rows() || p.Cols() != logits.Cols() {
		panic(fmt.Sprintf("cuda: SoftCrossEntropy: target distributions %s %dx%d for logits %dx%d", p.DType(), p.Rows(), p.Cols(), logits.Rows(), logits.Cols()))
	}
	lossOperands("SoftCrossEntropy", dlogits, logits, weights)
	rows, v := logits.Rows(), logits.Cols()
	if rows == 0 || v == 0 {
		return 0
	}
	buf := d.scratch(scratchA, 8*(1+rows))
	d.args().ptr(dlogits).ptr(logits).ptr(p).ptr(weights).addr(buf + 8).i32(v)
	d.launch(d.loss.softCE, lossGrid(rows), lossBlock(v), 0)
	return d.lossTotal(buf, rows)
}

// LKLoss returns the weighted LK loss l of logits against the target
// distributions p and the weighted sum of the rows' α, skipping rows of zero
// weight, and writes its gradient into dlogits when dlogits is not empty
// (overwritten; it may be logits), with CrossEntropy's fixed-order float64
// sums: one kernel for the rows, then drafter_loss_sum for the losses and
// for the α.
func (d *Device) LKLoss(dlogits, logits, p, weights tensor.Tensor, l tensor.LK) (loss, alpha float64) {
	if p.DType() != tensor.F32 || p.Rows() != logits.Rows() || p.Cols() != logits.Cols() {
		panic(fmt.Sprintf("cuda: LKLoss: target distributions %s %dx%d for logits %dx%d", p.DType(), p.Rows(), p.Cols(), logits.Rows(), logits.Cols()))
	}
	lossOperands("LKLoss", dlogits, logits, weights)
	return d.lkLoss(dlogits, logits, p, tensor.Tensor{}, weights, l)
}

// LKLossHard is LKLoss against one-hot targets (the same kernel, without
// distributions), skipping rows of zero weight or negative target; a
// target past the row (the CPU panics) gives a NaN loss.
func (d *Device) LKLossHard(dlogits, logits, targets, weights tensor.Tensor, l tensor.LK) (loss, alpha float64) {
	if targets.DType() != tensor.I32 || targets.Len() != logits.Rows() {
		panic(fmt.Sprintf("cuda: LKLossHard: %d %s targets for %d rows", targets.Len(), targets.DType(), logits.Rows()))
	}
	lossOperands("LKLossHard", dlogits, logits, weights)
	return d.lkLoss(dlogits, logits, tensor.Tensor{}, targets, weights, l)
}

// lkLoss launches drafter_loss_lk over the rows: the rows' losses at buf+8
// and their α after them, each summed into the slot before it.
func (d *Device) lkLoss(dlogits, logits, p, targets, weights tensor.Tensor, l tensor.LK) (loss, alpha float64) {
	rows, v := logits.Rows(), logits.Cols()
	if rows == 0 || v == 0 {
		return 0, 0
	}
	buf := d.scratch(scratchA, 16*(1+rows))
	abuf := buf + uint64(8*(1+rows))
	d.args().ptr(dlogits).ptr(logits).ptr(p).ptr(targets).ptr(weights).addr(buf + 8).addr(abuf + 8).i32(v).
		f64(l.KL).f64(l.TV).f64(l.NLA).f64(l.Hybrid).f64(l.Eta)
	d.launch(d.loss.lk, lossGrid(rows), lossBlock(v), 0)
	loss = d.lossTotal(buf, rows)
	return loss, d.lossTotal(abuf, rows)
}

// CrossEntropyEval writes each row's loss -log softmax(logits[r])[t_r]
// (float64) into rowLoss[r] and the target's rank (how many logits are
// strictly larger) into rank[r]; a negative target gives loss 0 and rank
// -1. The logits stay intact; the results are computed on the device and
// copied straight into the host slices.
func (d *Device) CrossEntropyEval(rowLoss []float64, rank []int32, logits, targets tensor.Tensor) {
	lossF32("CrossEntropyEval", logits)
	rows, v := logits.Rows(), logits.Cols()
	if targets.DType() != tensor.I32 || targets.Len() != rows || len(rowLoss) < rows || len(rank) < rows {
		panic(fmt.Sprintf("cuda: CrossEntropyEval: %d %s targets, %d losses and %d ranks for %d rows", targets.Len(), targets.DType(), len(rowLoss), len(rank), rows))
	}
	if rows == 0 {
		return
	}
	buf := d.scratch(scratchA, 12*rows)
	d.args().addr(buf).addr(buf + uint64(8*rows)).ptr(logits).ptr(targets).i32(v)
	d.launch(d.loss.ceEval, lossGrid(rows), lossBlock(v), 0)
	d.toHost(unsafe.Pointer(&rowLoss[0]), buf, 8*rows)
	d.toHost(unsafe.Pointer(&rank[0]), buf+uint64(8*rows), 4*rows)
}

// TopK writes into idx, best first, the columns of the len(idx) largest
// values of the one-row tensor x, ties to the lower column, and returns how
// many it wrote: min(len(idx), x's columns). One block selects them on the
// device (the values at or above a bound from the threads' maxima, sorted
// in shared memory, or a radix select of the k-th largest value; see
// drafter_loss_topk) and only the k indices come back,
// through the pinned buffer. NaN values rank below every number (the CPU
// device's scan lets a NaN in unpredictably).
func (d *Device) TopK(idx []int, x tensor.Tensor) int {
	if x.DType() != tensor.F32 || x.Rows() != 1 && !x.Empty() {
		panic(fmt.Sprintf("cuda: TopK of a %s %dx%d tensor: one float32 row", x.DType(), x.Rows(), x.Cols()))
	}
	n := x.Len()
	k := min(len(idx), n)
	if k <= 0 {
		return 0
	}
	p2 := 1 << bits.Len(uint(k-1)) // the sort's power of two, >= k
	// The shared slots the candidates are sorted in: a short row's all.
	slots := min(topkSlots, 1<<bits.Len(uint(n-1)))
	cand := d.scratch(scratchA, 8*p2)
	out := d.scratch(scratchB, 4*k)
	// About four values a thread: a short row needs few threads.
	block := dim3{x: uint32(min(lossMaxBlock, max(32, ((n+3)/4+31)&^31))), y: 1, z: 1}
	d.args().addr(out).addr(cand).ptr(x).i32(n).i32(k).i32(p2).i32(slots)
	d.launch(d.loss.topk, dim3{x: 1, y: 1, z: 1}, block, 8*slots)
	h := d.hostScratch(4 * k)
	d.toHost(h, out, 4*k)
	for i, c := range unsafe.Slice((*int32)(h), k) {
		idx[i] = int(c)
	}
	return k
}
