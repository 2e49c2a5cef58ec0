package cpu

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// MatMul runs a·bᵀ of at most FewRows rows (a trainer's forward product by
// the weights it updates) through Products' few-row kernels, so that it
// computes what MulT computes; any other product through the backend's
// Sgemm.
func (c *Device) MatMul(out, a, b tensor.Tensor, transA, transB bool, alpha float32, acc bool) {
	m, n, k, kb := tensor.MatMulShape(a, b, transA, transB)
	if k != kb || out.Cols() != n || out.Rows() < m {
		panic(fmt.Sprintf("tensor: MatMul of %dx%d (transposed %v) by %dx%d (transposed %v) into %dx%d",
			a.Rows(), a.Cols(), transA, b.Rows(), b.Cols(), transB, out.Rows(), out.Cols()))
	}
	if m == 0 || n == 0 {
		return
	}
	if !transA && transB && alpha == 1 && m <= tensor.FewRows {
		w := tensor.WeightOf(tensor.F32Matrix(f32s(b), n, k))
		c.mm.MulT(f32s(out), f32s(a), &w, m, acc)
		return
	}
	var beta float32
	if acc {
		beta = 1
	}
	if k == 0 {
		if !acc {
			clear(f32s(out)[:m*n])
		}
		return
	}
	c.be.Sgemm(transA, transB, m, n, k, alpha, f32s(a), a.Cols(), f32s(b), b.Cols(), beta, f32s(out), n)
}

// RMSNormBackward runs RMSNormBackward over x's rows.
func (c *Device) RMSNormBackward(dx, dw, dout, x, w tensor.Tensor, eps float32) {
	RMSNormBackward(f32s(dx), f32s(dw), f32s(dout), f32s(x), f32s(w), x.Rows(), x.Cols(), eps)
}

// RoPEBackward runs RotateHalf backward (the opposite angles) over x's rows.
func (c *Device) RoPEBackward(x tensor.Tensor, heads int, pos tensor.Tensor, r *tensor.Rotary) {
	rotate("RoPEBackward", x, heads, pos, r, -1)
}

// actJob is the activation op being split over the workers, read by
// Device.actChunk.
type actJob struct {
	op                       actOp
	out, z, dout, dgate, dup []float32
	gate, up                 []float32
	softcap                  float32 // Softcap's c
}

// actOp says which op an actJob runs.
type actOp int

const (
	opAddSiLU actOp = iota
	opSiLUBackward
	opSwiGLUBackward
	opSoftcap
)

// actChunk is the least number of values an activation op hands a worker:
// below twice as many it runs on the calling goroutine.
const actChunk = 8192

// runAct runs j over n values, split over the workers when large, through
// the chunk function stored once (so that a split allocates nothing).
func (c *Device) runAct(j actJob, n int) {
	c.act = j
	if n < 2*actChunk {
		c.actFn(0, n)
	} else {
		tensor.Parallel(n, actChunk, c.actFn)
	}
	c.act = actJob{}
}

// SwiGLUBackward accumulates dup += dout·silu(gate), with the forward's very
// silu (g / (1 + Expf(-g))), and dgate += dout·up·s·(1 + g·(1 - s)) with the
// sigmoid s = 1 / (1 + Expf(-g)) of the same exponential.
func (c *Device) SwiGLUBackward(dgate, dup, dout, gate, up tensor.Tensor) {
	c.runAct(actJob{op: opSwiGLUBackward, dgate: f32s(dgate), dup: f32s(dup), dout: f32s(dout), gate: f32s(gate), up: f32s(up)}, gate.Len())
}

// AddSiLU adds z / (1 + Expf(-z)) to out.
func (c *Device) AddSiLU(out, z tensor.Tensor) {
	c.runAct(actJob{op: opAddSiLU, out: f32s(out), z: f32s(z)}, z.Len())
}

// SiLUBackward accumulates dz += dout·s·(1 + z·(1 - s)), s = 1 / (1 +
// Expf(-z)).
func (c *Device) SiLUBackward(dz, dout, z tensor.Tensor) {
	c.runAct(actJob{op: opSiLUBackward, out: f32s(dz), dout: f32s(dout), z: f32s(z)}, z.Len())
}

// Softcap replaces x by c·tanh(x/c), split over the workers when large (a
// logits tensor is the vocabulary wide).
func (c *Device) Softcap(x tensor.Tensor, limit float32) {
	if !(limit > 0) {
		panic(fmt.Sprintf("tensor: Softcap by %v, want a positive cap", limit))
	}
	c.runAct(actJob{op: opSoftcap, out: f32s(x), softcap: limit}, x.Len())
}

// actChunkFn computes values [lo, hi) of c.act.
func (c *Device) actChunkFn(lo, hi int) {
	j := &c.act
	switch j.op {
	case opAddSiLU:
		out := j.out[lo:hi]
		for i, v := range j.z[lo:hi] {
			out[i] += v / (1 + Expf(-v))
		}
	case opSiLUBackward:
		d, g := j.out[lo:hi], j.dout[lo:hi]
		for i, v := range j.z[lo:hi] {
			s := 1 / (1 + Expf(-v))
			d[i] += g[i] * s * (1 + v*(1-s))
		}
	case opSwiGLUBackward:
		for i := lo; i < hi; i++ {
			g := j.gate[i]
			e := Expf(-g)
			s := 1 / (1 + e)
			if j.dgate != nil {
				j.dgate[i] += j.dout[i] * j.up[i] * s * (1 + g*(1-s))
			}
			if j.dup != nil {
				j.dup[i] += j.dout[i] * (g / (1 + e))
			}
		}
	case opSoftcap:
		x := j.out[lo:hi]
		for i, v := range x {
			x[i] = SoftcapValue(v, j.softcap)
		}
	}
}

// Add adds src to dst.
func (c *Device) Add(dst, src tensor.Tensor) {
	d := f32s(dst)
	for i, v := range f32s(src)[:len(d)] {
		d[i] += v
	}
}

// SumRows adds x's rows to dst one after another.
func (c *Device) SumRows(dst, x tensor.Tensor) {
	n := x.Cols()
	d := f32s(dst)[:n]
	for r := 0; r < x.Rows(); r++ {
		for j, v := range f32s(x)[r*n : r*n+n] {
			d[j] += v
		}
	}
}

// ConcatCols copies the srcs' rows side by side into dst's.
func (c *Device) ConcatCols(dst tensor.Tensor, srcs []tensor.Tensor) {
	w := dst.Cols()
	for r := 0; r < dst.Rows(); r++ {
		f := f32s(dst)[r*w : (r+1)*w]
		for _, s := range srcs {
			n := s.Cols()
			copy(f[:n], f32s(s)[r*n:(r+1)*n])
			f = f[n:]
		}
	}
}
