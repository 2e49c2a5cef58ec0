package tensortest

import (
	"fmt"
	"math"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The checks of the ops that Gemma-2/3 and Phi-3 targets add to Llama's:
// Softcap, GELUTanhGLU, partial and scaled rotaries, and Attend's softcap
// and sliding window, each against a float64 reference written here from
// the ops' definitions (Hugging Face's), not from a device's code.

// softcap checks Softcap with a cap small enough that tanh saturates for
// most values, over a tensor large enough to be split over the workers.
func softcap(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 30)
	for _, n := range []int{37, 70000} {
		const c = 5
		xv := e.rand(n, 20)
		x := e.tensor(xv, 1, n)
		dev.Softcap(x, c)
		want := make([]float64, n)
		for i, v := range xv {
			want[i] = c * math.Tanh(float64(v)/c)
		}
		e.near(fmt.Sprintf("Softcap of %d values", n), e.read(x), want, nil)
	}
}

// geluTanh is gelu(approximate='tanh') in float64.
func geluTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// geluGLU checks GELUTanhGLU with separate gate and up and fused, as
// elementwise does SwiGLU.
func geluGLU(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 31)
	for _, shape := range [][2]int{{3, 7}, {70, 500}} { // inline, and split over the workers
		rows, I := shape[0], shape[1]
		gv, uv := e.rand(rows*I, 3), e.rand(rows*I, 1)
		gate, up := e.tensor(gv, rows, I), e.tensor(uv, rows, I)
		out, _ := dev.Alloc(tensor.F32, rows, I)
		dev.GELUTanhGLU(out, gate, up)
		want := make([]float64, rows*I)
		for i, g := range gv {
			want[i] = geluTanh(float64(g)) * float64(uv[i])
		}
		sep := e.read(out)
		e.near("GELUTanhGLU", sep, want, nil)
		fv := make([]float32, 0, 2*rows*I)
		for r := 0; r < rows; r++ {
			fv = append(fv, gv[r*I:(r+1)*I]...)
			fv = append(fv, uv[r*I:(r+1)*I]...)
		}
		fused := e.tensor(fv, rows, 2*I)
		out2, _ := dev.Alloc(tensor.F32, rows, I)
		dev.GELUTanhGLU(out2, fused, tensor.Tensor{})
		e.same("GELUTanhGLU fused", e.read(out2), sep)
	}
}

// partialRotary returns the rotation tables of a rotary of dims of hd values
// per head (base 10000 over dims, as Hugging Face builds a partial rotary's
// inv_freq) for positions below maxPos, with attention factor f.
func (e *env) partialRotary(hd, dims, maxPos int, f float32) *tensor.Rotary {
	half := dims / 2
	inv := make([]float32, half)
	cos, sin := make([]float32, maxPos*half), make([]float32, maxPos*half)
	for i := range inv {
		inv[i] = float32(1 / math.Pow(10000, float64(2*i)/float64(dims)))
		for p := 0; p < maxPos; p++ {
			cos[p*half+i], sin[p*half+i] = tensor.RoPEAngle(p, inv[i])
		}
	}
	return &tensor.Rotary{HeadDim: hd, MaxPos: maxPos, Dims: dims, AttnFactor: f,
		Cos: e.tensor(cos, maxPos, half), Sin: e.tensor(sin, maxPos, half), InvFreq: e.tensor(inv, 1, half)}
}

// partialRoPE checks RoPE and RoPEBackward of partial rotaries (and a full
// one) with and without an attention factor, at positions inside and past
// the tables: the first Dims values of each head turn as a head of Dims
// values, scaled by the factor, and the others stay exactly as they were.
func partialRoPE(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 32)
	const heads, maxPos = 3, 6
	pos := []int32{0, 5, 6, 40} // two past the table
	rows := len(pos)
	pt, err := dev.Alloc(tensor.I32, rows, 1)
	if err != nil {
		t.Fatal(err)
	}
	dev.WriteI32(pt, pos)
	for _, c := range []struct {
		hd, dims int
		f        float32
	}{{10, 6, 0}, {10, 6, 0.8}, {12, 4, 1.25}, {8, 8, 1.5}, {8, 0, 0.5}} {
		name := fmt.Sprintf("hd %d dims %d factor %v", c.hd, c.dims, c.f)
		rot := e.partialRotary(c.hd, c.dims, maxPos, c.f)
		dims := c.dims
		if dims == 0 {
			dims = c.hd
			rot = e.partialRotary(c.hd, c.hd, maxPos, c.f)
			rot.Dims = 0
		}
		half := dims / 2
		f := 1.0
		if c.f != 0 {
			f = float64(c.f)
		}
		inv := e.read(rot.InvFreq)
		w := heads * c.hd
		for _, sign := range []float64{1, -1} {
			xv := e.rand(rows*w, 1)
			x := e.tensor(xv, rows, w)
			if sign > 0 {
				dev.RoPE(x, heads, pt, rot)
			} else {
				dev.RoPEBackward(x, heads, pt, rot)
			}
			got := e.read(x)
			want := make([]float64, len(xv))
			for r, p := range pos {
				for h := 0; h < heads; h++ {
					o := r*w + h*c.hd
					for i := 0; i < c.hd; i++ {
						want[o+i] = float64(xv[o+i])
					}
					for i := 0; i < half; i++ {
						a := float64(float32(p) * inv[i])
						cs, sn := f*math.Cos(a), sign*f*math.Sin(a)
						x0, x1 := float64(xv[o+i]), float64(xv[o+i+half])
						want[o+i], want[o+i+half] = x0*cs-x1*sn, x1*cs+x0*sn
					}
					for i := dims; i < c.hd; i++ {
						if math.Float32bits(got[o+i]) != math.Float32bits(xv[o+i]) {
							t.Fatalf("%s sign %v: row %d head %d value %d changed from %v to %v", name, sign, r, h, i, xv[o+i], got[o+i])
						}
					}
				}
			}
			e.near(fmt.Sprintf("RoPE %s sign %v", name, sign), got, want, nil)
		}
	}
}

// windowCase is a sequence of attendWindow: n committed positions, p pending
// and t new ones; parents nil for a chain, else the parents of the p+t
// nodes.
type windowCase struct {
	n, t, p int
	parents []int
}

// windowCaseSets returns the calls of attendWindow (and attendSinks): decode
// rows over short and long contexts, short chains, chains of more than 64
// rows, trees with and without pending nodes, several sequences a call.
func windowCaseSets() [][]windowCase {
	return [][]windowCase{
		{{n: 10, t: 1}, {n: 0, t: 1}, {n: 7, t: 5}},
		{{n: 600, t: 1}, {n: 530, t: 1}, {n: 261, t: 3}},
		{{n: 3, t: 150}},
		{{n: 520, t: 70}, {n: 4, t: 2}},
		{{n: 20, t: 6, parents: []int{-1, 0, 0, 1, 3, -1}}, {n: 4, t: 3}},
		{{n: 9, t: 70, parents: chainAndFork(70)}},
		{{n: 12, t: 4, p: 6, parents: []int{-1, -1, 0, 1, 2, 3, 4, 5, 4, 0}}, {n: 300, t: 2, p: 3, parents: []int{-1, 0, 1, 2, 2}}},
	}
}

// attendWindow checks Attend with a softcap, a sliding window or both:
// decode rows (some over contexts of several hundred positions, which a GPU
// splits into chunks), short chains, chains of more than 64 rows (the CPU's
// backend path and a GPU's tiled one, with windows that start after the
// block's first keys), and trees with and without pending nodes whose
// windows end in the committed positions or among the tree's own.
func attendWindow(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 33)
	caseSets := windowCaseSets()
	for _, sh := range []struct {
		window  int
		softcap float32
	}{{0, 0.75}, {5, 0}, {1, 0}, {37, 0.75}, {300, 2}} {
		shape := tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 16, Window: sh.window, Softcap: sh.softcap}
		for k, cs := range caseSets {
			attendCheck(e, shape, cs, fmt.Sprintf("Attend window %d softcap %v case %d", sh.window, sh.softcap, k))
		}
	}
	// A negative window panics.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Attend with window -1 did not panic")
			}
		}()
		kv, _ := dev.NewKV(1, 32, 4)
		q := e.tensor(e.rand(64, 1), 1, 64)
		dev.Attend(q, q, 0, tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 16, Window: -1}, []tensor.AttnSeq{{KV: kv, T: 1, N: 2}})
	}()
}

// attendCheck runs Attend of the sequences cs with shape over random caches
// and queries and checks the result against the float64 reference: per row
// its position and the positions it sees come from AttnShape's definition
// (a chain's row i at N+P+i seeing j <= p with p-j < Window; a tree's row at
// N+depth seeing the committed j with p-j < Window and the ancestors of
// depth > depth-Window), its scores q·k are capped to
// Softcap·tanh(s/Softcap), and softmax and the weighted values follow in
// float64, the head's sink (when shape.Sinks is set) one more score in the
// softmax's maximum and denominator.
func attendCheck(e *env, shape tensor.AttnShape, cs []windowCase, what string) {
	e.t.Helper()
	dev := e.dev
	qd, kd := shape.Heads*shape.HeadDim, shape.KVHeads*shape.HeadDim
	var as []tensor.AttnSeq
	var keys, vals [][]float32
	rows := 0
	for _, c := range cs {
		w := c.n + c.p + c.t
		kv, err := dev.NewKV(2, kd, w+2)
		if err != nil {
			e.t.Fatal(err)
		}
		kall, vall := e.rand(w*kd, 1), e.rand(w*kd, 1)
		dev.KVWrite(kv, 0, 0, e.tensor(e.rand(w*kd, 1), w, kd), e.tensor(e.rand(w*kd, 1), w, kd))
		dev.KVWrite(kv, 1, 0, e.tensor(kall, w, kd), e.tensor(vall, w, kd))
		a := tensor.AttnSeq{KV: kv, Row0: rows, T: c.t, N: c.n, P: c.p}
		if c.parents != nil {
			a.Mask = ancestors(c.parents)[c.p*(c.p+c.t):]
		}
		as = append(as, a)
		keys, vals = append(keys, kall), append(vals, vall)
		rows += c.t
	}
	qv := e.rand(rows*qd, 0.5)
	q := e.tensor(qv, rows, qd)
	out, _ := dev.Alloc(tensor.F32, rows, qd)
	dev.Attend(out, q, 1, shape, as)
	want, scale := make([]float64, rows*qd), make([]float64, rows*qd)
	rep := shape.Heads / shape.KVHeads
	var sinks []float32
	if !shape.Sinks.Empty() {
		sinks = e.read(shape.Sinks)
	}
	win := shape.Window
	if win == 0 {
		win = math.MaxInt32
	}
	for b, a := range as {
		w := a.P + a.T
		for i := 0; i < a.T; i++ {
			row := a.Row0 + i
			// The positions the row sees.
			var ks []int
			if a.Mask == nil {
				p := a.N + a.P + i
				for j := 0; j <= p; j++ {
					if p-j < win {
						ks = append(ks, j)
					}
				}
			} else {
				mk := a.Mask[i*w : (i+1)*w]
				depth := -1
				for _, ok := range mk {
					if ok {
						depth++
					}
				}
				p := a.N + depth
				for j := 0; j < a.N; j++ {
					if p-j < win {
						ks = append(ks, j)
					}
				}
				k := 0 // the depth of the next set entry
				for c, ok := range mk {
					if ok {
						if depth-k < win {
							ks = append(ks, a.N+c)
						}
						k++
					}
				}
			}
			for h := 0; h < shape.Heads; h++ {
				off := h / rep * shape.HeadDim
				sc := make([]float64, len(ks))
				mx := math.Inf(-1)
				for x, c := range ks {
					var s float64
					for d := 0; d < shape.HeadDim; d++ {
						s += float64(qv[row*qd+h*shape.HeadDim+d]) * float64(keys[b][c*kd+off+d])
					}
					if shape.Softcap != 0 {
						cp := float64(shape.Softcap)
						s = cp * math.Tanh(s/cp)
					}
					sc[x] = s
					mx = math.Max(mx, s)
				}
				var sum float64
				if sinks != nil {
					sk := float64(sinks[h])
					mx = math.Max(mx, sk)
					sum = math.Exp(sk - mx)
				}
				for x := range sc {
					sc[x] = math.Exp(sc[x] - mx)
					sum += sc[x]
				}
				for d := 0; d < shape.HeadDim; d++ {
					var o, ab float64
					for x, c := range ks {
						p := sc[x] / sum * float64(vals[b][c*kd+off+d])
						o += p
						ab += math.Abs(p)
					}
					want[row*qd+h*shape.HeadDim+d] = o
					scale[row*qd+h*shape.HeadDim+d] = math.Max(ab, 1e-3)
				}
			}
		}
	}
	e.near(what, e.read(out), want, scale)
}

// attendWindowBits checks the property lossless speculative decoding relies
// on with a window and a softcap set: a draft node whose ancestors are the
// first nodes (a chain, a chain-shaped tree, the prefix of a forked tree, a
// later level over pending nodes, beside a long decode row) is scored bit
// for bit as the decode step at its position, for windows that end in the
// committed positions, among the draft's, or that cover everything, over a
// context long enough that a GPU splits its rows into chunks.
func attendWindowBits(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 34)
	for _, sh := range []struct {
		window  int
		softcap float32
	}{{200, 0.75}, {3, 1.5}, {1000, 0.75}, {40, 0}} {
		shape := tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 16, Window: sh.window, Softcap: sh.softcap}
		attendBits(e, shape, fmt.Sprintf("window %d softcap %v", sh.window, sh.softcap))
	}
}

// attendBits checks attendWindowBits' property for one shape: each draft
// node of the chains and trees below is scored bit for bit as the decode
// step at its position, over a context of 530 committed positions.
func attendBits(e *env, shape tensor.AttnShape, what string) {
	t, dev := e.t, e.dev
	t.Helper()
	const n, t6 = 530, 6
	qd, kd := shape.Heads*shape.HeadDim, shape.KVHeads*shape.HeadDim
	kv, err := dev.NewKV(1, kd, n+t6)
	if err != nil {
		t.Fatal(err)
	}
	dev.KVWrite(kv, 0, 0, e.tensor(e.rand((n+t6)*kd, 1), n+t6, kd), e.tensor(e.rand((n+t6)*kd, 1), n+t6, kd))
	const long = 900
	other, err := dev.NewKV(1, kd, long)
	if err != nil {
		t.Fatal(err)
	}
	dev.KVWrite(other, 0, 0, e.tensor(e.rand(long*kd, 1), long, kd), e.tensor(e.rand(long*kd, 1), long, kd))
	q := e.tensor(e.rand((t6+1)*qd, 0.5), t6+1, qd)
	out, _ := dev.Alloc(tensor.F32, t6+1, qd)
	for i := 0; i < t6; i++ {
		dev.Attend(out.RowRange(i, i+1), q.RowRange(i, i+1), 0, shape, []tensor.AttnSeq{{KV: kv, T: 1, N: n + i}})
	}
	dec := e.read(out.RowRange(0, t6))
	chain := []int{-1, 0, 1, 2, 3, 4}
	for _, c := range []struct {
		name  string
		seqs  []tensor.AttnSeq
		first int // q's row of node 0
		check []int
	}{
		{"chain", []tensor.AttnSeq{{KV: kv, T: t6, N: n}}, 0, []int{0, 1, 2, 3, 4, 5}},
		{"chain-shaped tree", []tensor.AttnSeq{{KV: kv, T: t6, N: n, Mask: ancestors(chain)}}, 0, []int{0, 1, 2, 3, 4, 5}},
		{"forked tree", []tensor.AttnSeq{{KV: kv, T: t6, N: n, Mask: ancestors([]int{-1, 0, 1, 1, 0, 4})}}, 0, []int{0, 1, 2}},
		{"pending level", []tensor.AttnSeq{{KV: kv, T: 3, N: n, P: 3, Mask: ancestors(chain)[3*t6:]}}, -3, []int{3, 4, 5}},
		{"beside a long decode", []tensor.AttnSeq{{KV: other, T: 1, N: long - 1, Row0: t6}, {KV: kv, T: t6, N: n, Mask: ancestors(chain)}}, 0, []int{0, 1, 2, 3, 4, 5}},
	} {
		rows := 0
		for _, s := range c.seqs {
			rows = max(rows, s.Row0+s.T)
		}
		qs := q
		if c.first < 0 {
			qs = q.RowRange(-c.first, -c.first+rows)
		}
		dev.Attend(out.RowRange(0, rows), qs, 0, shape, c.seqs)
		got := e.read(out.RowRange(0, rows))
		for _, i := range c.check {
			row := i + c.first
			for x := 0; x < qd; x++ {
				if math.Float32bits(got[row*qd+x]) != math.Float32bits(dec[i*qd+x]) {
					t.Fatalf("%s, %s: node %d value %d is %v, its decode step's %v",
						what, c.name, i, x, got[row*qd+x], dec[i*qd+x])
				}
			}
		}
	}
}

// allocAttendCases returns, for the allocation checks of Attend, 100 rows
// of queries and their output, over one cache of slots positions, and four
// calls: a decode row after decodeN positions, a chain of 5, a chain of all
// 100 rows, and a tree of 6 after treeN.
func (e *env) allocAttendCases(shape tensor.AttnShape, slots, decodeN, treeN int) (q, out tensor.Tensor, seqs [][]tensor.AttnSeq) {
	dev := e.dev
	qd, kd := shape.Heads*shape.HeadDim, shape.KVHeads*shape.HeadDim
	kv, err := dev.NewKV(1, kd, slots)
	if err != nil {
		e.t.Fatal(err)
	}
	dev.KVWrite(kv, 0, 0, e.tensor(e.rand(slots*kd, 1), slots, kd), e.tensor(e.rand(slots*kd, 1), slots, kd))
	const rows = 100
	q = e.tensor(e.rand(rows*qd, 0.5), rows, qd)
	out, _ = dev.Alloc(tensor.F32, rows, qd)
	return q, out, [][]tensor.AttnSeq{
		{{KV: kv, T: 1, N: decodeN}},
		{{KV: kv, T: 5, N: 90}},
		{{KV: kv, T: rows, N: 20}},
		{{KV: kv, T: 6, N: treeN, Mask: ancestors([]int{-1, 0, 1, 1, 0, 4})}},
	}
}

// gemmaAllocs checks that the per-token ops added for Gemma-2/3 and Phi-3
// allocate nothing per call once their scratch has grown: Attend with a
// window and a softcap over a decode row, a short chain, a long chain and a
// tree, GELUTanhGLU, Softcap and a partial rotary's RoPE.
func gemmaAllocs(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 35)
	shape := tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 16, Window: 7, Softcap: 0.75}
	q, out, seqs := e.allocAttendCases(shape, 200, 90, 90)
	gate, up := e.tensor(e.rand(3*40, 2), 3, 40), e.tensor(e.rand(3*40, 1), 3, 40)
	fused := e.tensor(e.rand(3*80, 2), 3, 80)
	act, _ := dev.Alloc(tensor.F32, 3, 40)
	rot := e.partialRotary(10, 6, 8, 0.9)
	x := e.tensor(e.rand(3*30, 1), 3, 30)
	pos, _ := dev.Alloc(tensor.I32, 3, 1)
	dev.WriteI32(pos, []int32{1, 7, 40})
	run := func() {
		for _, s := range seqs {
			dev.Attend(out, q, 0, shape, s)
		}
		dev.GELUTanhGLU(act, gate, up)
		dev.GELUTanhGLU(act, fused, tensor.Tensor{})
		dev.Softcap(act, 3)
		dev.RoPE(x, 3, pos, rot)
		dev.RoPEBackward(x, 3, pos, rot)
	}
	run() // grow the scratch
	if a := testing.AllocsPerRun(5, run); a != 0 {
		t.Fatalf("%v allocations per run of Attend with a window and softcap, GELUTanhGLU, Softcap and a partial RoPE, want 0", a)
	}
}
