package cuda

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// coreOps are the kernels of kernels/core.cu: the few-row product, the
// input cast for 16-bit GEMMs, the widening of MXFP4 weights and the KV
// cache's position move.
type coreOps struct {
	few      [3]*kernel // by the weight's dtype: F32, BF16, F16
	fewMXFP4 *kernel
	cast     [3]*kernel // float32 to BF16, F16 (index by dtype)
	mxfp4F32 *kernel    // an MXFP4 panel widened to float32
	kvMove   *kernel
	kvWrite  *kernel
}

func (o *coreOps) init(d *Device) {
	o.few[tensor.F32] = d.fn("drafter_core_mult_few_f32")
	o.few[tensor.BF16] = d.fn("drafter_core_mult_few_bf16")
	o.few[tensor.F16] = d.fn("drafter_core_mult_few_f16")
	o.fewMXFP4 = d.fn("drafter_core_mult_few_mxfp4")
	o.mxfp4F32 = d.fn("drafter_core_mxfp4_f32")
	o.cast[tensor.BF16] = d.fn("drafter_core_round_bf16")
	o.cast[tensor.F16] = d.fn("drafter_core_round_f16")
	o.kvMove = d.fn("drafter_core_kv_move")
	o.kvWrite = d.fn("drafter_core_kv_write")
}

// The cuBLAS data types (cudaDataType_t).
const (
	cudaR32F  = 0
	cudaR16F  = 2
	cudaR16BF = 14
)

// blasType returns the cuBLAS data type of a float dtype.
func blasType(dt tensor.DType) int {
	switch dt {
	case tensor.F32:
		return cudaR32F
	case tensor.BF16:
		return cudaR16BF
	case tensor.F16:
		return cudaR16F
	}
	panic(fmt.Sprintf("cuda: no cuBLAS type for dtype %s", dt))
}

// The few-row kernel's tiling: a block of fewWarps warps computes fewWarps
// output columns, each warp one column for fewTile rows (its weight row read
// once for them). A row's value is the same dot product (the same lanes, the
// same order of sums) whatever the tile around it.
const (
	fewWarps = 8
	fewTile  = 8
)

// PrepareWeights uploads each weight's matrix once, in its dtype (bf16
// weights stay bf16 on the GPU), and records it as the weight's resident
// copy. Running out of GPU memory panics: the interface has no error, and a
// model that does not fit cannot run.
func (d *Device) PrepareWeights(ws ...*tensor.Weight) {
	for _, w := range ws {
		d.resident(w)
	}
}

// resident returns the GPU's copy of w, uploading it on first use (a weight
// that PrepareWeights has not seen). A copy another device recorded (a
// device closed since, another GPU) is not this device's memory: the weight
// is uploaded again.
func (d *Device) resident(w *tensor.Weight) tensor.Tensor {
	sh := d.sh
	t, ok := w.Resident()
	if ok {
		sh.mu.Lock()
		_, mine := sh.weights[w]
		sh.mu.Unlock()
		if mine {
			return t
		}
	}
	m := w.Matrix()
	if m.Empty() {
		return tensor.Tensor{}
	}
	t, err := d.Upload(m)
	if err != nil {
		panic(fmt.Sprintf("cuda: uploading a %dx%d %s weight: %v", m.Rows, m.Cols, m.DType, err))
	}
	sh.mu.Lock()
	sh.weights[w] = struct{}{}
	sh.mu.Unlock()
	w.SetResident(t)
	return t
}

// RoundsInputs reports whether MulT rounds x to the weight's dtype: 16-bit
// weights above FewRows rows, whose cublasGemmEx takes both operands in
// the weight's dtype (tensor cores, float32 accumulation). Up to FewRows rows
// the few-row kernel widens the weights instead and keeps x in float32, as
// every product over MXFP4 weights does (widened to float32 first).
func (d *Device) RoundsInputs(dt tensor.DType, rows int) bool {
	return (dt == tensor.BF16 || dt == tensor.F16) && rows > tensor.FewRows
}

// MulT computes out[rows, n] (+)= x[rows, k]·Wᵀ. Up to FewRows rows it runs
// the few-row kernel (row-independent: each output one warp's dot product
// in float32); above, cublasGemmEx with the weight in its dtype (x cast to
// it first for 16-bit weights, see RoundsInputs), or for an MXFP4 weight
// float32 cublasGemmEx over panels of it widened into scratch (mulMXFP4).
func (d *Device) MulT(out, x tensor.Tensor, w *tensor.Weight, acc bool) {
	m := w.Matrix()
	n, k := m.Rows, m.Cols
	rows := x.Rows()
	if x.Cols() != k || out.Cols() != n || out.Rows() < rows || x.DType() != tensor.F32 || out.DType() != tensor.F32 {
		panic(fmt.Sprintf("cuda: MulT of %dx%d %s by a %dx%d %s weight into %dx%d %s",
			x.Rows(), x.Cols(), x.DType(), n, k, m.DType, out.Rows(), out.Cols(), out.DType()))
	}
	if rows == 0 || n == 0 {
		return
	}
	wt := d.resident(w)
	if rows <= tensor.FewRows {
		d.fewRows(out, x, wt, rows, acc)
		return
	}
	if k == 0 {
		if !acc {
			d.Zero(out.RowRange(0, rows))
		}
		return
	}
	var beta float32
	if acc {
		beta = 1
	}
	if m.DType == tensor.MXFP4 {
		d.mulMXFP4(out, x, wt, rows, beta)
		return
	}
	b, btype := tensor.DeviceAddr(x), cudaR32F
	if dt := m.DType; dt != tensor.F32 {
		b = d.castInput(dt, x)
		btype = blasType(dt)
	}
	// Row-major out [rows, n] is column-major outᵀ [n, rows] = W·xᵀ: W
	// row-major [n, k] is column-major [k, n], transposed; x row-major
	// [rows, k] is column-major xᵀ [k, rows] as it is.
	d.check("MulT", d.sh.drv.gemm(true, false, n, rows, k, 1,
		tensor.DeviceAddr(wt), blasType(m.DType), k, b, btype, k, beta, tensor.DeviceAddr(out), n))
}

// fewRows runs the few-row kernel: out[rows, n] (+)= x[rows, k]·wᵀ for the
// resident weight w [n, k] (an MXFP4 one's blocks, then its scales: Upload).
func (d *Device) fewRows(out, x, w tensor.Tensor, rows int, acc bool) {
	n, k := w.Rows(), w.Cols()
	a := d.args()
	fn := d.core.fewMXFP4
	if w.DType() == tensor.MXFP4 {
		p := tensor.DeviceAddr(w)
		a.ptr(out).ptr(x).addr(p).addr(p + uint64(n*k/2))
	} else {
		fn = d.core.few[w.DType()]
		a.ptr(out).ptr(x).ptr(w)
	}
	a.i32(rows).i32(n).i32(k).i32(b2i(acc))
	d.launch(fn,
		dim3{uint32((n + fewWarps - 1) / fewWarps), uint32((rows + fewTile - 1) / fewTile), 1},
		dim3{32 * fewWarps, 1, 1}, 0)
}

// mxfp4PanelValues is the most values of an MXFP4 weight MulT widens at
// once for a product of more than FewRows rows (64 MiB of float32 scratch):
// a gpt-oss expert's whole matrix, a larger one in panels of rows. A
// variable so that a test can run several panels of a small weight.
var mxfp4PanelValues = 1 << 24

// mulMXFP4 computes out[rows, n] = x[rows, k]·wᵀ + beta·out for the resident
// MXFP4 weight w [n, k] (blocks, then scales): panels of its rows widened
// exactly into float32 scratch (scratchWeight), each multiplied by a float32
// cublasGemmEx into its columns of out. A weight of at most
// mxfp4PanelValues values is one panel: the same call a float32 weight of
// its values makes, with the same result.
func (d *Device) mulMXFP4(out, x, w tensor.Tensor, rows int, beta float32) {
	n, k := w.Rows(), w.Cols()
	pr := min(n, max(1, mxfp4PanelValues/k))
	buf := d.scratch(scratchWeight, 4*pr*k)
	blocks := tensor.DeviceAddr(w)
	scales := blocks + uint64(n*k/2)
	for n0 := 0; n0 < n; n0 += pr {
		n1 := min(n0+pr, n)
		bytes := (n1 - n0) * k / 2
		a := d.args()
		a.addr(buf).addr(blocks + uint64(n0*k/2)).addr(scales + uint64(n0*k/tensor.MXFP4Block)).u64(uint64(bytes))
		d.launch(d.core.mxfp4F32, dim3{uint32(min((bytes+255)/256, 4096)), 1, 1}, dim3{256, 1, 1}, 0)
		// As MulT's float32 product, over the panel's rows of W and
		// columns of out.
		d.check("MulT", d.sh.drv.gemm(true, false, n1-n0, rows, k, 1,
			buf, cudaR32F, k, tensor.DeviceAddr(x), cudaR32F, k, beta, tensor.DeviceAddr(out)+uint64(4*n0), n))
	}
}

// castInput rounds x to the 16-bit dtype dt (nearest, ties to even) into
// the scratchCast buffer and returns its address.
func (d *Device) castInput(dt tensor.DType, x tensor.Tensor) uint64 {
	n := x.Len()
	p := d.scratch(scratchCast, 2*n)
	a := d.args()
	a.addr(p).ptr(x).u64(uint64(n))
	d.launch(d.core.cast[dt], dim3{uint32(min((n+255)/256, 4096)), 1, 1}, dim3{256, 1, 1}, 0)
	return p
}

// b2i is 1 for true, 0 for false: a kernel's flag.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// MatMul computes out[m, n] (+)= alpha·op(a)·op(b) through cublasGemmEx in
// float32 (on bf16 tensor cores for a device WithProducts(BF16Products)
// returned), except a·bᵀ with alpha 1 of at most FewRows rows, which runs
// MulT's few-row kernel with b as the weight, so that it computes what MulT
// does row for row.
func (d *Device) MatMul(out, a, b tensor.Tensor, transA, transB bool, alpha float32, acc bool) {
	m, n, k, kb := tensor.MatMulShape(a, b, transA, transB)
	if k != kb || out.Cols() != n || out.Rows() < m || out.DType() != tensor.F32 || a.DType() != b.DType() {
		panic(fmt.Sprintf("cuda: MatMul of %dx%d %s (transposed %v) by %dx%d %s (transposed %v) into %dx%d %s",
			a.Rows(), a.Cols(), a.DType(), transA, b.Rows(), b.Cols(), b.DType(), transB, out.Rows(), out.Cols(), out.DType()))
	}
	if m == 0 || n == 0 {
		return
	}
	if !transA && transB && alpha == 1 && m <= tensor.FewRows && a.DType() == tensor.F32 {
		d.fewRows(out, a, b, m, acc)
		return
	}
	if k == 0 {
		if !acc {
			d.Zero(out.RowRange(0, m))
		}
		return
	}
	var beta float32
	if acc {
		beta = 1
	}
	// Row-major out = op(a)·op(b) is column-major outᵀ = op(b)ᵀ·op(a)ᵀ, and
	// a row-major matrix is its transpose column-major: b and a go in
	// swapped, each transposed as the caller asked, with their rows' length
	// as leading dimension.
	t := blasType(a.DType())
	if d.products == tensor.BF16Products && t == cudaR32F {
		d.check("MatMul", d.mulBF16Products(transB, transA, n, m, k, alpha,
			tensor.DeviceAddr(b), max(1, b.Cols()), tensor.DeviceAddr(a), max(1, a.Cols()),
			beta, tensor.DeviceAddr(out), n))
		return
	}
	d.check("MatMul", d.sh.drv.gemm(transB, transA, n, m, k, alpha,
		tensor.DeviceAddr(b), t, max(1, b.Cols()), tensor.DeviceAddr(a), t, max(1, a.Cols()),
		beta, tensor.DeviceAddr(out), n))
}

// HeadMatMul computes every head's product out_h = x_h·op(W_h) through
// cublasGemmStridedBatchedEx in float32, the heads as the batch: x's and
// out's row strides are the leading dimensions and a head's block of columns
// the stride between the batch's matrices, so nothing is copied. Up to
// FewRows rows it makes one batched call per row (each a batch of heads
// one-column products), so that every row runs the same cuBLAS call,
// shaped alike whatever the rows beside it, and gets the same bits as alone;
// above, one call for all rows.
func (d *Device) HeadMatMul(out, x, w tensor.Tensor, heads int, transW bool) {
	rows, k, n := tensor.CheckHeadMatMul("HeadMatMul", out, x, w, heads, transW)
	if rows == 0 || n == 0 {
		return
	}
	if k == 0 { // empty sums
		d.Zero(out.RowRange(0, rows))
		return
	}
	// Row-major out_h [R, n] (row stride heads·n) is column-major out_hᵀ
	// [n, R] = op(W_h)ᵀ·x_hᵀ. W_h, row-major [a, b], is column-major W_hᵀ
	// [b, a] with leading dimension b: as it is for op(W_h)ᵀ = W_hᵀ (transW
	// false), transposed for W_h (transW true). x_h, row-major [R, k] with
	// row stride heads·k, is column-major x_hᵀ [k, R] as it is.
	ab := int64(w.Len() / heads)
	ldx, ldo := heads*k, heads*n
	wa, xa, oa := tensor.DeviceAddr(w), tensor.DeviceAddr(x), tensor.DeviceAddr(out)
	if rows > tensor.FewRows {
		d.check("HeadMatMul", d.sh.drv.gemmBatched(transW, false, n, rows, k, 1,
			wa, cudaR32F, w.Cols(), ab, xa, cudaR32F, ldx, int64(k), 0, oa, ldo, int64(n), heads))
		return
	}
	for r := 0; r < rows; r++ {
		d.check("HeadMatMul", d.sh.drv.gemmBatched(transW, false, n, 1, k, 1,
			wa, cudaR32F, w.Cols(), ab, xa+uint64(4*r*ldx), cudaR32F, ldx, int64(k), 0, oa+uint64(4*r*ldo), ldo, int64(n), heads))
	}
}
