package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// The element-wise group's checks beyond the conformance suite: the CPU
// device itself as the reference, at a model's shapes (rows of thousands of
// values, heads of 128, positions far past the rotary tables, a grid-stride
// loop that wraps), and no allocation per call.

// ewPair is the CUDA device under test and the CPU device it must agree
// with, with helpers that put the same values on both.
type ewPair struct {
	t   *testing.T
	d   *Device
	cpu *cpu.Device
	r   *rand.Rand
}

// both returns v as a [rows, cols] float32 tensor on each device.
func (p *ewPair) both(v []float32, rows, cols int) (tensor.Tensor, tensor.Tensor) {
	return devTensor(p.t, p.d, v, rows, cols), cpu.HostTensor(append([]float32(nil), v...), rows, cols)
}

// rand returns n normal values of scale s on both devices.
func (p *ewPair) rand(n int, s float64, rows, cols int) (tensor.Tensor, tensor.Tensor) {
	return p.both(randVals(p.r, n, s), rows, cols)
}

// agree fails unless the CUDA tensor g matches the CPU tensor c to within
// rel·max(1, |c|) per value (0: bit for bit).
func (p *ewPair) agree(what string, g, c tensor.Tensor, rel float64) {
	p.t.Helper()
	got := readAll(p.d, g)
	want, _ := p.cpu.HostF32(c)
	for i, w := range want[:len(got)] {
		if rel == 0 {
			if math.Float32bits(got[i]) != math.Float32bits(w) {
				p.t.Fatalf("%s: value %d is %v, the CPU's %v", what, i, got[i], w)
			}
			continue
		}
		if d := math.Abs(float64(got[i]) - float64(w)); !(d <= rel*math.Max(1, math.Abs(float64(w)))) {
			p.t.Fatalf("%s: value %d is %v, the CPU's %v (difference %.3g)", what, i, got[i], w, d)
		}
	}
}

// ewRotary returns the rotary tables of heads of hd values for positions
// below maxPos (base 500000, Llama 3's) on both devices.
func (p *ewPair) ewRotary(hd, maxPos int) (*tensor.Rotary, *tensor.Rotary) {
	half := hd / 2
	inv := make([]float32, half)
	cos, sin := make([]float32, maxPos*half), make([]float32, maxPos*half)
	for i := range inv {
		inv[i] = float32(1 / math.Pow(500000, float64(2*i)/float64(hd)))
		for q := 0; q < maxPos; q++ {
			cos[q*half+i], sin[q*half+i] = tensor.RoPEAngle(q, inv[i])
		}
	}
	gc, cc := p.both(cos, maxPos, half)
	gs, cs := p.both(sin, maxPos, half)
	gi, ci := p.both(inv, 1, half)
	return &tensor.Rotary{HeadDim: hd, MaxPos: maxPos, Cos: gc, Sin: gs, InvFreq: gi},
		&tensor.Rotary{HeadDim: hd, MaxPos: maxPos, Cos: cc, Sin: cs, InvFreq: ci}
}

// TestElementwiseAgainstCPU runs the group's ops on the CUDA and the CPU
// device at a model's shapes: the copies, casts and exact arithmetic bit for
// bit, the rest to within a few float32 roundings (the GPU fuses
// multiply-adds where the CPU rounds twice).
func TestElementwiseAgainstCPU(t *testing.T) {
	d := openTest(t)
	p := &ewPair{t: t, d: d, cpu: cpu.New(nil), r: rand.New(rand.NewPCG(31, 32))}
	const rows, h = 6, 2304 // h: not a multiple of the blocks

	// Gather from each dtype, GatherRows, SplitCols and ConcatCols.
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		w, _ := halfWeight(dt, randVals(p.r, 50*h, 1), 50, h)
		ids := []int{49, 0, 7, 7, 31, 49}
		g, _ := d.Alloc(tensor.F32, rows, h)
		c, _ := p.cpu.Alloc(tensor.F32, rows, h)
		d.Gather(g, &w, ids)
		p.cpu.Gather(c, &w, ids)
		p.agree("Gather "+dt.String(), g, c, 0)
	}
	xg, xc := p.rand(rows*h, 1, rows, h)
	sel := []int32{5, 0, 3}
	gg, _ := d.Alloc(tensor.F32, 3, h)
	gc, _ := p.cpu.Alloc(tensor.F32, 3, h)
	d.GatherRows(gg, xg, sel)
	p.cpu.GatherRows(gc, xc, sel)
	p.agree("GatherRows", gg, gc, 0)
	widths := []int{1000, 1, 1303}
	var pg, pc []tensor.Tensor
	for _, w := range widths {
		a, _ := d.Alloc(tensor.F32, rows, w)
		b, _ := p.cpu.Alloc(tensor.F32, rows, w)
		pg, pc = append(pg, a), append(pc, b)
	}
	d.SplitCols(xg, pg)
	p.cpu.SplitCols(xc, pc)
	for i := range pg {
		p.agree("SplitCols", pg[i], pc[i], 0)
	}
	cg, _ := d.Alloc(tensor.F32, rows, h)
	d.ConcatCols(cg, pg)
	p.agree("ConcatCols after SplitCols", cg, xc, 0)

	// AddScaledRows: a mixture-of-experts combine of 300 routed rows into
	// 64 tokens (repeats: one block row, indices in order), then of distinct
	// rows out of order (grid y over the indices), bit for bit: the GPU must
	// not fuse the product into the sum.
	for _, distinct := range []bool{false, true} {
		n := 300
		routed := make([]int32, n)
		if distinct {
			n = 50
			routed = routed[:n]
			for i, r := range p.r.Perm(64)[:n] {
				routed[i] = int32(r)
			}
		} else {
			for i := range routed {
				routed[i] = int32(p.r.IntN(64))
			}
		}
		weights := randVals(p.r, n, 0.5)
		srcG, srcC := p.rand(n*h, 1, n, h)
		dstG, dstC := p.rand(64*h, 1, 64, h)
		d.AddScaledRows(dstG, srcG, routed, weights)
		p.cpu.AddScaledRows(dstC, srcC, routed, weights)
		p.agree(fmt.Sprintf("AddScaledRows (distinct %v)", distinct), dstG, dstC, 0)
	}

	// RMSNorm and its backward.
	wg, wc := p.rand(h, 1, 1, h)
	og, _ := d.Alloc(tensor.F32, rows, h)
	oc, _ := p.cpu.Alloc(tensor.F32, rows, h)
	d.RMSNorm(og, xg, wg, 1e-5)
	p.cpu.RMSNorm(oc, xc, wc, 1e-5)
	p.agree("RMSNorm", og, oc, 2e-6)
	dog, doc := p.rand(rows*h, 1, rows, h)
	dxg, dxc := p.rand(rows*h, 1, rows, h)
	dwg, dwc := p.rand(h, 1, 1, h)
	d.RMSNormBackward(dxg, dwg, dog, xg, wg, 1e-5)
	p.cpu.RMSNormBackward(dxc, dwc, doc, xc, wc, 1e-5)
	p.agree("RMSNormBackward dx", dxg, dxc, 2e-6)
	p.agree("RMSNormBackward dw", dwg, dwc, 1e-5)

	// RoPE and its backward, positions in the table and far past it.
	const hd, heads = 128, 18 // heads·hd = h
	rg, rc := p.ewRotary(hd, 64)
	pos := []int32{0, 63, 64, 1000, 131071, 500000}
	posG, _ := d.Alloc(tensor.I32, rows, 1)
	d.WriteI32(posG, pos)
	posC, _ := p.cpu.Alloc(tensor.I32, rows, 1)
	p.cpu.WriteI32(posC, pos)
	qg, qc := p.rand(rows*h, 1, rows, h)
	d.RoPE(qg, heads, posG, rg)
	p.cpu.RoPE(qc, heads, posC, rc)
	p.agree("RoPE", qg, qc, 1e-6)
	d.RoPEBackward(qg, heads, posG, rg)
	p.cpu.RoPEBackward(qc, heads, posC, rc)
	p.agree("RoPEBackward", qg, qc, 1e-6)

	// Activations, forward and backward.
	const I = 3000
	gateG, gateC := p.rand(rows*I, 3, rows, I)
	upG, upC := p.rand(rows*I, 1, rows, I)
	actG, _ := d.Alloc(tensor.F32, rows, I)
	actC, _ := p.cpu.Alloc(tensor.F32, rows, I)
	d.SwiGLU(actG, gateG, upG)
	p.cpu.SwiGLU(actC, gateC, upC)
	p.agree("SwiGLU", actG, actC, 1e-6)
	dgG, dgC := p.rand(rows*I, 1, rows, I)
	duG, duC := p.rand(rows*I, 1, rows, I)
	dyG, dyC := p.rand(rows*I, 1, rows, I)
	d.SwiGLUBackward(dgG, duG, dyG, gateG, upG)
	p.cpu.SwiGLUBackward(dgC, duC, dyC, gateC, upC)
	p.agree("SwiGLUBackward dgate", dgG, dgC, 1e-6)
	p.agree("SwiGLUBackward dup", duG, duC, 1e-6)
	d.AddSiLU(actG, gateG)
	p.cpu.AddSiLU(actC, gateC)
	p.agree("AddSiLU", actG, actC, 1e-6)
	d.SiLUBackward(dgG, dyG, gateG)
	p.cpu.SiLUBackward(dgC, dyC, gateC)
	p.agree("SiLUBackward", dgG, dgC, 1e-6)

	// Residual and bias arithmetic, exact.
	d.Add(actG, upG)
	p.cpu.Add(actC, upC)
	p.agree("Add", actG, actC, 1e-6)
	bg, bc := p.rand(I, 1, 1, I)
	d.AddBias(upG, bg)
	p.cpu.AddBias(upC, bc)
	p.agree("AddBias", upG, upC, 0)
	d.Scale(upG, 0.3)
	p.cpu.Scale(upC, 0.3)
	p.agree("Scale", upG, upC, 0)
	tall := 1000 // rows summed over the warps' lanes
	sg, sc := p.rand(tall*37, 1, tall, 37)
	dsg, dsc := p.rand(37, 1, 1, 37)
	d.SumRows(dsg, sg)
	p.cpu.SumRows(dsc, sc)
	p.agree("SumRows", dsg, dsc, 1e-5)

	// The optimizer, over a grid-stride loop that wraps many times.
	n := 300_001
	ag, ac := p.rand(n, 1, 1, n)
	if got, want := d.SumSquares(ag), p.cpu.SumSquares(ac); math.Abs(got-want) > 1e-12*want {
		t.Fatalf("SumSquares %v, the CPU's %v", got, want)
	}
	mg, _ := d.Alloc(tensor.F32, 1, n)
	vg, _ := d.Alloc(tensor.F32, 1, n)
	mc, _ := p.cpu.Alloc(tensor.F32, 1, n)
	vc, _ := p.cpu.Alloc(tensor.F32, 1, n)
	grG, grC := p.rand(n, 1e-3, 1, n)
	step := tensor.AdamWStep{Decay: 0.999, Beta1: 0.9, Beta2: 0.95, OneMinusBeta1: 0.1, OneMinusBeta2: 0.05, StepSize: 1e-3 / 0.1, SqrtBC2: float32(math.Sqrt(0.05)), Eps: 1e-8}
	d.AdamW(ag, grG, mg, vg, step)
	p.cpu.AdamW(ac, grC, mc, vc, step)
	p.agree("AdamW p", ag, ac, 1e-6)
	p.agree("AdamW m", mg, mc, 1e-6)
	p.agree("AdamW v", vg, vc, 1e-6)

	// Casts of many values, bit for bit.
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		hg, _ := d.Alloc(dt, 1, n)
		hc, _ := p.cpu.Alloc(dt, 1, n)
		bkg, _ := d.Alloc(tensor.F32, 1, n)
		bkc, _ := p.cpu.Alloc(tensor.F32, 1, n)
		xg, xc := p.rand(n, 1000, 1, n)
		d.Cast(hg, xg)
		p.cpu.Cast(hc, xc)
		d.Cast(bkg, hg)
		p.cpu.Cast(bkc, hc)
		p.agree("Cast through "+dt.String(), bkg, bkc, 0)
	}
}

// TestElementwiseNoAllocs checks that the group's ops allocate nothing on
// the Go heap per call (a training step runs thousands).
func TestElementwiseNoAllocs(t *testing.T) {
	d := openTest(t)
	r := rand.New(rand.NewPCG(33, 34))
	const rows, h, hd, heads = 3, 64, 16, 4
	x := devTensor(t, d, randVals(r, rows*h, 1), rows, h)
	y := devTensor(t, d, randVals(r, rows*h, 1), rows, h)
	z := devTensor(t, d, randVals(r, rows*h, 1), rows, h)
	fused := devTensor(t, d, randVals(r, rows*2*h, 1), rows, 2*h)
	w := devTensor(t, d, randVals(r, h, 1), 1, h)
	a, _ := d.Alloc(tensor.F32, rows, 20)
	b, _ := d.Alloc(tensor.F32, rows, h-20)
	half, _ := d.Alloc(tensor.BF16, rows, h)
	emb, _ := halfWeight(tensor.BF16, randVals(r, 10*h, 1), 10, h)
	d.PrepareWeights(&emb)
	ids, rowIDs := []int{3, 9, 0}, []int32{2, 0, 1}
	pos, _ := d.Alloc(tensor.I32, rows, 1)
	d.WriteI32(pos, []int32{1, 5, 40})
	rot := &tensor.Rotary{HeadDim: hd, MaxPos: 8,
		Cos: devTensor(t, d, randVals(r, 8*hd/2, 1), 8, hd/2), Sin: devTensor(t, d, randVals(r, 8*hd/2, 1), 8, hd/2),
		InvFreq: devTensor(t, d, randVals(r, hd/2, 0.1), 1, hd/2)}
	partial := &tensor.Rotary{HeadDim: hd, MaxPos: 8, Dims: hd / 2, AttnFactor: 0.9,
		Cos: devTensor(t, d, randVals(r, 8*hd/4, 1), 8, hd/4), Sin: devTensor(t, d, randVals(r, 8*hd/4, 1), 8, hd/4),
		InvFreq: devTensor(t, d, randVals(r, hd/4, 0.1), 1, hd/4)}
	parts := []tensor.Tensor{a, b}
	step := tensor.AdamWStep{Decay: 1, Beta1: 0.9, Beta2: 0.99, OneMinusBeta1: 0.1, OneMinusBeta2: 0.01, StepSize: 1e-3, SqrtBC2: 0.1, Eps: 1e-8}
	m, v := z.RowRange(0, 1), z.RowRange(1, 2)
	allocs := testing.AllocsPerRun(5, func() {
		d.Gather(x, &emb, ids)
		d.GatherRows(y, x, rowIDs)
		d.SplitCols(x, parts)
		d.ConcatCols(y, parts)
		d.RMSNorm(y, x, w, 1e-5)
		d.RMSNormBackward(z, w, y, x, w, 1e-5)
		d.RoPE(x, heads, pos, rot)
		d.RoPEBackward(x, heads, pos, rot)
		d.Scale(x, 0.5)
		d.AddBias(x, w)
		d.SwiGLU(y, fused, tensor.Tensor{})
		d.SwiGLU(y, x, z)
		d.SwiGLUBackward(z, y, x, x, y)
		d.GELUTanhGLU(y, fused, tensor.Tensor{})
		d.GELUTanhGLU(y, x, z)
		d.ClampedSwiGLU(y, fused, tensor.Tensor{}, 1.702, 7)
		d.ClampedSwiGLU(y, x, z, 1.702, 7)
		d.Softcap(y, 3)
		d.RoPE(x, heads, pos, partial)
		d.AddSiLU(y, x)
		d.SiLUBackward(z, y, x)
		d.Add(y, x)
		d.SumRows(w, x)
		_ = d.SumSquares(x)
		d.AdamW(x.RowRange(2, 3), y.RowRange(0, 1), m, v, step)
		d.Cast(half, x)
		d.Cast(y, half)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run of the element-wise ops, want 0", allocs)
	}
}

// TestAddScaledRowsDistinct checks the host's choice of AddScaledRows'
// launch, which the stand-in cannot show (it runs a grid's block rows one
// after another, so a parallel launch over repeated rows would still add
// them in order there): increasing, shuffled and repeated rows, a dst that
// grows the marks, and marks that survive the epoch's wrap-around without a
// stale match.
func TestAddScaledRowsDistinct(t *testing.T) {
	var o elementwiseOps
	for _, c := range []struct {
		rows []int32
		r    int
		want bool
	}{
		{nil, 0, true},
		{[]int32{3}, 4, true},
		{[]int32{0, 1, 5, 9}, 10, true},
		{[]int32{9, 1, 5, 0}, 10, true},
		{[]int32{1, 1}, 10, false},
		{[]int32{4, 2, 7, 2}, 10, false},
		{[]int32{4, 2, 7}, 10, true}, // the last call's marks are stale now
		{[]int32{40, 2, 39, 0}, 41, true},
		{[]int32{40, 2, 39, 40}, 41, false},
	} {
		if got := o.distinct(c.rows, c.r); got != c.want {
			t.Fatalf("distinct(%v) = %v, want %v", c.rows, got, c.want)
		}
	}
	o.epoch = math.MaxUint32 - 1 // the next two calls wrap it
	for i := 0; i < 3; i++ {
		if !o.distinct([]int32{5, 3}, 41) {
			t.Fatalf("distinct([5 3]) = false after %d calls near the epoch's wrap", i)
		}
	}
	if o.distinct([]int32{5, 3, 5}, 41) {
		t.Fatal("distinct([5 3 5]) = true after the epoch's wrap")
	}
}
