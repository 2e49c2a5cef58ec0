package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// The attention group's tests beyond the conformance suite, whose contexts
// stay under one chunk and whose heads are 16 wide: long contexts split into
// chunks, prefill tiles, 64- and 128-wide heads, several sequences of every
// kind in one call, against the CPU device; and the bits a verification
// pass must share with decoding.

// attnCase is a sequence of an Attend test: n committed positions, p pending
// and t new ones; parents nil for a chain, else the parents of the p+t nodes.
type attnCase struct {
	n, p, t int
	parents []int
}

// treeMask returns the [t, p+t] ancestor mask of the new nodes of a tree of
// p+t nodes.
func treeMask(parents []int, p int) []bool {
	w := len(parents)
	m := make([]bool, w*w)
	for i, par := range parents {
		if par >= 0 {
			copy(m[i*w:(i+1)*w], m[par*w:(par+1)*w])
		}
		m[i*w+i] = true
	}
	return m[p*w:]
}

// attnRun runs Attend of the cases on dev with caches and queries from r
// (layer 1 of two), returning out.
func attnRun(t *testing.T, dev tensor.Device, shape tensor.AttnShape, cases []attnCase, seed uint64) []float32 {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	qd, kd := shape.Heads*shape.HeadDim, shape.KVHeads*shape.HeadDim
	var seqs []tensor.AttnSeq
	rows := 0
	for _, c := range cases {
		w := c.n + c.p + c.t
		kv, err := dev.NewKV(2, kd, w+3)
		if err != nil {
			t.Fatal(err)
		}
		for l := 0; l < 2; l++ {
			kt, vt := hostOrDev(t, dev, randVals(r, w*kd, 1), w, kd), hostOrDev(t, dev, randVals(r, w*kd, 1), w, kd)
			dev.KVWrite(kv, l, 0, kt, vt)
		}
		s := tensor.AttnSeq{KV: kv, Row0: rows, T: c.t, N: c.n, P: c.p}
		if c.parents != nil {
			s.Mask = treeMask(c.parents, c.p)
		}
		seqs = append(seqs, s)
		rows += c.t
	}
	// Queries of at most 8/√HeadDim per value: 0.5 up to 256 values, and
	// for wider heads the scores' spread of a 256-wide head (Attend's
	// queries come scaled by 1/√HeadDim), not one that grows with the width
	// until a softmax picks a single key by float32 rounding.
	qs := min(0.5, 8/math.Sqrt(float64(shape.HeadDim)))
	q := hostOrDev(t, dev, randVals(r, rows*qd, qs), rows, qd)
	out := hostOrDev(t, dev, make([]float32, rows*qd), rows, qd)
	dev.Attend(out, q, 1, shape, seqs)
	v := make([]float32, rows*qd)
	dev.Read(v, out)
	return v
}

// hostOrDev returns a float32 tensor of dev holding v.
func hostOrDev(t *testing.T, dev tensor.Device, v []float32, rows, cols int) tensor.Tensor {
	t.Helper()
	x, err := dev.Alloc(tensor.F32, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	dev.Write(x, v)
	return x
}

// closeTo fails unless got and want differ by at most tol·max(1, |want|).
func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= tol*math.Max(1, math.Abs(float64(want[i])))) {
			t.Fatalf("%s: value %d is %v, want %v (difference %.3g)", what, i, got[i], want[i], d)
		}
	}
}

// TestAttendLong checks Attend against the CPU device on contexts that span
// several chunks (decode rows, chains and trees with pending nodes), prefill
// chains that run in tiles, and heads of 64 and 128 values (vector loads),
// all kinds in one call, with and without a sliding window and a softcap;
// and one KV head of 576 values (drafter_attend_wide, DeepSeek-V3's absorbed
// attention), whose prefill-class chains run a row per block.
func TestAttendLong(t *testing.T) {
	d := openTest(t)
	cpu := cpu.New(nil)
	cases := []attnCase{
		{n: 3*attChunk + 17, t: 1},
		{n: attChunk - 3, t: 6},
		{n: 2*attChunk + 1, p: 2, t: 4, parents: []int{-1, 0, 1, 1, 0, 4}},
		{n: attChunk + 40, t: attChainRows + 37},
		{n: 0, t: 1},
	}
	for _, shape := range []tensor.AttnShape{{Heads: 8, KVHeads: 2, HeadDim: 64}, {Heads: 4, KVHeads: 4, HeadDim: 128}, {Heads: 2, KVHeads: 1, HeadDim: 160},
		// Gemma-2/3's variants: windows that start past a chunk or a
		// prefill tile's first keys, a softcap.
		{Heads: 8, KVHeads: 2, HeadDim: 64, Window: attChunk + 10, Softcap: 2}, {Heads: 4, KVHeads: 4, HeadDim: 128, Window: 30},
		{Heads: 2, KVHeads: 1, HeadDim: 160, Window: 3, Softcap: 0.5},
		{Heads: 3, KVHeads: 1, HeadDim: 576}, {Heads: 2, KVHeads: 1, HeadDim: 576, Window: attChunk + 10, Softcap: 2}} {
		t.Run(fmt.Sprintf("hd%d window %d softcap %v", shape.HeadDim, shape.Window, shape.Softcap), func(t *testing.T) {
			got := attnRun(t, d, shape, cases, 5)
			want := attnRun(t, cpu, shape, cases, 5)
			closeTo(t, "Attend", got, want, 2e-5)
		})
	}
}

// TestAttendSameBits checks what lossless speculative decoding relies on: a
// draft node that sees a prefix of positions gets the same bits in a
// verification pass (a chain, a tree, a tree's later level over pending
// nodes, beside other sequences) as the decode step at its position, here
// across a chunk boundary, with grouped-query heads of 64 values and with
// one KV head of 576 (drafter_attend_wide).
func TestAttendSameBits(t *testing.T) {
	d := openTest(t)
	for _, shape := range []tensor.AttnShape{{Heads: 4, KVHeads: 2, HeadDim: 64}, {Heads: 4, KVHeads: 1, HeadDim: 576}} {
		t.Run(fmt.Sprintf("hd%d", shape.HeadDim), func(t *testing.T) { attendSameBits(t, d, shape) })
	}
}

// attendSameBits is TestAttendSameBits' check of one head layout.
func attendSameBits(t *testing.T, d *Device, shape tensor.AttnShape) {
	qd, kd := shape.Heads*shape.HeadDim, shape.KVHeads*shape.HeadDim
	r := rand.New(rand.NewPCG(9, 9))
	const n, t6 = attChunk - 3, 6
	kv, err := d.NewKV(1, kd, n+t6)
	if err != nil {
		t.Fatal(err)
	}
	d.KVWrite(kv, 0, 0, devTensor(t, d, randVals(r, (n+t6)*kd, 1), n+t6, kd), devTensor(t, d, randVals(r, (n+t6)*kd, 1), n+t6, kd))
	other, err := d.NewKV(1, kd, 3*attChunk)
	if err != nil {
		t.Fatal(err)
	}
	d.KVWrite(other, 0, 0, devTensor(t, d, randVals(r, 3*attChunk*kd, 1), 3*attChunk, kd), devTensor(t, d, randVals(r, 3*attChunk*kd, 1), 3*attChunk, kd))
	qv := randVals(r, (t6+1)*qd, 0.5)
	q := devTensor(t, d, qv, t6+1, qd)
	out, _ := d.Alloc(tensor.F32, t6+1, qd)

	// Decode steps: node i alone at position n+i.
	dec := make([]float32, t6*qd)
	for i := 0; i < t6; i++ {
		d.Attend(out.RowRange(i, i+1), q.RowRange(i, i+1), 0, shape, []tensor.AttnSeq{{KV: kv, T: 1, N: n + i}})
	}
	d.Read(dec, out.RowRange(0, t6))

	chain := []int{-1, 0, 1, 2, 3, 4}
	for _, c := range []struct {
		name  string
		seqs  []tensor.AttnSeq
		first int // q's row of node 0
		check []int
	}{
		{"chain", []tensor.AttnSeq{{KV: kv, T: t6, N: n}}, 0, []int{0, 1, 2, 3, 4, 5}},
		{"chain-shaped tree", []tensor.AttnSeq{{KV: kv, T: t6, N: n, Mask: treeMask(chain, 0)}}, 0, []int{0, 1, 2, 3, 4, 5}},
		{"forked tree", []tensor.AttnSeq{{KV: kv, T: t6, N: n, Mask: treeMask([]int{-1, 0, 1, 1, 0, 4}, 0)}}, 0, []int{0, 1, 2}},
		{"pending level", []tensor.AttnSeq{{KV: kv, T: 3, N: n, P: 3, Mask: treeMask(chain, 3)}}, -3, []int{3, 4, 5}},
		{"beside a long decode", []tensor.AttnSeq{{KV: other, T: 1, N: 3*attChunk - 1, Row0: t6}, {KV: kv, T: t6, N: n}}, 0, []int{0, 1, 2, 3, 4, 5}},
	} {
		// Node i's query is q's row i: the pending level's rows start at node 3.
		rows := 0
		for _, s := range c.seqs {
			rows = max(rows, s.Row0+s.T)
		}
		qs := q
		if c.first < 0 {
			qs = q.RowRange(-c.first, -c.first+rows)
		}
		d.Attend(out.RowRange(0, rows), qs, 0, shape, c.seqs)
		got := make([]float32, rows*qd)
		d.Read(got, out.RowRange(0, rows))
		for _, i := range c.check {
			row := i + c.first
			for x := 0; x < qd; x++ {
				if math.Float32bits(got[row*qd+x]) != math.Float32bits(dec[i*qd+x]) {
					t.Fatalf("%s: node %d value %d is %v, its decode step's %v", c.name, i, x, got[row*qd+x], dec[i*qd+x])
				}
			}
		}
	}
}

// TestAttendTTTLarge checks AttendTTT and its backward against the CPU device
// with 128-wide heads (the tiled kernels) and 160-wide ones (the row
// kernels), sequences longer than a block's tile and two later steps.
func TestAttendTTTLarge(t *testing.T) {
	d := openTest(t)
	for _, hd := range []int{128, 160} {
		t.Run(fmt.Sprintf("hd%d", hd), func(t *testing.T) { tttLarge(t, d, hd) })
	}
}

func tttLarge(t *testing.T, d *Device, hd int) {
	cpu := cpu.New(nil)
	shape := tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: hd}
	spans := []tensor.Span{{Start: 0, N: 150}, {Start: 151, N: 140}}
	const rows, k = 291, 2
	qd, kd := shape.Heads*shape.HeadDim, shape.KVHeads*shape.HeadDim
	r := rand.New(rand.NewPCG(4, 4))
	qv, dov := randVals(r, rows*qd, 1), randVals(r, rows*qd, 1)
	var kvs, vvs [][]float32
	for m := 0; m <= k; m++ {
		kvs, vvs = append(kvs, randVals(r, rows*kd, 1)), append(vvs, randVals(r, rows*kd, 1))
	}
	run := func(dev tensor.Device) (out, lse, dq []float32, dk, dv [][]float32) {
		var keys, vals, dkeys, dvals []tensor.Tensor
		for m := 0; m <= k; m++ {
			keys = append(keys, hostOrDev(t, dev, kvs[m], rows, kd))
			vals = append(vals, hostOrDev(t, dev, vvs[m], rows, kd))
			dkeys = append(dkeys, hostOrDev(t, dev, make([]float32, rows*kd), rows, kd))
			dvals = append(dvals, hostOrDev(t, dev, make([]float32, rows*kd), rows, kd))
		}
		q := hostOrDev(t, dev, qv, rows, qd)
		o := hostOrDev(t, dev, make([]float32, rows*qd), rows, qd)
		l := hostOrDev(t, dev, make([]float32, rows*shape.Heads), rows, shape.Heads)
		g := hostOrDev(t, dev, make([]float32, rows*qd), rows, qd)
		dev.AttendTTT(o, l, q, keys, vals, shape, spans)
		dev.AttendTTTBackward(g, dkeys, dvals, hostOrDev(t, dev, dov, rows, qd), o, l, q, keys, vals, shape, spans)
		read := func(x tensor.Tensor) []float32 {
			v := make([]float32, x.Len())
			dev.Read(v, x)
			return v
		}
		for m := 0; m <= k; m++ {
			dk, dv = append(dk, read(dkeys[m])), append(dv, read(dvals[m]))
		}
		return read(o), read(l), read(g), dk, dv
	}
	o1, l1, g1, dk1, dv1 := run(d)
	o2, l2, g2, dk2, dv2 := run(cpu)
	closeTo(t, "AttendTTT out", o1, o2, 2e-5)
	closeTo(t, "AttendTTT lse", l1, l2, 2e-5)
	closeTo(t, "AttendTTTBackward dq", g1, g2, 1e-4)
	for m := 0; m <= k; m++ {
		closeTo(t, fmt.Sprintf("AttendTTTBackward dkeys[%d]", m), dk1[m], dk2[m], 1e-4)
		closeTo(t, fmt.Sprintf("AttendTTTBackward dvals[%d]", m), dv1[m], dv2[m], 1e-4)
	}
}

// TestAttendLayers checks that the layers of a pass, which share one upload
// of Attend's tables, each read their own layer of the caches.
func TestAttendLayers(t *testing.T) {
	d := openTest(t)
	cpu := cpu.New(nil)
	shape := tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 32}
	qd, kd := shape.Heads*shape.HeadDim, shape.KVHeads*shape.HeadDim
	const layers = 3
	cases := []attnCase{{n: attChunk + 9, t: 1}, {n: 20, p: 1, t: 3, parents: []int{-1, 0, 0, 1}}, {n: 5, t: 70}}
	r := rand.New(rand.NewPCG(7, 7))
	type side struct {
		dev  tensor.Device
		seqs []tensor.AttnSeq
		q    tensor.Tensor
	}
	var sides [2]side
	rows := 0
	for _, c := range cases {
		rows += c.t
	}
	qv := randVals(r, rows*qd, 0.5)
	for i, dev := range []tensor.Device{d, cpu} {
		sides[i].dev = dev
		sides[i].q = hostOrDev(t, dev, qv, rows, qd)
	}
	row := 0
	for _, c := range cases {
		w := c.n + c.p + c.t
		var mask []bool
		if c.parents != nil {
			mask = treeMask(c.parents, c.p)
		}
		kvs := make([][2][]float32, layers)
		for l := range kvs {
			kvs[l] = [2][]float32{randVals(r, w*kd, 1), randVals(r, w*kd, 1)}
		}
		for i := range sides {
			dev := sides[i].dev
			kv, err := dev.NewKV(layers, kd, w)
			if err != nil {
				t.Fatal(err)
			}
			for l := range kvs {
				dev.KVWrite(kv, l, 0, hostOrDev(t, dev, kvs[l][0], w, kd), hostOrDev(t, dev, kvs[l][1], w, kd))
			}
			sides[i].seqs = append(sides[i].seqs, tensor.AttnSeq{KV: kv, Row0: row, T: c.t, N: c.n, P: c.p, Mask: mask})
		}
		row += c.t
	}
	for l := 0; l < layers; l++ {
		var res [2][]float32
		for i, s := range sides {
			out := hostOrDev(t, s.dev, make([]float32, rows*qd), rows, qd)
			s.dev.Attend(out, s.q, l, shape, s.seqs)
			res[i] = make([]float32, rows*qd)
			s.dev.Read(res[i], out)
		}
		closeTo(t, fmt.Sprintf("Attend layer %d", l), res[0], res[1], 2e-5)
	}
}

// TestAttendWidthLimits checks the widths the attention kernels take: Attend
// up to attWideDim values (drafter_attend_wide past attMaxDim), the
// training-time-test attention up to attMaxDim (its kernels hold two values
// per thread); a wider head panics before anything is launched.
func TestAttendWidthLimits(t *testing.T) {
	d := openTest(t)
	panics := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Fatalf("%s did not panic", what)
			}
		}()
		f()
	}
	var none tensor.Tensor
	panics("Attend of 577-wide heads", func() {
		d.Attend(none, none, 0, tensor.AttnShape{Heads: 1, KVHeads: 1, HeadDim: attWideDim + 1}, nil)
	})
	panics("AttendTTT of 257-wide heads", func() {
		d.AttendTTT(none, none, none, []tensor.Tensor{none}, []tensor.Tensor{none}, tensor.AttnShape{Heads: 1, KVHeads: 1, HeadDim: attMaxDim + 1}, nil)
	})
	// The widest Attend head runs (no sequences: nothing to launch).
	out := devTensor(t, d, make([]float32, attWideDim), 1, attWideDim)
	d.Attend(out, out, 0, tensor.AttnShape{Heads: 1, KVHeads: 1, HeadDim: attWideDim}, nil)
}
