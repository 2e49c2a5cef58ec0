// Package tensortest checks a tensor.Device's ops against float64 references
// on random inputs: the conformance suite every device runs (the CPU device
// in pkg/tensor/cpu's tests, the CUDA device in pkg/tensor/cuda's), so that a device is
// shown to compute what the layers written over it expect, op by op, before
// a model runs on it.
package tensortest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// tol is the relative tolerance of a float32 op against its float64
// reference, relative to the scale of the terms it sums (|a|·|b| summed for a
// product): float32's unit roundoff 6e-8 times the few hundred terms of the
// largest sums here, with room for the exponential's few ulp.
const tol = 2e-5

// Ops runs every op of dev against its reference.
func Ops(t *testing.T, dev tensor.Device) {
	t.Run("memory", func(t *testing.T) { memory(t, dev) })
	t.Run("MulT", func(t *testing.T) { mulT(t, dev) })
	t.Run("MulTMXFP4", func(t *testing.T) { mulTMXFP4(t, dev) })
	t.Run("Gather", func(t *testing.T) { gather(t, dev) })
	t.Run("RMSNorm", func(t *testing.T) { rmsNorm(t, dev) })
	t.Run("RoPE", func(t *testing.T) { rope(t, dev) })
	t.Run("elementwise", func(t *testing.T) { elementwise(t, dev) })
	t.Run("Attend", func(t *testing.T) { attend(t, dev) })
	t.Run("AttendWindow", func(t *testing.T) { attendWindow(t, dev) })
	t.Run("AttendWindowBits", func(t *testing.T) { attendWindowBits(t, dev) })
	t.Run("Softcap", func(t *testing.T) { softcap(t, dev) })
	t.Run("GELUTanhGLU", func(t *testing.T) { geluGLU(t, dev) })
	t.Run("PartialRoPE", func(t *testing.T) { partialRoPE(t, dev) })
	t.Run("GemmaAllocs", func(t *testing.T) { gemmaAllocs(t, dev) })
	t.Run("AttendSinks", func(t *testing.T) { attendSinks(t, dev) })
	t.Run("AttendSinksBits", func(t *testing.T) { attendSinksBits(t, dev) })
	t.Run("ClampedSwiGLU", func(t *testing.T) { clampedSwiGLU(t, dev) })
	t.Run("GptOSSAllocs", func(t *testing.T) { gptOSSAllocs(t, dev) })
	t.Run("AddScaledRows", func(t *testing.T) { addScaledRows(t, dev) })
	t.Run("AddScaledRowsAllocs", func(t *testing.T) { addScaledRowsAllocs(t, dev) })
	t.Run("HeadMatMul", func(t *testing.T) { headMatMul(t, dev) })
	t.Run("HeadMatMulAllocs", func(t *testing.T) { headMatMulAllocs(t, dev) })
	t.Run("AttendTTT", func(t *testing.T) { ttt(t, dev) })
	t.Run("optimizer", func(t *testing.T) { optimizer(t, dev) })
	t.Run("MatMul", func(t *testing.T) { matMul(t, dev) })
	t.Run("RMSNormBackward", func(t *testing.T) { rmsNormBackward(t, dev) })
	t.Run("RoPEBackward", func(t *testing.T) { ropeBackward(t, dev) })
	t.Run("activationBackward", func(t *testing.T) { activationBackward(t, dev) })
	t.Run("arrange", func(t *testing.T) { arrange(t, dev) })
	t.Run("losses", func(t *testing.T) { losses(t, dev) })
}

// env is one check's random source and device helpers.
type env struct {
	t   *testing.T
	dev tensor.Device
	r   *rand.Rand
}

func newEnv(t *testing.T, dev tensor.Device, seed uint64) *env {
	return &env{t: t, dev: dev, r: rand.New(rand.NewPCG(seed, 7))}
}

func (e *env) rand(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(e.r.NormFloat64() * scale)
	}
	return v
}

// tensor returns a new [rows, cols] float32 tensor of dev holding v.
func (e *env) tensor(v []float32, rows, cols int) tensor.Tensor {
	e.t.Helper()
	x, err := e.dev.Alloc(tensor.F32, rows, cols)
	if err != nil {
		e.t.Fatal(err)
	}
	e.dev.Write(x, v)
	return x
}

func (e *env) read(x tensor.Tensor) []float32 {
	v := make([]float32, x.Len())
	e.dev.Read(v, x)
	return v
}

// near fails unless got is within tol·scale[i] of want (scale nil: of
// max(1, |want|)).
func (e *env) near(what string, got []float32, want, scale []float64) {
	e.t.Helper()
	if len(got) != len(want) {
		e.t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i, g := range got {
		s := math.Max(1, math.Abs(want[i]))
		if scale != nil {
			s = math.Max(scale[i], 1e-30)
		}
		if d := math.Abs(float64(g) - want[i]); !(d <= tol*s) {
			e.t.Fatalf("%s: value %d is %v, want %v (difference %.3g, allowed %.3g)", what, i, g, want[i], d, tol*s)
		}
	}
}

func (e *env) same(what string, got, want []float32) {
	e.t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			e.t.Fatalf("%s: value %d is %v, want %v exactly", what, i, got[i], want[i])
		}
	}
}

func memory(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 1)
	v := e.rand(12, 1)
	x := e.tensor(v, 4, 3)
	e.same("Write then Read", e.read(x), v)
	e.same("RowRange", e.read(x.RowRange(1, 3)), v[3:9])
	y, err := dev.Alloc(tensor.F32, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	dev.Copy(y, x.RowRange(2, 4))
	e.same("Copy", e.read(y), v[6:12])
	z, _ := dev.Alloc(tensor.F32, 2, 3)
	dev.GatherRows(z, x, []int32{3, 0})
	e.same("GatherRows", e.read(z), append(append([]float32(nil), v[9:12]...), v[0:3]...))
	a, _ := dev.Alloc(tensor.F32, 4, 1)
	b, _ := dev.Alloc(tensor.F32, 4, 2)
	dev.SplitCols(x, []tensor.Tensor{a, b})
	ga, gb := e.read(a), e.read(b)
	for r := 0; r < 4; r++ {
		e.same("SplitCols", []float32{ga[r], gb[2*r], gb[2*r+1]}, v[3*r:3*r+3])
	}
	// An Allocator keeps its first error and allocates nothing after it.
	al := tensor.Allocator{Dev: dev}
	if a := al.F32(2, 3); a.Rows() != 2 || a.Cols() != 3 || al.Err != nil {
		t.Fatalf("Allocator: a %dx%d tensor, error %v; want 2x3, none", a.Rows(), a.Cols(), al.Err)
	}
	al.F32(-1, 3)
	if al.Err == nil {
		t.Fatal("Allocator: no error for -1 rows")
	}
	if a := al.Alloc(tensor.I32, 2, 3); !a.Empty() {
		t.Fatalf("Allocator: a %dx%d tensor after an error, want none", a.Rows(), a.Cols())
	}
	h, ok := dev.HostF32(x)
	if ok {
		e.same("HostF32", h, v)
	}
	up, err := dev.Upload(tensor.F32Matrix(v, 3, 4))
	if err != nil || up.Rows() != 3 || up.Cols() != 4 || up.DType() != tensor.F32 {
		t.Fatalf("Upload: %v, %dx%d %s", err, up.Rows(), up.Cols(), up.DType())
	}
	e.same("Upload", e.read(up), v)
	if _, err := dev.Alloc(tensor.F32, -1, 2); err == nil {
		t.Fatal("Alloc of -1 rows succeeded")
	}
}

// weight returns a random [n, k] weight of dtype dt and its values as
// float64 (rounded to dt first).
func (e *env) weight(dt tensor.DType, n, k int) (tensor.Weight, []float64) {
	v := e.rand(n*k, 0.5)
	var m tensor.Matrix
	w64 := make([]float64, n*k)
	switch dt {
	case tensor.F32:
		m = tensor.F32Matrix(v, n, k)
		for i, x := range v {
			w64[i] = float64(x)
		}
	default:
		h, back := encode(dt, v)
		m = tensor.HalfMatrix(dt, h, n, k)
		for i, x := range back {
			w64[i] = float64(x)
		}
	}
	return tensor.WeightOf(m), w64
}

func mulT(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 2)
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		for _, rows := range []int{1, 3, tensor.FewRows, tensor.FewRows + 1, 130} {
			for _, acc := range []bool{false, true} {
				n, k := 70, 45
				w, w64 := e.weight(dt, n, k)
				dev.PrepareWeights(&w)
				xv := e.rand(rows*k, 1)
				ov := e.rand(rows*n, 1)
				x, out := e.tensor(xv, rows, k), e.tensor(ov, rows, n)
				dev.MulT(out, x, &w, acc)
				if dev.RoundsInputs(dt, rows) {
					// The reference rounds the inputs as the device says it does.
					xv = roundTo(dt, xv)
				}
				want, scale := make([]float64, rows*n), make([]float64, rows*n)
				for i := 0; i < rows; i++ {
					for j := 0; j < n; j++ {
						var s, a float64
						if acc {
							s, a = float64(ov[i*n+j]), math.Abs(float64(ov[i*n+j]))
						}
						for c := 0; c < k; c++ {
							p := float64(xv[i*k+c]) * w64[j*k+c]
							s += p
							a += math.Abs(p)
						}
						want[i*n+j], scale[i*n+j] = s, a
					}
				}
				e.near("MulT "+dt.String(), e.read(out), want, scale)
				if rows > 1 && rows <= tensor.FewRows {
					// A row's result does not depend on the rows beside it.
					one := e.tensor(ov[:n], 1, n)
					dev.MulT(one, x.RowRange(0, 1), &w, acc)
					e.same("MulT row 0 alone", e.read(one), e.read(out)[:n])
				}
			}
		}
	}
}

// encode returns v in the 16-bit dtype dt (nearest, ties to even) and those
// values widened back.
func encode(dt tensor.DType, v []float32) ([]uint16, []float32) {
	h := make([]uint16, len(v))
	back := make([]float32, len(v))
	if dt == tensor.BF16 {
		tensor.F32ToBF16(h, v)
		tensor.BF16ToF32(back, h)
	} else {
		tensor.F32ToF16(h, v)
		tensor.F16ToF32(back, h)
	}
	return h, back
}

// roundTo returns v rounded to the 16-bit dtype dt.
func roundTo(dt tensor.DType, v []float32) []float32 {
	_, back := encode(dt, v)
	return back
}

func gather(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 3)
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		w, w64 := e.weight(dt, 9, 5)
		dev.PrepareWeights(&w)
		out, _ := dev.Alloc(tensor.F32, 3, 5)
		ids := []int{8, 0, 8}
		dev.Gather(out, &w, ids)
		got := e.read(out)
		for i, id := range ids {
			for c := 0; c < 5; c++ {
				if float64(got[i*5+c]) != w64[id*5+c] {
					t.Fatalf("Gather %s: row %d value %d is %v, want %v", dt, i, c, got[i*5+c], w64[id*5+c])
				}
			}
		}
	}
}

func rmsNorm(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 4)
	rows, n, eps := 300, 64, float32(1e-5)
	xv, wv := e.rand(rows*n, 2), e.rand(n, 1)
	x, w := e.tensor(xv, rows, n), e.tensor(wv, 1, n)
	out, _ := dev.Alloc(tensor.F32, rows, n)
	dev.RMSNorm(out, x, w, eps)
	want := make([]float64, rows*n)
	for r := 0; r < rows; r++ {
		var ss float64
		for _, v := range xv[r*n : r*n+n] {
			ss += float64(v) * float64(v)
		}
		s := 1 / math.Sqrt(ss/float64(n)+float64(eps))
		for i := 0; i < n; i++ {
			want[r*n+i] = float64(xv[r*n+i]) * s * float64(wv[i])
		}
	}
	e.near("RMSNorm", e.read(out), want, nil)
	dev.RMSNorm(x, x, w, eps) // in place
	e.same("RMSNorm in place", e.read(x), e.read(out))
}

// rotary returns the rotation tables of heads of hd values (base 10000) for
// positions below maxPos.
func (e *env) rotary(hd, maxPos int) *tensor.Rotary {
	half := hd / 2
	inv := make([]float32, half)
	cos, sin := make([]float32, maxPos*half), make([]float32, maxPos*half)
	for i := range inv {
		inv[i] = float32(1 / math.Pow(10000, float64(2*i)/float64(hd)))
		for p := 0; p < maxPos; p++ {
			cos[p*half+i], sin[p*half+i] = tensor.RoPEAngle(p, inv[i])
		}
	}
	return &tensor.Rotary{HeadDim: hd, MaxPos: maxPos, Cos: e.tensor(cos, maxPos, half), Sin: e.tensor(sin, maxPos, half), InvFreq: e.tensor(inv, 1, half)}
}

func rope(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 5)
	const hd, heads, maxPos = 8, 3, 6
	half := hd / 2
	rot := e.rotary(hd, maxPos)
	inv := e.read(rot.InvFreq)
	pos := []int32{0, 5, 6, 40} // two past the table
	rows := len(pos)
	xv := e.rand(rows*heads*hd, 1)
	x := e.tensor(xv, rows, heads*hd)
	pt, err := dev.Alloc(tensor.I32, rows, 1)
	if err != nil {
		t.Fatal(err)
	}
	dev.WriteI32(pt, pos)
	dev.RoPE(x, heads, pt, rot)
	want := make([]float64, len(xv))
	for r, p := range pos {
		for h := 0; h < heads; h++ {
			o := r*heads*hd + h*hd
			for i := 0; i < half; i++ {
				a := float64(float32(p) * inv[i])
				c, s := math.Cos(a), math.Sin(a)
				x0, x1 := float64(xv[o+i]), float64(xv[o+i+half])
				want[o+i], want[o+i+half] = x0*c-x1*s, x1*c+x0*s
			}
		}
	}
	e.near("RoPE", e.read(x), want, nil)
}

func elementwise(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 6)
	rows, I := 70, 500 // large enough to be split over the workers
	gv, uv := e.rand(rows*I, 2), e.rand(rows*I, 1)
	gate, up := e.tensor(gv, rows, I), e.tensor(uv, rows, I)
	out, _ := dev.Alloc(tensor.F32, rows, I)
	dev.SwiGLU(out, gate, up)
	want := make([]float64, rows*I)
	for i, g := range gv {
		x := float64(g)
		want[i] = x / (1 + math.Exp(-x)) * float64(uv[i])
	}
	sep := e.read(out)
	e.near("SwiGLU", sep, want, nil)
	fv := make([]float32, 0, 2*rows*I)
	for r := 0; r < rows; r++ {
		fv = append(fv, gv[r*I:(r+1)*I]...)
		fv = append(fv, uv[r*I:(r+1)*I]...)
	}
	fused := e.tensor(fv, rows, 2*I)
	out2, _ := dev.Alloc(tensor.F32, rows, I)
	dev.SwiGLU(out2, fused, tensor.Tensor{})
	e.same("SwiGLU fused", e.read(out2), sep)

	xv, bv := e.rand(6, 1), e.rand(3, 1)
	x, b := e.tensor(xv, 2, 3), e.tensor(bv, 1, 3)
	dev.AddBias(x, b)
	dev.Scale(x, -0.5)
	wantX := make([]float64, 6)
	for i, v := range xv {
		wantX[i] = (float64(v) + float64(bv[i%3])) * -0.5
	}
	e.near("AddBias, Scale", e.read(x), wantX, nil)
}

// attendSeq is one sequence of an attend check: n committed positions, p
// pending tree nodes before the t new rows, parents nil for a chain, else
// the parents of the p+t nodes.
type attendSeq struct {
	n, t    int
	p       int
	parents []int
}

// attend checks Attend over caches filled by KVWrite and reordered by
// KVMove, for decode rows, short and long chains and trees, several
// sequences in one call, with grouped-query heads; and with one KV head of
// 576 values (DeepSeek-V3's absorbed attention over its latent: 512 + 64)
// for decode rows over more than one CUDA chunk of keys, trees with pending
// nodes, and chains past the CUDA device's prefill threshold.
func attend(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 8)
	e.attendCases(tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 16}, [][]attendSeq{
		{{n: 10, t: 1}},
		{{n: 0, t: 5}, {n: 7, t: 1}},
		{{n: 3, t: 150}},
		{{n: 20, t: 6, parents: []int{-1, 0, 0, 1, 3, -1}}, {n: 4, t: 3}},
		{{n: 9, t: 70, parents: chainAndFork(70)}},
		// A draft tree's next levels: new nodes whose ancestors were
		// added before them, one row (chain-shaped and not) and several.
		{{n: 5, t: 1, p: 3, parents: []int{-1, 0, 1, 2}}, {n: 8, t: 1, p: 3, parents: []int{-1, -1, 0, 1}}},
		{{n: 12, t: 4, p: 6, parents: []int{-1, -1, 0, 1, 2, 3, 4, 5, 4, 0}}},
	})
	e.attendCases(tensor.AttnShape{Heads: 4, KVHeads: 1, HeadDim: 576}, [][]attendSeq{
		{{n: 300, t: 1}, {n: 7, t: 1}},
		{{n: 20, t: 6, parents: []int{-1, 0, 0, 1, 3, -1}}, {n: 12, t: 4, p: 6, parents: []int{-1, -1, 0, 1, 2, 3, 4, 5, 4, 0}}},
		{{n: 5, t: 70}, {n: 260, t: 2}},
	})
}

// attendCases runs attend's check of each call's sequences with shape.
func (e *env) attendCases(shape tensor.AttnShape, calls [][]attendSeq) {
	t, dev := e.t, e.dev
	qd, kd := shape.Heads*shape.HeadDim, shape.KVHeads*shape.HeadDim
	for _, seqs := range calls {
		var as []tensor.AttnSeq
		var keys, vals [][]float32 // per sequence, [n+t, kd] in position order
		rows := 0
		for _, s := range seqs {
			s.t += s.p // the cache holds the pending and the new nodes
			kv, err := dev.NewKV(2, kd, s.n+s.t+2)
			if err != nil {
				t.Fatal(err)
			}
			kall, vall := e.rand((s.n+s.t)*kd, 1), e.rand((s.n+s.t)*kd, 1)
			// Layer 1 is the one attended; layer 0 holds other values.
			dev.KVWrite(kv, 0, 0, e.tensor(e.rand((s.n+s.t)*kd, 1), s.n+s.t, kd), e.tensor(e.rand((s.n+s.t)*kd, 1), s.n+s.t, kd))
			// Write the prefix at a scratch position and move it into place,
			// then the new rows.
			if s.n > 0 {
				dev.KVWrite(kv, 1, s.n+s.t, e.tensor(kall[:kd], 1, kd), e.tensor(vall[:kd], 1, kd))
				dev.KVMove(kv, 0, s.n+s.t)
				if s.n > 1 {
					dev.KVWrite(kv, 1, 1, e.tensor(kall[kd:s.n*kd], s.n-1, kd), e.tensor(vall[kd:s.n*kd], s.n-1, kd))
				}
			}
			dev.KVWrite(kv, 1, s.n, e.tensor(kall[s.n*kd:], s.t, kd), e.tensor(vall[s.n*kd:], s.t, kd))
			a := tensor.AttnSeq{KV: kv, Row0: rows, T: s.t - s.p, N: s.n, P: s.p}
			if s.parents != nil {
				a.Mask = ancestors(s.parents)[s.p*s.t:]
			}
			as = append(as, a)
			keys, vals = append(keys, kall), append(vals, vall)
			rows += a.T
		}
		qv := e.rand(rows*qd, 0.5)
		q := e.tensor(qv, rows, qd)
		out, _ := dev.Alloc(tensor.F32, rows, qd)
		dev.Attend(out, q, 1, shape, as)
		want, scale := make([]float64, rows*qd), make([]float64, rows*qd)
		rep := shape.Heads / shape.KVHeads
		for b, a := range as {
			for i := 0; i < a.T; i++ {
				row := a.Row0 + i
				for h := 0; h < shape.Heads; h++ {
					off := h / rep * shape.HeadDim
					var sc []float64
					var ks []int
					for c := 0; c < a.N+a.P+a.T; c++ {
						if c >= a.N {
							if a.Mask == nil && c > a.N+i || a.Mask != nil && !a.Mask[i*(a.P+a.T)+c-a.N] {
								continue
							}
						}
						var s float64
						for d := 0; d < shape.HeadDim; d++ {
							s += float64(qv[row*qd+h*shape.HeadDim+d]) * float64(keys[b][c*kd+off+d])
						}
						sc, ks = append(sc, s), append(ks, c)
					}
					mx := math.Inf(-1)
					for _, s := range sc {
						mx = math.Max(mx, s)
					}
					var sum float64
					for j := range sc {
						sc[j] = math.Exp(sc[j] - mx)
						sum += sc[j]
					}
					for d := 0; d < shape.HeadDim; d++ {
						var o, a float64
						for j, c := range ks {
							p := sc[j] / sum * float64(vals[b][c*kd+off+d])
							o += p
							a += math.Abs(p)
						}
						want[row*qd+h*shape.HeadDim+d] = o
						scale[row*qd+h*shape.HeadDim+d] = math.Max(a, 1e-3)
					}
				}
			}
		}
		e.near(fmt.Sprintf("Attend of %d-wide heads", shape.HeadDim), e.read(out), want, scale)
	}
}

// chainAndFork returns the parents of a tree of n nodes: a chain of n/2
// nodes from the root, and the others forking off its nodes.
func chainAndFork(n int) []int {
	p := make([]int, n)
	for i := range p {
		switch {
		case i < n/2:
			p[i] = i - 1
		default:
			p[i] = (i * 7) % (n / 2)
		}
	}
	return p
}

// ancestors returns the [t, t] ancestor mask of a tree (a node is its own
// ancestor).
func ancestors(parents []int) []bool {
	t := len(parents)
	m := make([]bool, t*t)
	for i, p := range parents {
		if p >= 0 {
			copy(m[i*t:(i+1)*t], m[p*t:(p+1)*t])
		}
		m[i*t+i] = true
	}
	return m
}

// optimizer checks Zero, SumSquares and AdamW (three steps, with weight decay,
// against torch.optim.AdamW's update in float64).
func optimizer(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 9)
	n := 100_000 // split over the workers
	gv := e.rand(n, 1e-2)
	g := e.tensor(gv, 1, n)
	var ss float64
	for _, v := range gv {
		ss += float64(v) * float64(v)
	}
	if got := dev.SumSquares(g); math.Abs(got-ss) > 1e-12*ss {
		t.Fatalf("SumSquares %v, want %v", got, ss)
	}
	pv := e.rand(n, 1)
	p := e.tensor(pv, 1, n)
	m, _ := dev.Alloc(tensor.F32, 1, n)
	v, _ := dev.Alloc(tensor.F32, 1, n)
	p64, m64, v64 := make([]float64, n), make([]float64, n), make([]float64, n)
	for i, x := range pv {
		p64[i] = float64(x)
	}
	const lr, b1, b2, eps, wd = 1e-2, 0.9, 0.999, 1e-8, 0.1
	for step := 1; step <= 3; step++ {
		gv := e.rand(n, 1)
		dev.Write(g, gv)
		bc1, bc2 := 1-math.Pow(b1, float64(step)), 1-math.Pow(b2, float64(step))
		dev.AdamW(p, g, m, v, tensor.AdamWStep{Decay: float32(1 - lr*wd), Beta1: b1, Beta2: b2, OneMinusBeta1: 1 - b1, OneMinusBeta2: 1 - b2,
			StepSize: float32(lr / bc1), SqrtBC2: float32(math.Sqrt(bc2)), Eps: eps})
		for i, x := range gv {
			gx := float64(x)
			p64[i] *= 1 - lr*wd
			m64[i] = b1*m64[i] + (1-b1)*gx
			v64[i] = b2*v64[i] + (1-b2)*gx*gx
			p64[i] -= lr / bc1 * m64[i] / (math.Sqrt(v64[i])/math.Sqrt(bc2) + eps)
		}
	}
	e.near("AdamW parameters", e.read(p), p64, nil)
	e.near("AdamW first moments", e.read(m), m64, nil)
	e.near("AdamW second moments", e.read(v), v64, nil)
	dev.Zero(g)
	for i, x := range e.read(g) {
		if x != 0 {
			t.Fatalf("Zero left %v at %d", x, i)
		}
	}
}
