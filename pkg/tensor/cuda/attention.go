package cuda

import (
	"bytes"
	"fmt"
	"math"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The attention group: Attend over the KV caches and the training-time-test
// attention (AttendTTT, AttendTTTBackward), with the kernels of
// kernels/attention.cu. Each op stages its per-call host arguments (the
// sequences' rows, positions and masks, the spans, the per-step tensor
// addresses) in the device's pinned buffer, copies them to the device in one
// copy, and launches blocks of one query row (decode steps, draft
// verification, heads wider than attTileDim) or of a tile of attQT rows (a
// prefill's chains, training sequences) per head or KV group: nothing of size
// [rows × positions] is allocated, and no Go memory is allocated per call.

// The kernels' constants (kernels/attention.cu's ATT_*): the block size, the
// widest head of the kernels but drafter_attend_wide and the widest of that
// one, the positions of one split of a decode-class row's context,
// the most training-time-test steps the backward takes, and the values per
// sequence (int64) and per row (int32) of Attend's tables.
const (
	attThreads  = 128
	attMaxDim   = 256
	attWideDim  = 576
	attChunk    = 256
	attMaxSteps = 64
	attSeqVals  = 8
	attRowVals  = 5
	attQT       = 16
	attBT       = 16
	attTileDim  = 128
)

// attChainRows is the number of new rows from which a chain is
// prefill-class: its rows run in tiles of attQT rows (drafter_attend_prefill,
// which loads each key once per tile instead of once per row), or, for heads
// wider than attTileDim, one block per row over the whole context, instead
// of one block per row and chunk as decode steps and draft verification do.
// Decode-class rows score the same keys bit for bit alike, so a verified
// draft node equals the decode step at its position; a prefill's rows need
// not (the CPU device's prefill path rounds differently too).
const attChainRows = 64

// attentionOps holds the attention group's kernels, looked up once at Open.
type attentionOps struct {
	attend, combine, prefill *kernel
	attendWide               *kernel
	ttt, bwdRows, bwdKeys    *kernel
	tttTiled, bwdRowsTiled   *kernel
	bwdKeysTiled             *kernel
	// tab is Attend's tables in device memory of their own.
	tab attTable
}

// attTable is Attend's per-call tables on the device, in a buffer no other op
// writes, and a host copy of what it holds. The tables do not depend on the
// layer (they hold layer 0's cache addresses and the layers' stride), so the
// layers of one pass upload them once: a call whose staged tables equal the
// last upload skips the copy, and with it the copy's wait for the stream.
type attTable struct {
	dev  uint64
	size int
	last []byte
}

// upload returns the device address of the n staged bytes at host,
// copying them unless the buffer holds them already.
func (t *attTable) upload(d *Device, host unsafe.Pointer, n int) uint64 {
	src := unsafe.Slice((*byte)(host), n)
	if t.dev != 0 && bytes.Equal(t.last, src) {
		return t.dev
	}
	if n > t.size {
		// The arena frees it at Close; growth by half again bounds what
		// the superseded buffers keep.
		size := grown(t.size, n)
		p, err := d.allocBytes(size)
		if err != nil {
			panic(allocError(err, int64(size)).Error() + " (Attend's tables)")
		}
		t.dev, t.size = p, size
	}
	d.toDevice(t.dev, host, n)
	t.last = append(t.last[:0], src...)
	return t.dev
}

func (o *attentionOps) init(d *Device) {
	o.attend = d.fn("drafter_attend")
	o.combine = d.fn("drafter_attend_combine")
	o.attendWide = d.fn("drafter_attend_wide")
	o.prefill = d.fn("drafter_attend_prefill")
	o.ttt = d.fn("drafter_attend_ttt")
	o.bwdRows = d.fn("drafter_attend_ttt_bwd_rows")
	o.bwdKeys = d.fn("drafter_attend_ttt_bwd_keys")
	o.tttTiled = d.fn("drafter_attend_ttt_tiled")
	o.bwdRowsTiled = d.fn("drafter_attend_ttt_bwd_rows_tiled")
	o.bwdKeysTiled = d.fn("drafter_attend_ttt_bwd_keys_tiled")
}

// checkShape panics unless shape is a head layout the kernels take, heads
// of at most maxDim values: attWideDim for Attend, attMaxDim for the
// training-time-test attention (whose kernels hold two values per thread).
func checkShape(op string, shape tensor.AttnShape, maxDim int) {
	if shape.HeadDim <= 0 || shape.HeadDim > maxDim || shape.Heads <= 0 || shape.KVHeads <= 0 || shape.Heads%shape.KVHeads != 0 {
		panic(fmt.Sprintf("cuda: %s: %d heads over %d KV heads of width %d (heads a multiple of KV heads, width 1 to %d)",
			op, shape.Heads, shape.KVHeads, shape.HeadDim, maxDim))
	}
}

// checkF32 panics unless t is a float32 tensor of cols columns.
func checkF32(op, what string, t tensor.Tensor, cols int) {
	if t.DType() != tensor.F32 || t.Cols() != cols {
		panic(fmt.Sprintf("cuda: %s: %s is %dx%d %s, want %d float32 columns", op, what, t.Rows(), t.Cols(), t.DType(), cols))
	}
}

// Attend computes the grouped-query attention of every sequence of a pass
// at layer l (see tensor.Device.Attend). Decode-class rows (trees, chains of
// fewer than attChainRows rows) run one block per row, query head and chunk
// of attChunk positions, and a second kernel merges the chunks when a row's
// context spans several: a row's result depends only on its own query and
// the keys it sees, so a draft-tree node that sees a prefix is scored bit for
// bit as the decode step at its position. Longer chains run in tiles of
// attQT rows. A sliding window gives each row a first visible position
// (tensor.WindowStart, computed here into the row table): its chunks start
// at that position's chunk, so that a long context's rows load only their
// window; a softcap is applied to each score as the kernels compute it.
// Attention sinks (shape.Sinks) join each row's softmax once: in the row's
// block when it has one, else in the merge of its chunks, and per row of a
// prefill tile. Heads wider than attMaxDim (up to attWideDim: DeepSeek-V3's
// 576-wide latent) run drafter_attend_wide, the row kernel's twin with more
// values per thread, for every row: such a head is never tiled.
func (d *Device) Attend(out, q tensor.Tensor, l int, shape tensor.AttnShape, seqs []tensor.AttnSeq) {
	const op = "Attend"
	checkShape(op, shape, attWideDim)
	tensor.CheckAttnShape(op, shape)
	qd, kvd := shape.Heads*shape.HeadDim, shape.KVHeads*shape.HeadDim
	checkF32(op, "q", q, qd)
	checkF32(op, "out", out, qd)
	rows, tiles, maskBytes := 0, 0, 0
	for b := range seqs {
		s := &seqs[b]
		if s.KV == nil || s.KV.KVDim() != kvd {
			panic(fmt.Sprintf("cuda: Attend: sequence %d's cache does not hold %d key values per position", b, kvd))
		}
		w := s.P + s.T
		if s.T < 0 || s.N < 0 || s.P < 0 || s.Row0 < 0 || s.N+w > s.KV.Cap() || s.Row0+s.T > min(q.Rows(), out.Rows()) {
			panic(fmt.Sprintf("cuda: Attend: sequence %d (rows %d+%d, %d committed and %d pending positions) outside a cache of %d or %d rows",
				b, s.Row0, s.T, s.N, s.P, s.KV.Cap(), min(q.Rows(), out.Rows())))
		}
		if s.Mask != nil {
			if len(s.Mask) != s.T*w {
				panic(fmt.Sprintf("cuda: Attend: sequence %d's mask has %d values, want %d·%d", b, len(s.Mask), s.T, w))
			}
			maskBytes += len(s.Mask)
		}
		if tiled(shape, s) {
			tiles += (s.T + attQT - 1) / attQT
		} else {
			rows += s.T
		}
	}
	if rows+tiles == 0 {
		return
	}
	var sinks uint64 // the heads' sink logits, 0 when off
	if !shape.Sinks.Empty() {
		sinks = tensor.DeviceAddr(shape.Sinks)
	}

	// Stage the tables: the sequences (attSeqVals int64 each), the rows
	// (attRowVals int32 each: sequence, index, limit, first partial record
	// or -1, first visible position), the prefill tiles (two int32 each:
	// sequence, first row), then the masks as bytes.
	seqOff, rowOff := 0, 8*attSeqVals*len(seqs)
	tileOff := rowOff + 4*attRowVals*rows
	maskOff := tileOff + 8*tiles
	total := maskOff + max(maskBytes, 1)
	host := d.hostScratch(total)
	tab := unsafe.Slice((*int64)(host), attSeqVals*len(seqs))
	rtab := unsafe.Slice((*int32)(unsafe.Add(host, rowOff)), attRowVals*rows)
	ttab := unsafe.Slice((*int32)(unsafe.Add(host, tileOff)), 2*tiles)
	mtab := unsafe.Slice((*byte)(unsafe.Add(host, maskOff)), max(maskBytes, 1))
	vec := shape.HeadDim%4 == 0 && aligned16(tensor.DeviceAddr(q))
	r, m, tl, records, chunks := 0, 0, 0, 0, 1
	// In a graph pass the launch must not depend on the contexts' lengths,
	// which change from step to step: every row gets room for the most
	// chunks its cache's capacity allows (graphChunks; a row with fewer
	// has its blocks beyond them return at once) and the combine runs
	// whenever rows do (rows of one chunk return at once). Where a row's
	// records lie changes no bit of its result.
	gr := d.graphing()
	graphChunks := 0
	if gr != nil {
		for b := range seqs {
			graphChunks = max(graphChunks, (seqs[b].KV.Cap()-1)/attChunk+1)
		}
	}
	for b := range seqs {
		s := &seqs[b]
		k, v, stride := d.kvLayers(s.KV, l)
		vec = vec && aligned16(k+uint64(l)*stride) && aligned16(v+uint64(l)*stride)
		w := s.P + s.T
		moff := int64(-1)
		if s.Mask != nil {
			moff = int64(m)
			for _, ok := range s.Mask {
				mtab[m] = 0
				if ok {
					mtab[m] = 1
				}
				m++
			}
		}
		t := tab[b*attSeqVals : (b+1)*attSeqVals]
		t[0], t[1] = int64(k), int64(v)
		t[2], t[3], t[4] = int64(s.N), int64(s.P), int64(s.T)
		t[5], t[6], t[7] = moff, int64(s.Row0), int64(stride)
		if tiled(shape, s) {
			for i0 := 0; i0 < s.T; i0 += attQT {
				ttab[2*tl], ttab[2*tl+1] = int32(b), int32(i0)
				tl++
			}
			continue
		}
		decodeClass := s.Mask != nil || s.T < attChainRows
		for i := 0; i < s.T; i++ {
			// A chain row sees up to its own position; a tree row up to
			// its last ancestor (the positions after it are masked
			// anyway: skipping them changes no bit of the result).
			limit := s.N + s.P + i + 1
			var mk []bool
			if s.Mask != nil {
				mk = s.Mask[i*w : (i+1)*w]
				limit = s.N
				for c, ok := range mk {
					if ok {
						limit = s.N + c + 1
					}
				}
			}
			lo := 0
			if shape.Window > 0 {
				lo = tensor.WindowStart(mk, s.N, limit-1, shape.Window)
			}
			part := -1
			if n := (limit-1)/attChunk - lo/attChunk + 1; decodeClass && n > 1 {
				part = records
				records += n
				chunks = max(chunks, n)
				if gr != nil {
					part = r * graphChunks
				}
			}
			rt := rtab[r*attRowVals : (r+1)*attRowVals]
			rt[0], rt[1], rt[2], rt[3], rt[4] = int32(b), int32(i), int32(limit), int32(part), int32(lo)
			r++
		}
	}
	var dev uint64
	if gr != nil {
		dev = gr.stage(host, total)
		if rows > 0 {
			chunks, records = graphChunks, rows*graphChunks
		}
	} else {
		dev = d.att.tab.upload(d, host, total)
	}

	var part uint64
	if records > 0 {
		part = d.scratch(scratchA, 4*records*shape.Heads*(shape.HeadDim+2))
	}
	a := d.args()
	a.ptr(out).ptr(q).addr(dev + uint64(rowOff)).addr(dev + uint64(seqOff)).addr(dev + uint64(maskOff)).addr(part)
	a.i32(l).i32(shape.Heads).i32(shape.KVHeads).i32(shape.HeadDim).i32(b2i(vec)).f32(shape.Softcap).addr(sinks)
	rowKernel := d.att.attend
	if shape.HeadDim > attMaxDim {
		rowKernel = d.att.attendWide
	}
	d.launch(rowKernel, dim3{uint32(rows), uint32(shape.Heads), uint32(chunks)}, dim3{attThreads, 1, 1}, 0)
	if tiles > 0 {
		a := d.args()
		a.ptr(out).ptr(q).addr(dev + uint64(tileOff)).addr(dev + uint64(seqOff))
		a.i32(l).i32(shape.Heads).i32(shape.KVHeads).i32(shape.HeadDim).i32(shape.Window).f32(shape.Softcap).addr(sinks)
		d.launch(d.att.prefill, dim3{uint32(tiles), uint32(shape.Heads), 1}, dim3{attThreads, 1, 1}, 0)
	}
	if records > 0 {
		a := d.args()
		a.ptr(out).addr(dev + uint64(rowOff)).addr(dev + uint64(seqOff)).addr(part)
		a.i32(shape.Heads).i32(shape.HeadDim).addr(sinks)
		d.launch(d.att.combine, dim3{uint32(rows), uint32(shape.Heads), 1}, dim3{attThreads, 1, 1}, 0)
	}
}

// kvLayers returns layer 0's key and value addresses of kv and the bytes
// from one layer to the next, so that layer l's are k + l·stride and v +
// l·stride (checked against kvLayer; a layout where that does not hold gets
// layer l's own addresses and stride 0).
func (d *Device) kvLayers(kv *tensor.KV, l int) (k, v, stride uint64) {
	kl, vl := d.kvLayer(kv, l)
	if l == 0 {
		if d.kvOf(kv).layers < 2 {
			return kl, vl, 0
		}
		k1, v1 := d.kvLayer(kv, 1)
		if v1-vl != k1-kl {
			return kl, vl, 0
		}
		return kl, vl, k1 - kl
	}
	k0, v0 := d.kvLayer(kv, 0)
	stride = (kl - k0) / uint64(l)
	if k0+uint64(l)*stride != kl || v0+uint64(l)*stride != vl {
		return kl, vl, 0
	}
	return k0, v0, stride
}

// tiled reports whether sequence s of an Attend call runs through
// drafter_attend_prefill, attQT rows per block: a prefill-class chain
// (attChainRows) of heads the kernel's shared tiles hold.
func tiled(shape tensor.AttnShape, s *tensor.AttnSeq) bool {
	return s.Mask == nil && s.T >= attChainRows && shape.HeadDim <= attTileDim
}

// aligned16 reports whether the device address p allows the kernels' 16-byte
// vector loads.
func aligned16(p uint64) bool { return p%16 == 0 }

// checkTTT panics unless the arguments of a training-time-test attention
// call agree (as the CPU device's check does) and returns the rows the spans
// cover.
func checkTTT(op string, out, lse, q tensor.Tensor, keys, vals []tensor.Tensor, shape tensor.AttnShape, seqs []tensor.Span) int {
	checkShape(op, shape, attMaxDim)
	if shape.Softcap != 0 || shape.Window != 0 || !shape.Sinks.Empty() {
		panic(fmt.Sprintf("cuda: %s: softcap %v, window %d and sinks %v: the training-time-test attention takes none", op, shape.Softcap, shape.Window, !shape.Sinks.Empty()))
	}
	qd, kvd := shape.Heads*shape.HeadDim, shape.KVHeads*shape.HeadDim
	if len(keys) == 0 || len(vals) != len(keys) {
		panic(fmt.Sprintf("cuda: %s: %d key and %d value tensors (want the same number, at least one)", op, len(keys), len(vals)))
	}
	checkF32(op, "out", out, qd)
	checkF32(op, "q", q, qd)
	checkF32(op, "lse", lse, shape.Heads)
	rows := min(out.Rows(), q.Rows(), lse.Rows())
	for m := range keys {
		checkF32(op, fmt.Sprintf("step %d's keys", m), keys[m], kvd)
		checkF32(op, fmt.Sprintf("step %d's values", m), vals[m], kvd)
		rows = min(rows, keys[m].Rows(), vals[m].Rows())
	}
	n := 0
	for _, sp := range seqs {
		if sp.Start < 0 || sp.N < 0 || sp.Start+sp.N > rows {
			panic(fmt.Sprintf("cuda: %s: sequence rows [%d, %d) outside %d rows", op, sp.Start, sp.Start+sp.N, rows))
		}
		n += sp.N
	}
	return n
}

// tttScale is the scores' scale 1/√HeadDim rounded to float32 once, as the
// CPU device (and the EAGLE-3 layer) computes it.
func tttScale(hd int) float32 { return float32(1 / math.Sqrt(float64(hd))) }

// stageTTT stages a training-time-test call's arguments in the pinned
// buffer and copies them to scratch: the addresses of each list of tensors
// (keys, vals, and for the backward dkeys, dvals), then three int32 per work
// item. With tile 0 an item is a covered row (the row, its sequence's first
// row and end: the row kernels'); else a tile of that many rows of one
// sequence (the sequence's first row, its length, the tile's first row
// within it: the tiled kernels'). It returns the device addresses of the
// address table and of the items, and how many items there are.
func (d *Device) stageTTT(rows, tile int, seqs []tensor.Span, lists ...[]tensor.Tensor) (steps, items uint64, n int) {
	naddr := 0
	for _, l := range lists {
		naddr += len(l)
	}
	n = rows
	if tile > 0 {
		n = 0
		for _, sp := range seqs {
			n += (sp.N + tile - 1) / tile
		}
	}
	itemOff := 8 * naddr
	total := itemOff + 12*n
	host := d.hostScratch(total)
	at := unsafe.Slice((*uint64)(host), naddr)
	i := 0
	for _, l := range lists {
		for _, t := range l {
			at[i] = tensor.DeviceAddr(t)
			i++
		}
	}
	it := unsafe.Slice((*int32)(unsafe.Add(host, itemOff)), 3*n)
	i = 0
	for _, sp := range seqs {
		if tile > 0 {
			for i0 := 0; i0 < sp.N; i0 += tile {
				it[i], it[i+1], it[i+2] = int32(sp.Start), int32(sp.N), int32(i0)
				i += 3
			}
			continue
		}
		for r := sp.Start; r < sp.Start+sp.N; r++ {
			it[i], it[i+1], it[i+2] = int32(r), int32(sp.Start), int32(sp.Start+sp.N)
			i += 3
		}
	}
	dev := d.scratch(scratchMask, total)
	d.toDevice(dev, host, total)
	return dev, dev + uint64(itemOff), n
}

// tttVec reports whether the row kernels may load the heads of q and of
// every step's keys and values four values at a time (16-byte aligned rows).
func tttVec(shape tensor.AttnShape, q tensor.Tensor, keys, vals []tensor.Tensor) bool {
	if shape.HeadDim%4 != 0 || !aligned16(tensor.DeviceAddr(q)) {
		return false
	}
	for m := range keys {
		if !aligned16(tensor.DeviceAddr(keys[m])) || !aligned16(tensor.DeviceAddr(vals[m])) {
			return false
		}
	}
	return true
}

// AttendTTT computes step len(keys)-1 of the training-time-test attention
// (see tensor.Device.AttendTTT) with an online softmax over each row's
// sequence keys, then its diagonal keys of the later steps: heads of up to
// attTileDim values in tiles of attQT rows of a sequence per block (each key
// staged in shared memory serves the tile's rows), wider ones one row per
// block.
func (d *Device) AttendTTT(out, lse, q tensor.Tensor, keys, vals []tensor.Tensor, shape tensor.AttnShape, seqs []tensor.Span) {
	rows := checkTTT("AttendTTT", out, lse, q, keys, vals, shape, seqs)
	if rows == 0 {
		return
	}
	k := len(keys) - 1
	scale := tttScale(shape.HeadDim)
	if shape.HeadDim <= attTileDim {
		steps, tiles, n := d.stageTTT(rows, attQT, seqs, keys, vals)
		a := d.args()
		a.ptr(out).ptr(lse).ptr(q).addr(tiles).addr(steps)
		a.i32(shape.Heads).i32(shape.KVHeads).i32(shape.HeadDim).i32(k).f32(scale)
		d.launch(d.att.tttTiled, dim3{uint32(n), uint32(shape.Heads), 1}, dim3{attThreads, 1, 1}, 0)
		return
	}
	steps, rtab, _ := d.stageTTT(rows, 0, seqs, keys, vals)
	vec := tttVec(shape, q, keys, vals)
	a := d.args()
	a.ptr(out).ptr(lse).ptr(q).addr(rtab).addr(steps)
	a.i32(shape.Heads).i32(shape.KVHeads).i32(shape.HeadDim).i32(k).f32(scale).i32(b2i(vec))
	d.launch(d.att.ttt, dim3{uint32(rows), uint32(shape.Heads), 1}, dim3{attThreads, 1, 1}, 0)
}

// AttendTTTBackward accumulates the gradients of AttendTTT (see
// tensor.Device.AttendTTTBackward) in two passes without atomics: one over
// query rows per KV group (the group's heads one after another) adds to dq
// and to the rows' diagonal keys and values of steps 1..k, then one over
// step-0 key rows per KV group adds to dkeys[0] and dvals[0] over the rows
// that see them. The probabilities are recomputed from lse; D = dout·out
// goes from the first pass to the second through scratch. Heads of up to
// attTileDim values run attBT rows (or keys) per block, wider ones one.
func (d *Device) AttendTTTBackward(dq tensor.Tensor, dkeys, dvals []tensor.Tensor, dout, out, lse, q tensor.Tensor, keys, vals []tensor.Tensor, shape tensor.AttnShape, seqs []tensor.Span) {
	const op = "AttendTTTBackward"
	rows := checkTTT(op, out, lse, q, keys, vals, shape, seqs)
	checkTTT(op, dout, lse, dq, dkeys, dvals, shape, seqs)
	if len(dkeys) != len(keys) {
		panic(fmt.Sprintf("cuda: %s: gradients of %d steps for %d steps", op, len(dkeys), len(keys)))
	}
	k := len(keys) - 1
	tiled := shape.HeadDim <= attTileDim
	if !tiled && k > attMaxSteps {
		panic(fmt.Sprintf("cuda: %s: step %d of heads %d wide, at most %d", op, k, shape.HeadDim, attMaxSteps))
	}
	if rows == 0 {
		return
	}
	dD := d.scratch(scratchA, 4*q.Rows()*shape.Heads)
	scale := tttScale(shape.HeadDim)
	if tiled {
		steps, tiles, n := d.stageTTT(rows, attBT, seqs, keys, vals, dkeys, dvals)
		a := d.args()
		a.ptr(dq).addr(dD).ptr(dout).ptr(out).ptr(lse).ptr(q).addr(tiles).addr(steps)
		a.i32(shape.Heads).i32(shape.KVHeads).i32(shape.HeadDim).i32(k).f32(scale)
		d.launch(d.att.bwdRowsTiled, dim3{uint32(n), uint32(shape.KVHeads), 1}, dim3{attThreads, 1, 1}, 0)
		a = d.args()
		a.addr(dD).ptr(dout).ptr(lse).ptr(q).addr(tiles).addr(steps)
		a.i32(shape.Heads).i32(shape.KVHeads).i32(shape.HeadDim).i32(k).f32(scale)
		d.launch(d.att.bwdKeysTiled, dim3{uint32(n), uint32(shape.KVHeads), 1}, dim3{attThreads, 1, 1}, 0)
		return
	}
	steps, rtab, _ := d.stageTTT(rows, 0, seqs, keys, vals, dkeys, dvals)
	vec := tttVec(shape, q, keys, vals) && tttVec(shape, dout, nil, nil)
	a := d.args()
	a.ptr(dq).addr(dD).ptr(dout).ptr(out).ptr(lse).ptr(q).addr(rtab).addr(steps)
	a.i32(shape.Heads).i32(shape.KVHeads).i32(shape.HeadDim).i32(k).f32(scale).i32(b2i(vec))
	d.launch(d.att.bwdRows, dim3{uint32(rows), uint32(shape.KVHeads), 1}, dim3{attThreads, 1, 1}, 0)
	a = d.args()
	a.addr(dD).ptr(dout).ptr(lse).ptr(q).addr(rtab).addr(steps)
	a.i32(shape.Heads).i32(shape.KVHeads).i32(shape.HeadDim).i32(k).f32(scale).i32(b2i(vec))
	d.launch(d.att.bwdKeys, dim3{uint32(rows), uint32(shape.KVHeads), 1}, dim3{attThreads, 1, 1}, 0)
}
