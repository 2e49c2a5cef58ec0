package cpu

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Device is the CPU device: tensors in host memory, products through Products
// on a Backend (OpenBLAS or drafter's Go assembly), the other ops through
// the CPU kernels, split over the workers (tensor.Parallel). Memory-mapped weights
// stay mapped (Upload views them). One Device serves one caller: it holds
// the scratch of the op in flight.
type Device struct {
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
	// AddScaledRows' split by columns, as SwiGLU's.
	addRows   addRowsJob
	addRowsFn func(lo, hi int)
	// HeadMatMul's split by heads, as SwiGLU's.
	head   headJob
	headFn func(c, lo, hi int)
}

// New returns a CPU device whose large float32 products run on be (DefaultBackend()
// when nil).
func New(be Backend) *Device {
	if be == nil {
		be = DefaultBackend()
	}
	c := &Device{be: be, mm: NewProducts(be)}
	c.gluFn = c.swigluChunk
	c.adamFn = c.adamChunk
	c.zeroFn = c.zeroChunk
	c.actFn = c.actChunkFn
	c.addRowsFn = c.addRowsCols
	c.headFn = c.headChunk
	c.att.init(c)
	c.loss.init()
	return c
}

// Name says "cpu/" and the backend's name.
func (c *Device) Name() string { return "cpu/" + c.be.Name() }

// Sibling returns a new CPU device on the same backend: the memory is the
// host's, so siblings share everything but their scratch.
func (c *Device) Sibling() tensor.Device { return New(c.be) }

// Backend returns the backend the device's large products run on.
func (c *Device) Backend() Backend { return c.be }

// Products returns the device's weight products, for tests that check how
// they are split.
func (c *Device) Products() *Products { return c.mm }

// Alloc returns a zeroed tensor in host memory.
func (c *Device) Alloc(dt tensor.DType, rows, cols int) (tensor.Tensor, error) {
	if rows < 0 || cols < 0 {
		return tensor.Tensor{}, fmt.Errorf("tensor: cannot allocate %dx%d values", rows, cols)
	}
	switch dt {
	case tensor.F32:
		return tensor.HostTensorF32(make([]float32, rows*cols), rows, cols), nil
	case tensor.BF16, tensor.F16:
		return tensor.HostTensorU16(dt, make([]uint16, rows*cols), rows, cols), nil
	case tensor.I32:
		return tensor.HostTensorI32(make([]int32, rows*cols), rows, cols), nil
	default:
		return tensor.Tensor{}, fmt.Errorf("tensor: cannot allocate values of dtype %s", dt)
	}
}

// Upload returns a tensor viewing m's values (no copy). An MXFP4 matrix
// has no tensor form on the CPU (its products read the Matrix through a
// Weight): it is an error.
func (c *Device) Upload(m tensor.Matrix) (tensor.Tensor, error) {
	if m.DType == tensor.MXFP4 {
		return tensor.Tensor{}, fmt.Errorf("tensor: cannot upload a %dx%d mxfp4 matrix as a tensor: multiply by it through a Weight", m.Rows, m.Cols)
	}
	if m.DType == tensor.F32 {
		return tensor.HostTensorF32(m.F32, m.Rows, m.Cols), nil
	}
	return tensor.HostTensorU16(m.DType, m.U16, m.Rows, m.Cols), nil
}

// Write copies src into dst's first values.
func (c *Device) Write(dst tensor.Tensor, src []float32) { copy(f32s(dst)[:len(src)], src) }

// WriteI32 copies src into dst's first values.
func (c *Device) WriteI32(dst tensor.Tensor, src []int32) { copy(i32s(dst)[:len(src)], src) }

// Read copies src's values into dst.
func (c *Device) Read(dst []float32, src tensor.Tensor) { copy(dst[:len(f32s(src))], f32s(src)) }

// HostF32 returns t's values: the CPU device's memory is the host's.
func (c *Device) HostF32(t tensor.Tensor) ([]float32, bool) { return f32s(t), true }

// PrepareWeights runs Products.Prepare (transposed copies of a small float32
// model's matrices, where the processor runs their products fast).
func (c *Device) PrepareWeights(ws ...*tensor.Weight) { c.mm.Prepare(ws...) }

// MulT runs the product through Products.MulT.
func (c *Device) MulT(out, x tensor.Tensor, w *tensor.Weight, acc bool) {
	if x.Cols() != w.Matrix().Cols || out.Cols() != w.Matrix().Rows || out.Rows() < x.Rows() {
		panic(fmt.Sprintf("tensor: MulT of %dx%d by a %dx%d weight into %dx%d", x.Rows(), x.Cols(), w.Matrix().Rows, w.Matrix().Cols, out.Rows(), out.Cols()))
	}
	c.mm.MulT(f32s(out), f32s(x), w, x.Rows(), acc)
}

// RoundsInputs reports whether the product runs GemmBF16: bf16 weights,
// more than FewRows rows, a processor with AVX512_BF16.
func (c *Device) RoundsInputs(dt tensor.DType, rows int) bool {
	return dt == tensor.BF16 && rows > tensor.FewRows && RoundsBF16Activations()
}

// Gather writes the table's rows ids into out's rows.
func (c *Device) Gather(out tensor.Tensor, table *tensor.Weight, ids []int) {
	h := out.Cols()
	for i, id := range ids {
		table.Matrix().Row(f32s(out)[i*h:(i+1)*h], id)
	}
}

// GatherRows writes src's rows rows into out's rows.
func (c *Device) GatherRows(out, src tensor.Tensor, rows []int32) {
	h := src.Cols()
	for j, r := range rows {
		copy(f32s(out)[j*h:(j+1)*h], f32s(src)[int(r)*h:int(r+1)*h])
	}
}

// Copy copies src's values into dst.
func (c *Device) Copy(dst, src tensor.Tensor) { copy(f32s(dst)[:len(f32s(src))], f32s(src)) }

// SplitCols copies src's column blocks into the dsts.
func (c *Device) SplitCols(src tensor.Tensor, dsts []tensor.Tensor) {
	w := src.Cols()
	for r := 0; r < src.Rows(); r++ {
		f := f32s(src)[r*w : (r+1)*w]
		for _, d := range dsts {
			n := d.Cols()
			copy(f32s(d)[r*n:(r+1)*n], f[:n])
			f = f[n:]
		}
	}
}

// RMSNorm runs RMSNorm over x's rows.
func (c *Device) RMSNorm(out, x, w tensor.Tensor, eps float32) {
	RMSNorm(f32s(out), f32s(x), f32s(w), x.Rows(), x.Cols(), eps)
}

// RoPE runs RotateHalf forward over x's rows.
func (c *Device) RoPE(x tensor.Tensor, heads int, pos tensor.Tensor, r *tensor.Rotary) {
	rotate("RoPE", x, heads, pos, r, 1)
}

// Scale multiplies x by s.
func (c *Device) Scale(x tensor.Tensor, s float32) { Scale(f32s(x), s) }

// AddBias adds b to every row of x.
func (c *Device) AddBias(x, b tensor.Tensor) {
	n := b.Len()
	bv := f32s(b)
	for r := 0; r+n <= len(f32s(x)); r += n {
		o := f32s(x)[r : r+n]
		for i, v := range bv {
			o[i] += v
		}
	}
}

// swigluJob is the SwiGLU (or GELUTanhGLU, or ClampedSwiGLU) being split
// over the workers.
type swigluJob struct {
	out, gate, up []float32
	inter         int     // I of a fused gate, 0 for separate gate and up
	kind          gluKind // which gated activation
	alpha, limit  float32 // ClampedSwiGLU's constants
}

// gluKind is the activation of a gated MLP that glu2 runs.
type gluKind uint8

// The gated activations glu2 runs: silu (SwiGLU), gelu_tanh (GELUTanhGLU)
// and gpt-oss's clamped silu (ClampedSwiGLU).
const (
	gluSiLU gluKind = iota
	gluGELUTanh
	gluClamped
)

// SwiGLU computes out = silu(gate)·up with SwiGLU's kernel, split over the
// workers when large.
func (c *Device) SwiGLU(out, gate, up tensor.Tensor) { c.glu2(out, gate, up, gluSiLU, 0, 0) }

// GELUTanhGLU computes out = gelu_tanh(gate)·up with GELUTanhGLU's
// arithmetic, split over the workers as SwiGLU is.
func (c *Device) GELUTanhGLU(out, gate, up tensor.Tensor) { c.glu2(out, gate, up, gluGELUTanh, 0, 0) }

// ClampedSwiGLU computes gpt-oss's clamped activation with ClampedSwiGLU's
// arithmetic (see tensor.Device.ClampedSwiGLU), split over the workers as
// SwiGLU is.
func (c *Device) ClampedSwiGLU(out, gate, up tensor.Tensor, alpha, limit float32) {
	c.glu2(out, gate, up, gluClamped, alpha, limit)
}

// glu2 runs a gated activation of kind k, split over the workers when
// large: with up empty, gate holds each row's gate and up side by side.
func (c *Device) glu2(out, gate, up tensor.Tensor, k gluKind, alpha, limit float32) {
	if up.Empty() {
		I := out.Cols()
		c.glu = swigluJob{out: f32s(out), gate: f32s(gate), inter: I, kind: k, alpha: alpha, limit: limit}
		if rows := out.Rows(); rows*I < 1<<15 {
			c.gluFn(0, rows)
		} else {
			tensor.Parallel(rows, (1<<13)/I+1, c.gluFn)
		}
	} else {
		n := out.Len()
		c.glu = swigluJob{out: f32s(out)[:n], gate: f32s(gate)[:n], up: f32s(up)[:n], kind: k, alpha: alpha, limit: limit}
		if n < 1<<15 {
			c.gluFn(0, n)
		} else {
			tensor.Parallel(n, 1<<13, c.gluFn)
		}
	}
	c.glu = swigluJob{}
}

// run computes one stretch of the job's activation: out = act(gate)·up.
func (j *swigluJob) run(out, gate, up []float32) {
	switch j.kind {
	case gluGELUTanh:
		GELUTanhGLU(out, gate, up)
	case gluClamped:
		ClampedSwiGLU(out, gate, up, j.alpha, j.limit)
	default:
		SwiGLU(out, gate, up)
	}
}

// swigluChunk computes rows [lo, hi) of a fused gated activation, or values
// [lo, hi) of a separate one.
func (c *Device) swigluChunk(lo, hi int) {
	j := &c.glu
	if I := j.inter; I > 0 {
		for r := lo; r < hi; r++ {
			j.run(j.out[r*I:(r+1)*I], j.gate[2*r*I:(2*r+1)*I], j.gate[(2*r+1)*I:(2*r+2)*I])
		}
		return
	}
	j.run(j.out[lo:hi], j.gate[lo:hi], j.up[lo:hi])
}

// NewKV allocates the cache in one block: per layer K, V and K transposed.
func (c *Device) NewKV(layers, kvDim, capacity int) (*tensor.KV, error) {
	if layers <= 0 || kvDim <= 0 {
		return nil, fmt.Errorf("tensor: a KV cache of %d layers of %d key values: both must be positive", layers, kvDim)
	}
	if capacity < 0 {
		return nil, fmt.Errorf("tensor: KV cache capacity %d is negative", capacity)
	}
	per := capacity * kvDim
	block := make([]float32, 3*layers*per)
	k, v, kt := make([][]float32, layers), make([][]float32, layers), make([][]float32, layers)
	for l := 0; l < layers; l++ {
		k[l] = block[3*l*per : (3*l+1)*per : (3*l+1)*per]
		v[l] = block[(3*l+1)*per : (3*l+2)*per : (3*l+2)*per]
		kt[l] = block[(3*l+2)*per : (3*l+3)*per : (3*l+3)*per]
	}
	return tensor.HostKV(kvDim, capacity, k, v, kt), nil
}

// KVWrite stores k's and v's rows at positions row.. of layer l, in the
// row-major and the transposed layout.
func (c *Device) KVWrite(kv *tensor.KV, l, row int, k, v tensor.Tensor) {
	d := kv.KVDim()
	rows := k.Len() / d
	dst := row * d
	copy(kv.K(l)[dst:dst+rows*d], f32s(k)[:rows*d])
	copy(kv.V(l)[dst:dst+rows*d], f32s(v)[:rows*d])
	kt, c0 := kv.KT(l), kv.Cap()
	for i := 0; i < rows; i++ {
		r := row + i
		for j, x := range f32s(k)[i*d : (i+1)*d] {
			kt[j*c0+r] = x
		}
	}
}

// KVMove copies position src to dst in every layer and layout.
func (c *Device) KVMove(kv *tensor.KV, dst, src int) {
	d := kv.KVDim()
	s, t := src*d, dst*d
	layers, _, _ := tensor.HostKVLayers(kv)
	for l := range layers {
		copy(kv.K(l)[t:t+d], kv.K(l)[s:s+d])
		copy(kv.V(l)[t:t+d], kv.V(l)[s:s+d])
		kt := kv.KT(l)
		for i := 0; i < d; i++ {
			kt[i*kv.Cap()+dst] = kt[i*kv.Cap()+src]
		}
	}
}

// HostTensor returns host values as a tensor of the CPU device, viewing
// them: for host code that hands slices it owns to a CPU device's ops.
func HostTensor(v []float32, rows, cols int) tensor.Tensor {
	if len(v) < rows*cols {
		panic(fmt.Sprintf("tensor: HostTensor of %d values for %dx%d", len(v), rows, cols))
	}
	return tensor.HostTensorF32(v, rows, cols)
}

// Zero clears x, split over the workers when large.
func (c *Device) Zero(x tensor.Tensor) {
	c.zero = f32s(x)
	tensor.Parallel(len(f32s(x)), 1<<16, c.zeroFn)
	c.zero = nil
}

func (c *Device) zeroChunk(lo, hi int) { clear(c.zero[lo:hi]) }

// SumSquares sums x's squares in float64, in four interleaved partial sums
// added pairwise.
func (c *Device) SumSquares(x tensor.Tensor) float64 {
	g := f32s(x)
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
	s          tensor.AdamWStep
}

// AdamW updates p, m and v, split over the workers when large.
func (c *Device) AdamW(p, g, m, v tensor.Tensor, s tensor.AdamWStep) {
	n := p.Len()
	if g.Len() != n || m.Len() != n || v.Len() != n {
		panic(fmt.Sprintf("tensor: AdamW of %d values with %d gradients and %d/%d moments", n, g.Len(), m.Len(), v.Len()))
	}
	c.adam = adamJob{p: f32s(p), g: f32s(g), m: f32s(m), v: f32s(v), s: s}
	tensor.Parallel(n, 1<<15, c.adamFn)
	c.adam = adamJob{}
}

// adamChunk updates values [lo, hi) of c.adam in torch's float32 order of
// operations (decay first, then the moments, then the bias-corrected step).
func (c *Device) adamChunk(lo, hi int) {
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

// SiblingOf returns a sibling of dev (tensor.Device.Sibling) for a caller
// that computes on the run's device beside others, or a new CPU device on
// the default backend when dev is nil.
func SiblingOf(dev tensor.Device) tensor.Device {
	if dev == nil {
		return New(nil)
	}
	return dev.Sibling()
}
