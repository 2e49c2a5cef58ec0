package tensor

import "fmt"

// MatMul runs a·bᵀ of at most FewRows rows (a trainer's forward product by
// the weights it updates) through Products' few-row kernels, so that it
// computes what MulT computes; any other product through the backend's
// Sgemm.
func (c *CPUDevice) MatMul(out, a, b Tensor, transA, transB bool, alpha float32, acc bool) {
	m, k := a.rows, a.cols
	if transA {
		m, k = k, m
	}
	n, kb := b.cols, b.rows
	if transB {
		n, kb = b.rows, b.cols
	}
	if k != kb || out.cols != n || out.rows < m {
		panic(fmt.Sprintf("tensor: MatMul of %dx%d (transposed %v) by %dx%d (transposed %v) into %dx%d",
			a.rows, a.cols, transA, b.rows, b.cols, transB, out.rows, out.cols))
	}
	if m == 0 || n == 0 {
		return
	}
	if !transA && transB && alpha == 1 && m <= FewRows {
		w := Weight{m: F32Matrix(b.f32, n, k)}
		c.mm.MulT(out.f32, a.f32, &w, m, acc)
		return
	}
	var beta float32
	if acc {
		beta = 1
	}
	if k == 0 {
		if !acc {
			clear(out.f32[:m*n])
		}
		return
	}
	c.be.Sgemm(transA, transB, m, n, k, alpha, a.f32, a.cols, b.f32, b.cols, beta, out.f32, n)
}

// RMSNormBackward runs RMSNormBackward over x's rows.
func (c *CPUDevice) RMSNormBackward(dx, dw, dout, x, w Tensor, eps float32) {
	RMSNormBackward(dx.f32, dw.f32, dout.f32, x.f32, w.f32, x.rows, x.cols, eps)
}

// RoPEBackward runs RotateHalf backward (the opposite angles) over x's rows.
func (c *CPUDevice) RoPEBackward(x Tensor, heads int, pos Tensor, r *Rotary) {
	RotateHalf(x.f32, x.rows, heads, pos.i32, r.Cos.f32, r.Sin.f32, r.InvFreq.f32, r.MaxPos, -1)
}

// actJob is the activation op being split over the workers, read by
// CPUDevice.actChunk.
type actJob struct {
	op                       actOp
	out, z, dout, dgate, dup []float32
	gate, up                 []float32
}

// actOp says which op an actJob runs.
type actOp int

const (
	opAddSiLU actOp = iota
	opSiLUBackward
	opSwiGLUBackward
)

// actChunk is the least number of values an activation op hands a worker:
// below twice as many it runs on the calling goroutine.
const actChunk = 8192

// runAct runs j over n values, split over the workers when large, through
// the chunk function stored once (so that a split allocates nothing).
func (c *CPUDevice) runAct(j actJob, n int) {
	c.act = j
	if n < 2*actChunk {
		c.actFn(0, n)
	} else {
		Parallel(n, actChunk, c.actFn)
	}
	c.act = actJob{}
}

// SwiGLUBackward accumulates dup += dout·silu(gate), with the forward's very
// silu (g / (1 + Expf(-g))), and dgate += dout·up·s·(1 + g·(1 - s)) with the
// sigmoid s = 1 / (1 + Expf(-g)) of the same exponential.
func (c *CPUDevice) SwiGLUBackward(dgate, dup, dout, gate, up Tensor) {
	c.runAct(actJob{op: opSwiGLUBackward, dgate: dgate.f32, dup: dup.f32, dout: dout.f32, gate: gate.f32, up: up.f32}, gate.Len())
}

// AddSiLU adds z / (1 + Expf(-z)) to out.
func (c *CPUDevice) AddSiLU(out, z Tensor) {
	c.runAct(actJob{op: opAddSiLU, out: out.f32, z: z.f32}, z.Len())
}

// SiLUBackward accumulates dz += dout·s·(1 + z·(1 - s)), s = 1 / (1 +
// Expf(-z)).
func (c *CPUDevice) SiLUBackward(dz, dout, z Tensor) {
	c.runAct(actJob{op: opSiLUBackward, out: dz.f32, dout: dout.f32, z: z.f32}, z.Len())
}

// actChunkFn computes values [lo, hi) of c.act.
func (c *CPUDevice) actChunkFn(lo, hi int) {
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
	}
}

// Add adds src to dst.
func (c *CPUDevice) Add(dst, src Tensor) {
	d := dst.f32
	for i, v := range src.f32[:len(d)] {
		d[i] += v
	}
}

// SumRows adds x's rows to dst one after another.
func (c *CPUDevice) SumRows(dst, x Tensor) {
	n := x.cols
	d := dst.f32[:n]
	for r := 0; r < x.rows; r++ {
		for j, v := range x.f32[r*n : r*n+n] {
			d[j] += v
		}
	}
}

// ConcatCols copies the srcs' rows side by side into dst's.
func (c *CPUDevice) ConcatCols(dst Tensor, srcs []Tensor) {
	w := dst.cols
	for r := 0; r < dst.rows; r++ {
		f := dst.f32[r*w : (r+1)*w]
		for _, s := range srcs {
			n := s.cols
			copy(f[:n], s.f32[r*n:(r+1)*n])
			f = f[n:]
		}
	}
}
