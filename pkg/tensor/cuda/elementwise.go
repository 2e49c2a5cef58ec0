package cuda

import (
	"fmt"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// elementwiseOps are the kernels of kernels/elementwise.cu: gathers, column
// splits, RMSNorm, RoPE, the activations, residual and bias arithmetic, the
// optimizer's reductions and update, and casts. Each op checks shapes on the
// host (a mismatch is the caller's bug: it panics, as the CPU device does)
// and launches its kernels on the device's stream; none allocates. Only
// SumSquares (its result is a host value) and the gathers (their host ids are
// copied with the device's synchronous toDevice) wait for the GPU.
type elementwiseOps struct {
	gatherF32, gatherU16, copyCols        *kernel
	rmsNorm, rmsScales, rmsDX, rmsDW      *kernel
	rope                                  *kernel
	scale, add, addBias, sumRows          *kernel
	swiGLU, swiGLUBack, addSiLU, siLUBack *kernel
	geluGLU, softcap, clampedGLU          *kernel
	ssPartial, sumDoubles, adamW          *kernel
	castF32BF16, castF32F16               *kernel
	castBF16F32, castF16F32               *kernel
	castBF16F16, castF16BF16              *kernel
	addRows                               *kernel
	maxBlocks                             int // the most blocks of an element-wise grid
	// seen[r] == epoch marks row r as met in the AddScaledRows call in
	// flight (distinct): host state grown to the largest dst, so that the
	// check allocates nothing once warm and clears nothing per call.
	seen  []uint32
	epoch uint32
}

// The launch shapes. ewBlock threads run an element-wise grid-stride loop;
// a column-sum block covers 32 columns by colLanes row lanes (the kernels'
// EW_COL_LANES); grid y (rows of a row-tiled kernel) is at most maxGridY,
// CUDA's limit, the kernels striding over the rest.
const (
	ewBlock  = 256
	colLanes = 8
	maxGridY = 65535
)

// init looks the group's kernels up once per device value (Open, Sibling).
func (o *elementwiseOps) init(d *Device) {
	o.gatherF32 = d.fn("drafter_ew_gather_f32")
	o.gatherU16 = d.fn("drafter_ew_gather_u16")
	o.copyCols = d.fn("drafter_ew_copy_cols")
	o.rmsNorm = d.fn("drafter_ew_rmsnorm")
	o.rmsScales = d.fn("drafter_ew_rms_scales")
	o.rmsDX = d.fn("drafter_ew_rmsnorm_backward_dx")
	o.rmsDW = d.fn("drafter_ew_rmsnorm_backward_dw")
	o.rope = d.fn("drafter_ew_rope")
	o.scale = d.fn("drafter_ew_scale")
	o.add = d.fn("drafter_ew_add")
	o.addBias = d.fn("drafter_ew_add_bias")
	o.sumRows = d.fn("drafter_ew_sum_rows")
	o.swiGLU = d.fn("drafter_ew_swiglu")
	o.swiGLUBack = d.fn("drafter_ew_swiglu_backward")
	o.addSiLU = d.fn("drafter_ew_add_silu")
	o.siLUBack = d.fn("drafter_ew_silu_backward")
	o.geluGLU = d.fn("drafter_ew_gelu_glu")
	o.softcap = d.fn("drafter_ew_softcap")
	o.clampedGLU = d.fn("drafter_ew_clamped_swiglu")
	o.ssPartial = d.fn("drafter_ew_sum_squares_partial")
	o.sumDoubles = d.fn("drafter_ew_sum_doubles")
	o.adamW = d.fn("drafter_ew_adamw")
	o.castF32BF16 = d.fn("drafter_ew_cast_f32_bf16")
	o.castF32F16 = d.fn("drafter_ew_cast_f32_f16")
	o.castBF16F32 = d.fn("drafter_ew_cast_bf16_f32")
	o.castF16F32 = d.fn("drafter_ew_cast_f16_f32")
	o.castBF16F16 = d.fn("drafter_ew_cast_bf16_f16")
	o.castF16BF16 = d.fn("drafter_ew_cast_f16_bf16")
	o.addRows = d.fn("drafter_ew_add_scaled_rows")
	// Eight blocks of ewBlock threads fill a multiprocessor (2048 threads);
	// a grid-stride loop covers the rest. The floor keeps a GPU reporting
	// few SMs (the stand-in) launching several blocks.
	o.maxBlocks = max(8*d.sh.info.SMs, 64)
}

// grid1 is an element-wise grid for n values: a block per ewBlock values,
// at most maxBlocks.
func (o *elementwiseOps) grid1(n int) dim3 {
	return dim3{x: uint32(min((n+ewBlock-1)/ewBlock, o.maxBlocks)), y: 1, z: 1}
}

// rowTiled is a grid and block for a kernel that strides over rows in grid y
// and over cols columns in grid x: a block as wide as the row (in warps) up
// to ewBlock threads.
func (o *elementwiseOps) rowTiled(rows, cols int) (grid, block dim3) {
	b := min(ewBlock, (cols+31)&^31)
	gx := min((cols+b-1)/b, o.maxBlocks)
	return dim3{x: uint32(gx), y: uint32(min(rows, maxGridY)), z: 1}, dim3{x: uint32(b), y: 1, z: 1}
}

// rowBlock is the block of a one-block-per-row kernel for rows of n values:
// about four values per thread, one warp to ewBlock threads.
func rowBlock(n int) dim3 {
	return dim3{x: uint32(min(ewBlock, max(32, ((n+3)/4+31)&^31))), y: 1, z: 1}
}

// needF32 panics unless every tensor is float32 (the ops' only dtype but
// Gather's table and Cast's).
func needF32(op string, ts ...tensor.Tensor) {
	for _, t := range ts {
		if !t.Empty() && t.DType() != tensor.F32 {
			panic(fmt.Sprintf("cuda: %s of a %s tensor, want F32", op, t.DType()))
		}
	}
}

// needLen panics unless t holds at least n values.
func needLen(op, what string, t tensor.Tensor, n int) {
	if t.Len() < n {
		panic(fmt.Sprintf("cuda: %s: %s holds %d values, want %d", op, what, t.Len(), n))
	}
}

// Gather writes row ids[i] of table, widened to float32, into row i of out.
// The ids go to the GPU through the pinned buffer and the ids scratch.
func (d *Device) Gather(out tensor.Tensor, table *tensor.Weight, ids []int) {
	o := &d.ew
	t := d.resident(table)
	n, cols := len(ids), t.Cols()
	needF32("Gather", out)
	if out.Cols() != cols || out.Rows() < n {
		panic(fmt.Sprintf("cuda: Gather of %d rows of a %dx%d table into a %dx%d tensor", n, t.Rows(), cols, out.Rows(), out.Cols()))
	}
	if n == 0 || cols == 0 {
		return
	}
	staged := unsafe.Slice((*int32)(d.hostScratch(4*n)), n)
	for i, id := range ids {
		if id < 0 || id >= t.Rows() {
			panic(fmt.Sprintf("cuda: Gather of row %d of a table of %d rows", id, t.Rows()))
		}
		staged[i] = int32(id)
	}
	idp := d.scratch(scratchIDs, 4*n)
	d.toDevice(idp, unsafe.Pointer(&staged[0]), 4*n)
	grid, block := o.rowTiled(n, cols)
	switch t.DType() {
	case tensor.F32:
		d.args().ptr(out).ptr(t).addr(idp).i32(n).i32(cols)
		d.launch(o.gatherF32, grid, block, 0)
	case tensor.BF16, tensor.F16:
		f16 := 0
		if t.DType() == tensor.F16 {
			f16 = 1
		}
		d.args().ptr(out).ptr(t).addr(idp).i32(n).i32(cols).i32(f16)
		d.launch(o.gatherU16, grid, block, 0)
	default:
		panic(fmt.Sprintf("cuda: Gather from a %s table", t.DType()))
	}
}

// GatherRows writes row rows[i] of src into row i of out; the row indices
// are copied to the GPU from the caller's slice.
func (d *Device) GatherRows(out, src tensor.Tensor, rows []int32) {
	o := &d.ew
	n, cols := len(rows), src.Cols()
	needF32("GatherRows", out, src)
	if out.Cols() != cols || out.Rows() < n {
		panic(fmt.Sprintf("cuda: GatherRows of %d rows of a %dx%d tensor into a %dx%d one", n, src.Rows(), cols, out.Rows(), out.Cols()))
	}
	if n == 0 || cols == 0 {
		return
	}
	for _, r := range rows {
		if r < 0 || int(r) >= src.Rows() {
			panic(fmt.Sprintf("cuda: GatherRows of row %d of a tensor of %d rows", r, src.Rows()))
		}
	}
	idp := d.scratch(scratchIDs, 4*n)
	d.toDevice(idp, unsafe.Pointer(&rows[0]), 4*n)
	grid, block := o.rowTiled(n, cols)
	d.args().ptr(out).ptr(src).addr(idp).i32(n).i32(cols)
	d.launch(o.gatherF32, grid, block, 0)
}

// AddScaledRows adds scale[i]·src's row i to dst's row rows[i] for i in
// order, each value as dst + float32(scale·src) (no fma, the CPU's bits).
// The indices and scales go to the GPU in one copy through the pinned
// buffer. With distinct rows the kernel takes the indices in parallel (grid
// y); when a row repeats it runs one block row, each thread taking every
// index in order over its columns, so the repeated row's additions are
// sequential and deterministic.
func (d *Device) AddScaledRows(dst, src tensor.Tensor, rows []int32, scale []float32) {
	o := &d.ew
	tensor.CheckAddScaledRows("AddScaledRows", dst, src, rows, scale)
	n, cols := len(rows), dst.Cols()
	if n == 0 || cols == 0 {
		return
	}
	staged := unsafe.Slice((*int32)(d.hostScratch(8*n)), 2*n)
	copy(staged[:n], rows)
	copy(unsafe.Slice((*float32)(unsafe.Pointer(&staged[n])), n), scale)
	idp := d.scratch(scratchIDs, 8*n)
	d.toDevice(idp, unsafe.Pointer(&staged[0]), 8*n)
	grid, block := o.rowTiled(n, cols)
	if !o.distinct(rows, dst.Rows()) {
		grid.y = 1
	}
	d.args().ptr(dst).ptr(src).addr(idp).addr(idp + uint64(4*n)).i32(n).i32(cols)
	d.launch(o.addRows, grid, block, 0)
}

// distinct reports whether no index of rows (each below r) repeats: at once
// when they increase (a router's rows usually do), else by marking each in
// o.seen under a new epoch.
func (o *elementwiseOps) distinct(rows []int32, r int) bool {
	inc := true
	for i := 1; i < len(rows); i++ {
		if rows[i] <= rows[i-1] {
			inc = false
			break
		}
	}
	if inc {
		return true
	}
	if len(o.seen) < r {
		o.seen, o.epoch = make([]uint32, r), 0
	}
	o.epoch++
	if o.epoch == 0 { // wrapped: stale marks could read as this call's
		clear(o.seen)
		o.epoch = 1
	}
	for _, x := range rows {
		if o.seen[x] == o.epoch {
			return false
		}
		o.seen[x] = o.epoch
	}
	return true
}

// copyCols copies rows rows of cols columns from src (leading dimension
// lds) to dst (leading dimension ldd), the addresses pointing at the
// blocks' first values.
func (d *Device) copyCols(dst uint64, ldd int, src uint64, lds, rows, cols int) {
	if rows == 0 || cols == 0 {
		return
	}
	o := &d.ew
	grid, block := o.rowTiled(rows, cols)
	d.args().addr(dst).i32(ldd).addr(src).i32(lds).i32(rows).i32(cols)
	d.launch(o.copyCols, grid, block, 0)
}

// SplitCols copies src's consecutive column blocks into the dsts, one
// launch per part.
func (d *Device) SplitCols(src tensor.Tensor, dsts []tensor.Tensor) {
	needF32("SplitCols", src)
	rows, w, off := src.Rows(), src.Cols(), 0
	for _, t := range dsts {
		needF32("SplitCols", t)
		if t.Cols() > 0 && t.Rows() < rows || off+t.Cols() > w {
			panic(fmt.Sprintf("cuda: SplitCols of a %dx%d tensor into a %dx%d part at column %d", rows, w, t.Rows(), t.Cols(), off))
		}
		d.copyCols(tensor.DeviceAddr(t), t.Cols(), tensor.DeviceAddr(src)+uint64(4*off), w, rows, t.Cols())
		off += t.Cols()
	}
}

// ConcatCols writes the srcs side by side into dst's rows, one launch per
// part.
func (d *Device) ConcatCols(dst tensor.Tensor, srcs []tensor.Tensor) {
	needF32("ConcatCols", dst)
	rows, w, off := dst.Rows(), dst.Cols(), 0
	for _, t := range srcs {
		needF32("ConcatCols", t)
		if t.Cols() > 0 && t.Rows() < rows || off+t.Cols() > w {
			panic(fmt.Sprintf("cuda: ConcatCols of a %dx%d part at column %d into a %dx%d tensor", t.Rows(), t.Cols(), off, rows, w))
		}
		d.copyCols(tensor.DeviceAddr(dst)+uint64(4*off), w, tensor.DeviceAddr(t), t.Cols(), rows, t.Cols())
		off += t.Cols()
	}
}

// RMSNorm normalises x's rows into out's, one block per row (the mean of
// squares in float64); out may be x.
func (d *Device) RMSNorm(out, x, w tensor.Tensor, eps float32) {
	o := &d.ew
	needF32("RMSNorm", out, x, w)
	rows, n := x.Rows(), x.Cols()
	needLen("RMSNorm", "w", w, n)
	needLen("RMSNorm", "out", out, rows*n)
	if rows == 0 || n == 0 {
		return
	}
	d.args().ptr(out).ptr(x).ptr(w).i32(n).f32(eps)
	d.launch(o.rmsNorm, dim3{x: uint32(rows), y: 1, z: 1}, rowBlock(n), 0)
}

// RMSNormBackward accumulates RMSNorm's gradients: each row's scale into
// scratch first (one block per row, as the forward computes it), then dx
// (one block per row, in float64) and dw (column sums over the rows).
func (d *Device) RMSNormBackward(dx, dw, dout, x, w tensor.Tensor, eps float32) {
	o := &d.ew
	needF32("RMSNormBackward", dx, dw, dout, x, w)
	rows, n := x.Rows(), x.Cols()
	needLen("RMSNormBackward", "dout", dout, rows*n)
	if !dx.Empty() {
		needLen("RMSNormBackward", "dx", dx, rows*n)
		needLen("RMSNormBackward", "w", w, n)
	}
	if !dw.Empty() {
		needLen("RMSNormBackward", "dw", dw, n)
	}
	if rows == 0 || n == 0 || dx.Empty() && dw.Empty() {
		return
	}
	rs := d.scratch(scratchA, 4*rows)
	grid, block := dim3{x: uint32(rows), y: 1, z: 1}, rowBlock(n)
	d.args().addr(rs).ptr(x).i32(n).f32(eps)
	d.launch(o.rmsScales, grid, block, 0)
	if !dx.Empty() {
		d.args().ptr(dx).ptr(dout).ptr(x).ptr(w).addr(rs).i32(n)
		d.launch(o.rmsDX, grid, block, 0)
	}
	if !dw.Empty() {
		d.args().ptr(dw).ptr(dout).ptr(x).addr(rs).i32(rows).i32(n)
		d.launch(o.rmsDW, dim3{x: uint32((n + 31) / 32), y: 1, z: 1}, dim3{x: 32 * colLanes, y: 1, z: 1}, 0)
	}
}

// RoPE rotates x's heads in place by the angles of the positions pos.
func (d *Device) RoPE(x tensor.Tensor, heads int, pos tensor.Tensor, r *tensor.Rotary) {
	d.rotate("RoPE", x, heads, pos, r, 1)
}

// RoPEBackward rotates x's heads in place by the opposite angles.
func (d *Device) RoPEBackward(x tensor.Tensor, heads int, pos tensor.Tensor, r *tensor.Rotary) {
	d.rotate("RoPEBackward", x, heads, pos, r, -1)
}

// rotate is RoPE with sign +1 and its transpose with sign -1: one thread per
// pair of rotated values (the first RotDims() of each head), the tables'
// angles below MaxPos, computed ones past it, both times the rotary's
// attention factor.
func (d *Device) rotate(op string, x tensor.Tensor, heads int, pos tensor.Tensor, r *tensor.Rotary, sign float32) {
	o := &d.ew
	needF32(op, x, r.Cos, r.Sin, r.InvFreq)
	r.Check(op)
	half := r.RotDims() / 2
	rows := x.Rows()
	if x.Cols() != heads*r.HeadDim || pos.DType() != tensor.I32 || pos.Len() < rows {
		panic(fmt.Sprintf("cuda: %s of a %dx%d tensor of %d heads of %d, %d positions (%s), tables of %d positions",
			op, rows, x.Cols(), heads, r.HeadDim, pos.Len(), pos.DType(), r.MaxPos))
	}
	if rows == 0 || heads*half == 0 {
		return
	}
	grid, block := o.rowTiled(rows, heads*half)
	d.args().ptr(x).ptr(pos).ptr(r.Cos).ptr(r.Sin).ptr(r.InvFreq).i32(rows).i32(heads).i32(r.HeadDim).i32(half).i32(r.MaxPos).f32(r.Factor()).f32(sign)
	d.launch(o.rope, grid, block, 0)
}

// Scale multiplies x by s in place.
func (d *Device) Scale(x tensor.Tensor, s float32) {
	needF32("Scale", x)
	if n := x.Len(); n > 0 {
		o := &d.ew
		d.args().ptr(x).u64(uint64(n)).f32(s)
		d.launch(o.scale, o.grid1(n), dim3{x: ewBlock, y: 1, z: 1}, 0)
	}
}

// AddBias adds the row b to every row of x (x's values taken b.Len() at a
// time, as the CPU device does).
func (d *Device) AddBias(x, b tensor.Tensor) {
	needF32("AddBias", x, b)
	cols := b.Len()
	if cols == 0 || x.Len() < cols {
		return
	}
	o := &d.ew
	rows := x.Len() / cols
	grid, block := o.rowTiled(rows, cols)
	d.args().ptr(x).ptr(b).i32(rows).i32(cols)
	d.launch(o.addBias, grid, block, 0)
}

// SwiGLU computes out = silu(gate)·up; with up empty, gate holds each row's
// gate and up side by side ([rows, 2·I]). A fused call must not write over
// its input (out beside gate): the rows run in parallel, unlike the CPU's.
func (d *Device) SwiGLU(out, gate, up tensor.Tensor) {
	d.glu("SwiGLU", d.ew.swiGLU, out, gate, up, false, 0, 0)
}

// GELUTanhGLU computes out = gelu_tanh(gate)·up with SwiGLU's layouts and
// its rule on fused calls (see tensor.Device.GELUTanhGLU).
func (d *Device) GELUTanhGLU(out, gate, up tensor.Tensor) {
	d.glu("GELUTanhGLU", d.ew.geluGLU, out, gate, up, false, 0, 0)
}

// ClampedSwiGLU computes gpt-oss's clamped activation (see
// tensor.Device.ClampedSwiGLU) with SwiGLU's layouts and its rule on fused
// calls, in the CPU device's arithmetic (drafter_ew_clamped_swiglu).
func (d *Device) ClampedSwiGLU(out, gate, up tensor.Tensor, alpha, limit float32) {
	d.glu("ClampedSwiGLU", d.ew.clampedGLU, out, gate, up, true, alpha, limit)
}

// glu launches the gated activation k (drafter_ew_swiglu's arguments, then
// alpha and limit when consts) of out, gate and up, fused when up is empty.
func (d *Device) glu(op string, k *kernel, out, gate, up tensor.Tensor, consts bool, alpha, limit float32) {
	o := &d.ew
	needF32(op, out, gate, up)
	rows, cols := out.Rows(), out.Cols()
	if out.Empty() {
		return
	}
	var ga, ua uint64
	var ldg, ldu int
	if up.Empty() {
		needLen(op, "the fused gate", gate, 2*rows*cols)
		ga, ua, ldg, ldu = tensor.DeviceAddr(gate), tensor.DeviceAddr(gate)+uint64(4*cols), 2*cols, 2*cols
		oa := tensor.DeviceAddr(out)
		if oa < ga+uint64(8*rows*cols) && ga < oa+uint64(4*rows*cols) {
			panic("cuda: " + op + " of a fused gate into memory that overlaps it")
		}
	} else {
		needLen(op, "gate", gate, rows*cols)
		needLen(op, "up", up, rows*cols)
		ga, ua, ldg, ldu = tensor.DeviceAddr(gate), tensor.DeviceAddr(up), cols, cols
	}
	grid, block := o.rowTiled(rows, cols)
	a := d.args().ptr(out).addr(ga).addr(ua).i32(rows).i32(cols).i32(ldg).i32(ldu)
	if consts {
		a.f32(alpha).f32(limit)
	}
	d.launch(k, grid, block, 0)
}

// Softcap replaces x by c·tanh(x/c) in place (see tensor.Device.Softcap).
func (d *Device) Softcap(x tensor.Tensor, c float32) {
	needF32("Softcap", x)
	if !(c > 0) {
		panic(fmt.Sprintf("cuda: Softcap by %v, want a positive cap", c))
	}
	if n := x.Len(); n > 0 {
		o := &d.ew
		d.args().ptr(x).u64(uint64(n)).f32(c)
		d.launch(o.softcap, o.grid1(n), dim3{x: ewBlock, y: 1, z: 1}, 0)
	}
}

// SwiGLUBackward accumulates SwiGLU's gradients into dgate and dup (either
// empty when not needed).
func (d *Device) SwiGLUBackward(dgate, dup, dout, gate, up tensor.Tensor) {
	o := &d.ew
	needF32("SwiGLUBackward", dgate, dup, dout, gate, up)
	n := gate.Len()
	needLen("SwiGLUBackward", "dout", dout, n)
	if !dgate.Empty() {
		needLen("SwiGLUBackward", "dgate", dgate, n)
		needLen("SwiGLUBackward", "up", up, n)
	}
	if !dup.Empty() {
		needLen("SwiGLUBackward", "dup", dup, n)
	}
	if n == 0 || dgate.Empty() && dup.Empty() {
		return
	}
	d.args().ptr(dgate).ptr(dup).ptr(dout).ptr(gate).ptr(up).u64(uint64(n))
	d.launch(o.swiGLUBack, o.grid1(n), dim3{x: ewBlock, y: 1, z: 1}, 0)
}

// AddSiLU adds silu(z) to out element-wise.
func (d *Device) AddSiLU(out, z tensor.Tensor) {
	o := &d.ew
	needF32("AddSiLU", out, z)
	n := z.Len()
	needLen("AddSiLU", "out", out, n)
	if n > 0 {
		d.args().ptr(out).ptr(z).u64(uint64(n))
		d.launch(o.addSiLU, o.grid1(n), dim3{x: ewBlock, y: 1, z: 1}, 0)
	}
}

// SiLUBackward accumulates dout·silu'(z) into dz.
func (d *Device) SiLUBackward(dz, dout, z tensor.Tensor) {
	o := &d.ew
	needF32("SiLUBackward", dz, dout, z)
	n := z.Len()
	needLen("SiLUBackward", "dz", dz, n)
	needLen("SiLUBackward", "dout", dout, n)
	if n > 0 {
		d.args().ptr(dz).ptr(dout).ptr(z).u64(uint64(n))
		d.launch(o.siLUBack, o.grid1(n), dim3{x: ewBlock, y: 1, z: 1}, 0)
	}
}

// Add adds src to dst element-wise (dst's length of values).
func (d *Device) Add(dst, src tensor.Tensor) {
	o := &d.ew
	needF32("Add", dst, src)
	n := dst.Len()
	needLen("Add", "src", src, n)
	if n > 0 {
		d.args().ptr(dst).ptr(src).u64(uint64(n))
		d.launch(o.add, o.grid1(n), dim3{x: ewBlock, y: 1, z: 1}, 0)
	}
}

// SumRows adds the sum of x's rows to the one-row dst: 32 columns per
// block, the rows split over its warps and summed in float32.
func (d *Device) SumRows(dst, x tensor.Tensor) {
	o := &d.ew
	needF32("SumRows", dst, x)
	rows, cols := x.Rows(), x.Cols()
	needLen("SumRows", "dst", dst, cols)
	if rows == 0 || cols == 0 {
		return
	}
	d.args().ptr(dst).ptr(x).i32(rows).i32(cols)
	d.launch(o.sumRows, dim3{x: uint32((cols + 31) / 32), y: 1, z: 1}, dim3{x: 32 * colLanes, y: 1, z: 1}, 0)
}

// SumSquares returns the sum of x's squares in float64: a partial sum per
// block (the grid fixed by x's length, so the result is the same every
// call), their sum by one block, and that one value copied back.
func (d *Device) SumSquares(x tensor.Tensor) float64 {
	o := &d.ew
	needF32("SumSquares", x)
	n := x.Len()
	if n == 0 {
		return 0
	}
	grid := o.grid1(n)
	buf := d.scratch(scratchA, 8*(1+int(grid.x)))
	d.args().addr(buf + 8).ptr(x).u64(uint64(n))
	d.launch(o.ssPartial, grid, dim3{x: ewBlock, y: 1, z: 1}, 0)
	d.args().addr(buf).addr(buf + 8).i32(int(grid.x))
	d.launch(o.sumDoubles, dim3{x: 1, y: 1, z: 1}, dim3{x: ewBlock, y: 1, z: 1}, 0)
	h := d.hostScratch(8)
	d.toHost(h, buf, 8)
	return *(*float64)(h)
}

// AdamW applies one AdamW step to p, m and v in place.
func (d *Device) AdamW(p, g, m, v tensor.Tensor, s tensor.AdamWStep) {
	o := &d.ew
	needF32("AdamW", p, g, m, v)
	n := p.Len()
	if g.Len() != n || m.Len() != n || v.Len() != n {
		panic(fmt.Sprintf("cuda: AdamW of %d values with %d gradients and %d/%d moments", n, g.Len(), m.Len(), v.Len()))
	}
	if n == 0 {
		return
	}
	d.args().ptr(p).ptr(g).ptr(m).ptr(v).u64(uint64(n)).
		f32(s.Decay).f32(s.Beta1).f32(s.Beta2).f32(s.OneMinusBeta1).f32(s.OneMinusBeta2).f32(s.StepSize).f32(s.SqrtBC2).f32(s.Eps)
	d.launch(o.adamW, o.grid1(n), dim3{x: ewBlock, y: 1, z: 1}, 0)
}

// Cast writes src's values into dst in dst's dtype (F32, BF16 or F16):
// within a dtype a copy, else one kernel that widens exactly or rounds to
// the nearest, ties to even.
func (d *Device) Cast(dst, src tensor.Tensor) {
	o := &d.ew
	n := src.Len()
	if dst.Len() != n {
		panic(fmt.Sprintf("cuda: Cast of %d values into %d", n, dst.Len()))
	}
	var k *kernel
	switch sd, dd := src.DType(), dst.DType(); {
	case !isFloat(sd) || !isFloat(dd):
		panic(fmt.Sprintf("cuda: Cast from %s to %s: only between F32, BF16 and F16", sd, dd))
	case sd == dd:
		d.Copy(dst, src)
		return
	case sd == tensor.F32 && dd == tensor.BF16:
		k = o.castF32BF16
	case sd == tensor.F32 && dd == tensor.F16:
		k = o.castF32F16
	case sd == tensor.BF16 && dd == tensor.F32:
		k = o.castBF16F32
	case sd == tensor.F16 && dd == tensor.F32:
		k = o.castF16F32
	case sd == tensor.BF16:
		k = o.castBF16F16
	default:
		k = o.castF16BF16
	}
	if n > 0 {
		d.args().ptr(dst).ptr(src).u64(uint64(n))
		d.launch(k, o.grid1(n), dim3{x: ewBlock, y: 1, z: 1}, 0)
	}
}

// isFloat reports whether dt is one of the float dtypes Cast converts
// between.
func isFloat(dt tensor.DType) bool { return dt == tensor.F32 || dt == tensor.BF16 || dt == tensor.F16 }
