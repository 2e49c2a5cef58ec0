package tensor

import (
	"fmt"
	"math"
)

// CPUDevice is the CPU device: tensors in host memory, products through Products
// on a Backend (OpenBLAS or drafter's Go assembly), the other ops through
// pkg/tensor's kernels, split over tensor's workers. Memory-mapped weights
// stay mapped (Upload views them). One CPUDevice serves one caller: it holds
// the scratch of the op in flight.
type CPUDevice struct {
	be Backend
	mm *Products
	// SwiGLU's split: the job in flight, and its chunk function stored once
	// so that a split allocates nothing.
	glu   swigluJob
	gluFn func(lo, hi int)
	att   attnScratch
	ttt   tttScratch
	// AdamW's and Zero's split, as SwiGLU's.
	adam   adamJob
	adamFn func(lo, hi int)
	zero   []float32
	zeroFn func(lo, hi int)
	// The activations' backward passes' split, as SwiGLU's.
	act   actJob
	actFn func(lo, hi int)
	loss  lossOps
}

// NewCPU returns a CPU device whose large float32 products run on be (CPU()
// when nil).
func NewCPU(be Backend) *CPUDevice {
	if be == nil {
		be = CPU()
	}
	c := &CPUDevice{be: be, mm: NewProducts(be)}
	c.gluFn = c.swigluChunk
	c.adamFn = c.adamChunk
	c.zeroFn = c.zeroChunk
	c.actFn = c.actChunkFn
	c.att.init(c)
	c.loss.init()
	return c
}

// Name says "cpu/" and the backend's name.
func (c *CPUDevice) Name() string { return "cpu/" + c.be.Name() }

// Sibling returns a new CPU device on the same backend: the memory is the
// host's, so siblings share everything but their scratch.
func (c *CPUDevice) Sibling() Device { return NewCPU(c.be) }

// Backend returns the backend the device's large products run on.
func (c *CPUDevice) Backend() Backend { return c.be }

// Products returns the device's weight products, for tests that check how
// they are split.
func (c *CPUDevice) Products() *Products { return c.mm }

// Alloc returns a zeroed tensor in host memory.
func (c *CPUDevice) Alloc(dt DType, rows, cols int) (Tensor, error) {
	if rows < 0 || cols < 0 {
		return Tensor{}, fmt.Errorf("tensor: cannot allocate %dx%d values", rows, cols)
	}
	t := Tensor{dt: dt, rows: rows, cols: cols}
	switch dt {
	case F32:
		t.f32 = make([]float32, rows*cols)
	case BF16, F16:
		t.u16 = make([]uint16, rows*cols)
	case I32:
		t.i32 = make([]int32, rows*cols)
	default:
		return Tensor{}, fmt.Errorf("tensor: cannot allocate values of dtype %s", dt)
	}
	return t, nil
}

// Upload returns a tensor viewing m's values (no copy).
func (c *CPUDevice) Upload(m Matrix) (Tensor, error) {
	return Tensor{dt: m.DType, rows: m.Rows, cols: m.Cols, f32: m.F32, u16: m.U16}, nil
}

// Write copies src into dst's first values.
func (c *CPUDevice) Write(dst Tensor, src []float32) { copy(dst.f32[:len(src)], src) }

// WriteI32 copies src into dst's first values.
func (c *CPUDevice) WriteI32(dst Tensor, src []int32) { copy(dst.i32[:len(src)], src) }

// Read copies src's values into dst.
func (c *CPUDevice) Read(dst []float32, src Tensor) { copy(dst[:len(src.f32)], src.f32) }

// HostF32 returns t's values: the CPU device's memory is the host's.
func (c *CPUDevice) HostF32(t Tensor) ([]float32, bool) { return t.f32, true }

// PrepareWeights runs Products.Prepare (transposed copies of a small float32
// model's matrices, where the processor runs their products fast).
func (c *CPUDevice) PrepareWeights(ws ...*Weight) { c.mm.Prepare(ws...) }

// MulT runs the product through Products.MulT.
func (c *CPUDevice) MulT(out, x Tensor, w *Weight, acc bool) {
	if x.cols != w.m.Cols || out.cols != w.m.Rows || out.rows < x.rows {
		panic(fmt.Sprintf("tensor: MulT of %dx%d by a %dx%d weight into %dx%d", x.rows, x.cols, w.m.Rows, w.m.Cols, out.rows, out.cols))
	}
	c.mm.MulT(out.f32, x.f32, w, x.rows, acc)
}

// RoundsInputs reports whether the product runs GemmBF16: bf16 weights,
// more than FewRows rows, a processor with AVX512_BF16.
func (c *CPUDevice) RoundsInputs(dt DType, rows int) bool {
	return dt == BF16 && rows > FewRows && RoundsBF16Activations()
}

// Gather writes the table's rows ids into out's rows.
func (c *CPUDevice) Gather(out Tensor, table *Weight, ids []int) {
	h := out.cols
	for i, id := range ids {
		table.m.Row(out.f32[i*h:(i+1)*h], id)
	}
}

// GatherRows writes src's rows rows into out's rows.
func (c *CPUDevice) GatherRows(out, src Tensor, rows []int32) {
	h := src.cols
	for j, r := range rows {
		copy(out.f32[j*h:(j+1)*h], src.f32[int(r)*h:int(r+1)*h])
	}
}

// Copy copies src's values into dst.
func (c *CPUDevice) Copy(dst, src Tensor) { copy(dst.f32[:len(src.f32)], src.f32) }

// SplitCols copies src's column blocks into the dsts.
func (c *CPUDevice) SplitCols(src Tensor, dsts []Tensor) {
	w := src.cols
	for r := 0; r < src.rows; r++ {
		f := src.f32[r*w : (r+1)*w]
		for _, d := range dsts {
			n := d.cols
			copy(d.f32[r*n:(r+1)*n], f[:n])
			f = f[n:]
		}
	}
}

// RMSNorm runs RMSNorm over x's rows.
func (c *CPUDevice) RMSNorm(out, x, w Tensor, eps float32) {
	RMSNorm(out.f32, x.f32, w.f32, x.rows, x.cols, eps)
}

// RoPE runs RotateHalf forward over x's rows.
func (c *CPUDevice) RoPE(x Tensor, heads int, pos Tensor, r *Rotary) {
	RotateHalf(x.f32, x.rows, heads, pos.i32, r.Cos.f32, r.Sin.f32, r.InvFreq.f32, r.MaxPos, 1)
}

// Scale multiplies x by s.
func (c *CPUDevice) Scale(x Tensor, s float32) { Scale(x.f32, s) }

// AddBias adds b to every row of x.
func (c *CPUDevice) AddBias(x, b Tensor) {
	n := b.Len()
	bv := b.f32
	for r := 0; r+n <= len(x.f32); r += n {
		o := x.f32[r : r+n]
		for i, v := range bv {
			o[i] += v
		}
	}
}

// swigluJob is the SwiGLU being split over the workers.
type swigluJob struct {
	out, gate, up []float32
	inter         int // I of a fused gate, 0 for separate gate and up
}

// SwiGLU computes out = silu(gate)·up with SwiGLU's kernel, split over the
// workers when large.
func (c *CPUDevice) SwiGLU(out, gate, up Tensor) {
	if up.Empty() {
		I := out.cols
		c.glu = swigluJob{out: out.f32, gate: gate.f32, inter: I}
		if rows := out.rows; rows*I < 1<<15 {
			c.gluFn(0, rows)
		} else {
			Parallel(rows, (1<<13)/I+1, c.gluFn)
		}
	} else {
		n := out.Len()
		c.glu = swigluJob{out: out.f32[:n], gate: gate.f32[:n], up: up.f32[:n]}
		if n < 1<<15 {
			c.gluFn(0, n)
		} else {
			Parallel(n, 1<<13, c.gluFn)
		}
	}
	c.glu = swigluJob{}
}

// swigluChunk computes rows [lo, hi) of a fused SwiGLU, or values [lo, hi)
// of a separate one.
func (c *CPUDevice) swigluChunk(lo, hi int) {
	j := &c.glu
	if I := j.inter; I > 0 {
		for r := lo; r < hi; r++ {
			SwiGLU(j.out[r*I:(r+1)*I], j.gate[2*r*I:(2*r+1)*I], j.gate[(2*r+1)*I:(2*r+2)*I])
		}
		return
	}
	SwiGLU(j.out[lo:hi], j.gate[lo:hi], j.up[lo:hi])
}

// NewKV allocates the cache in one block: per layer K, V and K transposed.
func (c *CPUDevice) NewKV(layers, kvDim, capacity int) (*KV, error) {
	if layers <= 0 || kvDim <= 0 {
		return nil, fmt.Errorf("tensor: a KV cache of %d layers of %d key values: both must be positive", layers, kvDim)
	}
	if capacity < 0 {
		return nil, fmt.Errorf("tensor: KV cache capacity %d is negative", capacity)
	}
	per := capacity * kvDim
	block := make([]float32, 3*layers*per)
	kv := &KV{k: make([][]float32, layers), v: make([][]float32, layers), kt: make([][]float32, layers), kvDim: kvDim, cap: capacity}
	for l := 0; l < layers; l++ {
		kv.k[l] = block[3*l*per : (3*l+1)*per : (3*l+1)*per]
		kv.v[l] = block[(3*l+1)*per : (3*l+2)*per : (3*l+2)*per]
		kv.kt[l] = block[(3*l+2)*per : (3*l+3)*per : (3*l+3)*per]
	}
	return kv, nil
}

// KVWrite stores k's and v's rows at positions row.. of layer l, in the
// row-major and the transposed layout.
func (c *CPUDevice) KVWrite(kv *KV, l, row int, k, v Tensor) {
	d := kv.kvDim
	rows := k.Len() / d
	dst := row * d
	copy(kv.k[l][dst:dst+rows*d], k.f32[:rows*d])
	copy(kv.v[l][dst:dst+rows*d], v.f32[:rows*d])
	kt, c0 := kv.kt[l], kv.cap
	for i := 0; i < rows; i++ {
		r := row + i
		for j, x := range k.f32[i*d : (i+1)*d] {
			kt[j*c0+r] = x
		}
	}
}

// KVMove copies position src to dst in every layer and layout.
func (c *CPUDevice) KVMove(kv *KV, dst, src int) {
	d := kv.kvDim
	s, t := src*d, dst*d
	for l := range kv.k {
		copy(kv.k[l][t:t+d], kv.k[l][s:s+d])
		copy(kv.v[l][t:t+d], kv.v[l][s:s+d])
		kt := kv.kt[l]
		for i := 0; i < d; i++ {
			kt[i*kv.cap+dst] = kt[i*kv.cap+src]
		}
	}
}

// HostTensor returns host values as a tensor of the CPU device, viewing
// them: for host code that hands slices it owns to a CPU device's ops.
func HostTensor(v []float32, rows, cols int) Tensor {
	if len(v) < rows*cols {
		panic(fmt.Sprintf("tensor: HostTensor of %d values for %dx%d", len(v), rows, cols))
	}
	return Tensor{dt: F32, rows: rows, cols: cols, f32: v[:rows*cols]}
}

// Zero clears x, split over the workers when large.
func (c *CPUDevice) Zero(x Tensor) {
	c.zero = x.f32
	Parallel(len(x.f32), 1<<16, c.zeroFn)
	c.zero = nil
}

func (c *CPUDevice) zeroChunk(lo, hi int) { clear(c.zero[lo:hi]) }

// SumSquares sums x's squares in float64, in four interleaved partial sums
// added pairwise.
func (c *CPUDevice) SumSquares(x Tensor) float64 {
	g := x.f32
	var s0, s1, s2, s3 float64
	j := 0
	for ; j+4 <= len(g); j += 4 {
		a, b, c, d := float64(g[j]), float64(g[j+1]), float64(g[j+2]), float64(g[j+3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; j < len(g); j++ {
		a := float64(g[j])
		s0 += a * a
	}
	return (s0 + s1) + (s2 + s3)
}

// adamJob is the AdamW update being split over the workers.
type adamJob struct {
	p, g, m, v []float32
	s          AdamWStep
}

// AdamW updates p, m and v, split over the workers when large.
func (c *CPUDevice) AdamW(p, g, m, v Tensor, s AdamWStep) {
	n := p.Len()
	if g.Len() != n || m.Len() != n || v.Len() != n {
		panic(fmt.Sprintf("tensor: AdamW of %d values with %d gradients and %d/%d moments", n, g.Len(), m.Len(), v.Len()))
	}
	c.adam = adamJob{p: p.f32, g: g.f32, m: m.f32, v: v.f32, s: s}
	Parallel(n, 1<<15, c.adamFn)
	c.adam = adamJob{}
}

// adamChunk updates values [lo, hi) of c.adam in torch's float32 order of
// operations (decay first, then the moments, then the bias-corrected step).
func (c *CPUDevice) adamChunk(lo, hi int) {
	j := &c.adam
	d, g, m, v := j.p[lo:hi], j.g[lo:hi], j.m[lo:hi], j.v[lo:hi]
	g, m, v = g[:len(d)], m[:len(d)], v[:len(d)]
	s := j.s
	for i := range d {
		gi := g[i]
		mi := s.Beta1*m[i] + s.OneMinusBeta1*gi
		vi := s.Beta2*v[i] + s.OneMinusBeta2*gi*gi
		m[i], v[i] = mi, vi
		den := float32(math.Sqrt(float64(vi)))/s.SqrtBC2 + s.Eps
		d[i] = d[i]*s.Decay - s.StepSize*mi/den
	}
}
