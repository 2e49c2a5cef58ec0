package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/pkg/tensor/tensortest"
)

// The checks below compare every forward with an independent float64
// implementation and every backward with central finite differences of that
// float64 forward: the scalar checked is L = sum(g * f(inputs)) for a random g.

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// numGrad returns dL/dx_i for L = f(x) by central differences in float64.
func numGrad(x []float64, f func([]float64) float64) []float64 { return tensortest.Gradient(x, f) }

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func assertClose(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: length %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*(1+math.Abs(want[i])) {
			t.Fatalf("%s[%d] = %.7g, want %.7g (diff %.3g)", what, i, got[i], want[i], d)
		}
	}
}

func rmsnorm64(x, w []float64, rows, n int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < rows; r++ {
		var ss float64
		for i := 0; i < n; i++ {
			ss += x[r*n+i] * x[r*n+i]
		}
		s := 1 / math.Sqrt(ss/float64(n)+eps)
		for i := 0; i < n; i++ {
			out[r*n+i] = x[r*n+i] * s * w[i]
		}
	}
	return out
}

func TestRMSNormForwardBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	rows, n, eps := 3, 7, float32(1e-5)
	x, w, g := testutil.RandNormal(r, rows*n, 1), testutil.RandNormal(r, n, 1), testutil.RandNormal(r, rows*n, 1)
	out := make([]float32, rows*n)
	cpu.RMSNorm(out, x, w, rows, n, eps)
	x64, w64, g64 := to64(x), to64(w), to64(g)
	assertClose(t, "rmsnorm", out, rmsnorm64(x64, w64, rows, n, float64(eps)), 1e-5)

	dx, dw := make([]float32, rows*n), make([]float32, n)
	dx[0] = 0.5 // backward accumulates: start from a non-zero value
	cpu.RMSNormBackward(dx, dw, g, x, w, rows, n, eps)
	dx[0] -= 0.5
	wantDx := numGrad(x64, func(v []float64) float64 { return dot(g64, rmsnorm64(v, w64, rows, n, float64(eps))) })
	wantDw := numGrad(w64, func(v []float64) float64 { return dot(g64, rmsnorm64(x64, v, rows, n, float64(eps))) })
	assertClose(t, "rmsnorm dx", dx, wantDx, 1e-4)
	assertClose(t, "rmsnorm dw", dw, wantDw, 1e-4)
}

// TestRMSNormRowsAlike: RMSNorm over many rows, split over the workers, gives
// each row the bits RMSNorm gives it alone, which runs on the caller without
// allocating (a drafting step norms a row or a few: the EAGLE-3 session and
// the trainer share the layer's norms).
func TestRMSNormRowsAlike(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	rows, n, eps := 4096, 64, float32(1e-6)
	x, w := testutil.RandNormal(r, rows*n, 3), testutil.RandNormal(r, n, 1)
	all := make([]float32, rows*n)
	cpu.RMSNorm(all, x, w, rows, n, eps)
	one := make([]float32, n)
	for row := 0; row < rows; row++ {
		cpu.RMSNorm(one, x[row*n:(row+1)*n], w, 1, n, eps)
		for i, v := range one {
			if math.Float32bits(v) != math.Float32bits(all[row*n+i]) {
				t.Fatalf("row %d element %d: %v alone, %v among %d rows", row, i, v, all[row*n+i], rows)
			}
		}
	}
	if a := testing.AllocsPerRun(20, func() { cpu.RMSNorm(one, x[:n], w, 1, n, eps) }); a != 0 {
		t.Fatalf("RMSNorm of one row allocates %v times", a)
	}
}

func silu64(v float64) float64 { return v / (1 + math.Exp(-v)) }

func TestLinearForwardBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, rows := range []int{1, 6, tensor.FewRows + 3} {
		for _, frozen := range []bool{false, true} {
			dev := cpu.New(cpu.PureGo())
			in, outF := 5, 4
			x, w, b, g := testutil.RandNormal(r, rows*in, 1), testutil.RandNormal(r, outF*in, 1), testutil.RandNormal(r, outF, 1), testutil.RandNormal(r, rows*outF, 1)
			x64, w64, b64, g64 := to64(x), to64(w), to64(b), to64(g)
			lin := func(x, w, b []float64) []float64 {
				o := make([]float64, rows*outF)
				for i := 0; i < rows; i++ {
					for j := 0; j < outF; j++ {
						s := b[j]
						for k := 0; k < in; k++ {
							s += x[i*in+k] * w[j*in+k]
						}
						o[i*outF+j] = s
					}
				}
				return o
			}
			l, err := NewLinear(dev, tensor.F32Matrix(w, outF, in), b)
			if err != nil {
				t.Fatal(err)
			}
			if frozen {
				Freeze(dev, nil, l)
			}
			// One row more than the input: Forward writes x's rows only.
			out := make([]float32, (rows+1)*outF)
			l.Forward(dev, cpu.HostTensor(out, rows+1, outF), cpu.HostTensor(x, rows, in))
			assertClose(t, "linear", out[:rows*outF], lin(x64, w64, b64), 1e-5)
			for _, v := range out[rows*outF:] {
				if v != 0 {
					t.Fatalf("linear wrote past its rows: %v", out[rows*outF:])
				}
			}
			dx, dw, db := make([]float32, rows*in), make([]float32, outF*in), make([]float32, outF)
			l.Backward(dev, cpu.HostTensor(dx, rows, in), cpu.HostTensor(dw, outF, in), cpu.HostTensor(db, 1, outF),
				cpu.HostTensor(g, rows, outF), cpu.HostTensor(x, rows, in))
			assertClose(t, "linear dx", dx, numGrad(x64, func(v []float64) float64 { return dot(g64, lin(v, w64, b64)) }), 1e-4)
			assertClose(t, "linear dw", dw, numGrad(w64, func(v []float64) float64 { return dot(g64, lin(x64, v, b64)) }), 1e-4)
			assertClose(t, "linear db", db, numGrad(b64, func(v []float64) float64 { return dot(g64, lin(x64, w64, v)) }), 1e-4)
		}
	}
}

// rope64 is the rotate_half RoPE written directly from the Hugging Face
// definition: q*cos + rotate_half(q)*sin with cos/sin repeated over both halves.
func rope64(x []float64, rows, heads, d int, pos []int32, inv []float64) []float64 {
	out := make([]float64, len(x))
	half := d / 2
	for r := 0; r < rows; r++ {
		for h := 0; h < heads; h++ {
			base := r*heads*d + h*d
			for i := 0; i < d; i++ {
				f := inv[i%half]
				a := float64(pos[r]) * f
				var rot float64
				if i < half {
					rot = -x[base+i+half]
				} else {
					rot = x[base+i-half]
				}
				out[base+i] = x[base+i]*math.Cos(a) + rot*math.Sin(a)
			}
		}
	}
	return out
}

func TestRoPEForwardBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	rows, heads, d := 4, 3, 8
	pos := []int32{0, 5, 17, 40} // 40 lies beyond the table: computed on the fly
	rp, err := NewRoPE(d, 10000, nil, 32)
	if err != nil {
		t.Fatal(err)
	}
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = math.Pow(10000, -float64(2*i)/float64(d))
	}
	x, g := testutil.RandNormal(r, rows*heads*d, 1), testutil.RandNormal(r, rows*heads*d, 1)
	x64, g64 := to64(x), to64(g)
	dev := cpu.New(cpu.PureGo())
	rot, err := rp.On(dev)
	if err != nil {
		t.Fatal(err)
	}
	pt, _ := dev.Alloc(tensor.I32, rows, 1)
	dev.WriteI32(pt, pos)
	y := append([]float32(nil), x...)
	dev.RoPE(cpu.HostTensor(y, rows, heads*d), heads, pt, rot)
	assertClose(t, "rope", y, rope64(x64, rows, heads, d, pos, inv), 1e-5)
	dx := append([]float32(nil), g...)
	dev.RoPEBackward(cpu.HostTensor(dx, rows, heads*d), heads, pt, rot)
	assertClose(t, "rope dx", dx, numGrad(x64, func(v []float64) float64 { return dot(g64, rope64(v, rows, heads, d, pos, inv)) }), 1e-5)
}

// TestRoPEPartial checks NewRoPEWith's partial rotary with an attention
// factor on a device: each head's first RotaryDims values turn as a head of
// RotaryDims values (frequencies spread over RotaryDims, as Hugging Face's
// partial rotary spreads them), times the factor, inside and past the
// tables, and the others are left exactly as they were; bad options are
// errors.
func TestRoPEPartial(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 7))
	rows, heads, hd, dims := 4, 3, 10, 4
	const factor = 0.7
	pos := []int32{0, 5, 17, 40}
	rp, err := NewRoPEWith(hd, 10000, nil, 32, RoPEOptions{RotaryDims: dims, AttnFactor: factor})
	if err != nil {
		t.Fatal(err)
	}
	if rp.HeadDim() != hd || rp.RotaryDims() != dims {
		t.Fatalf("head %d, rotary %d; want %d, %d", rp.HeadDim(), rp.RotaryDims(), hd, dims)
	}
	inv := make([]float64, dims/2)
	for i := range inv {
		inv[i] = math.Pow(10000, -float64(2*i)/float64(dims))
	}
	x := testutil.RandNormal(r, rows*heads*hd, 1)
	// The reference: rope64 over each head's first dims values (gathered
	// as heads of dims values), times the factor; the rest unchanged.
	part := make([]float64, rows*heads*dims)
	for h := 0; h < rows*heads; h++ {
		for i := 0; i < dims; i++ {
			part[h*dims+i] = float64(x[h*hd+i])
		}
	}
	rot64 := rope64(part, rows, heads, dims, pos, inv)
	want := to64(x)
	for h := 0; h < rows*heads; h++ {
		for i := 0; i < dims; i++ {
			want[h*hd+i] = factor * rot64[h*dims+i]
		}
	}
	dev := cpu.New(cpu.PureGo())
	rot, err := rp.On(dev)
	if err != nil {
		t.Fatal(err)
	}
	pt, _ := dev.Alloc(tensor.I32, rows, 1)
	dev.WriteI32(pt, pos)
	y := append([]float32(nil), x...)
	dev.RoPE(cpu.HostTensor(y, rows, heads*hd), heads, pt, rot)
	assertClose(t, "partial rope", y, want, 1e-5)
	for h := 0; h < rows*heads; h++ {
		for i := dims; i < hd; i++ {
			if y[h*hd+i] != x[h*hd+i] {
				t.Fatalf("partial rope changed head %d value %d: %v -> %v", h, i, x[h*hd+i], y[h*hd+i])
			}
		}
	}
	// The zero options are NewRoPE's tables.
	a, _ := NewRoPE(hd, 10000, nil, 8)
	b, _ := NewRoPEWith(hd, 10000, nil, 8, RoPEOptions{})
	for i := range a.cos {
		if a.cos[i] != b.cos[i] || a.sin[i] != b.sin[i] {
			t.Fatalf("NewRoPEWith with no options differs from NewRoPE at %d", i)
		}
	}
	for _, o := range []RoPEOptions{{RotaryDims: 3}, {RotaryDims: hd + 2}, {RotaryDims: -2}, {AttnFactor: -1}, {AttnFactor: math.NaN()}} {
		if _, err := NewRoPEWith(hd, 10000, nil, 8, o); err == nil {
			t.Fatalf("options %+v accepted; want an error", o)
		}
	}
}

func TestRoPEScaling(t *testing.T) {
	d := 128
	base, err := NewRoPE(d, 500000, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	lin, err := NewRoPE(d, 500000, &RopeScaling{Type: "linear", Factor: 4}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range base.invFreq {
		if got, want := lin.invFreq[i], base.invFreq[i]/4; math.Abs(float64(got-want)) > 1e-7*float64(want) {
			t.Fatalf("linear inv_freq[%d] = %g, want %g", i, got, want)
		}
	}
	// Llama-3.1's parameters: factor 8, low 1, high 4, original 8192. High
	// frequencies (wavelength < 2048) are unchanged, low ones (> 8192) divided by
	// 8, and the band between is interpolated.
	l3, err := NewRoPE(d, 500000, &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kept, divided, mid int
	for i, f := range base.invFreq {
		wave := 2 * math.Pi / float64(f)
		g := l3.invFreq[i]
		switch {
		case wave < 2048:
			kept++
			if g != f {
				t.Fatalf("high frequency %d changed: %g -> %g", i, f, g)
			}
		case wave > 8192:
			divided++
			if math.Abs(float64(g-f/8)) > 1e-7*float64(f) {
				t.Fatalf("low frequency %d: %g, want %g", i, g, f/8)
			}
		default:
			mid++
			if !(g < f && g > f/8) {
				t.Fatalf("medium frequency %d = %g not between %g and %g", i, g, f/8, f)
			}
		}
	}
	if kept == 0 || divided == 0 || mid == 0 {
		t.Fatalf("test does not cover all bands: kept %d divided %d mid %d", kept, divided, mid)
	}
	if _, err := NewRoPE(d, 10000, &RopeScaling{Type: "yarn", Factor: 2}, 0); err == nil {
		t.Fatal("yarn scaling accepted; want an error naming the supported types")
	}
}

func TestMLPForwardBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	const rows, h, in = 5, 6, 4 // in: the intermediate width
	dev := cpu.New(cpu.PureGo())
	x, wg, wu, wd, g := testutil.RandNormal(r, rows*h, 1), testutil.RandNormal(r, in*h, 1), testutil.RandNormal(r, in*h, 1),
		testutil.RandNormal(r, h*in, 1), testutil.RandNormal(r, rows*h, 1)
	x64, wg64, wu64, wd64, g64 := to64(x), to64(wg), to64(wu), to64(wd), to64(g)
	mlp64 := func(x, wg, wu, wd []float64) []float64 {
		out := make([]float64, rows*h)
		for i := 0; i < rows; i++ {
			act := make([]float64, in)
			for j := 0; j < in; j++ {
				var a, b float64
				for k := 0; k < h; k++ {
					a += x[i*h+k] * wg[j*h+k]
					b += x[i*h+k] * wu[j*h+k]
				}
				act[j] = a / (1 + math.Exp(-a)) * b
			}
			for j := 0; j < h; j++ {
				for k := 0; k < in; k++ {
					out[i*h+j] += act[k] * wd[j*in+k]
				}
			}
		}
		return out
	}
	lin := func(w []float32, out, inF int) *Linear {
		l, err := NewLinear(dev, tensor.F32Matrix(w, out, inF), nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	f := &MLP{Gate: lin(wg, in, h), Up: lin(wu, in, h), Down: lin(wd, h, in)}
	ten := func(v []float32, r, c int) tensor.Tensor { return cpu.HostTensor(v, r, c) }
	zeros := func(n int) []float32 { return make([]float32, n) }
	acts := &MLPActs{Gate: ten(zeros(rows*in), rows, in), Up: ten(zeros(rows*in), rows, in), Act: ten(zeros(rows*in), rows, in)}
	// Accumulating onto a residual: out = res + MLP(x).
	res := testutil.RandNormal(r, rows*h, 1)
	out := append([]float32(nil), res...)
	f.Forward(dev, ten(out, rows, h), ten(x, rows, h), acts, true)
	want := mlp64(x64, wg64, wu64, wd64)
	for i := range want {
		want[i] += float64(res[i])
	}
	assertClose(t, "mlp", out, want, 1e-5)

	dx, dwg, dwu, dwd := zeros(rows*h), zeros(in*h), zeros(in*h), zeros(h*in)
	s := &MLPScratch{Act: ten(zeros(rows*in), rows, in), DAct: ten(zeros(rows*in), rows, in), DGate: ten(zeros(rows*in), rows, in), DUp: ten(zeros(rows*in), rows, in)}
	f.Backward(dev, ten(dx, rows, h), ten(g, rows, h), ten(x, rows, h), acts,
		MLPGrads{Gate: ten(dwg, in, h), Up: ten(dwu, in, h), Down: ten(dwd, h, in)}, s)
	loss := func(x, wg, wu, wd []float64) float64 { return dot(g64, mlp64(x, wg, wu, wd)) }
	assertClose(t, "mlp dx", dx, numGrad(x64, func(v []float64) float64 { return loss(v, wg64, wu64, wd64) }), 1e-4)
	assertClose(t, "mlp dgate", dwg, numGrad(wg64, func(v []float64) float64 { return loss(x64, v, wu64, wd64) }), 1e-4)
	assertClose(t, "mlp dup", dwu, numGrad(wu64, func(v []float64) float64 { return loss(x64, wg64, v, wd64) }), 1e-4)
	assertClose(t, "mlp ddown", dwd, numGrad(wd64, func(v []float64) float64 { return loss(x64, wg64, wu64, v) }), 1e-4)

	// Frozen with the gate and up weights fused: the same outputs.
	fused := append(append([]float32(nil), wg...), wu...)
	ff := &MLP{Gate: f.Gate, Up: f.Up, Down: f.Down, GateUp: tensor.WeightOf(tensor.F32Matrix(fused, 2*in, h))}
	Freeze(dev, []*tensor.Weight{&ff.GateUp}, ff.Down)
	out2 := zeros(rows * h)
	ff.Forward(dev, ten(out2, rows, h), ten(x, rows, h), &MLPActs{Gate: ten(zeros(rows*in), rows, in), Fused: ten(zeros(rows*2*in), rows, 2*in)}, false)
	for i := range want {
		want[i] -= float64(res[i])
	}
	assertClose(t, "mlp fused", out2, want, 1e-5)
}

// TestMLPClampedSwiGLU checks the ClampedSwiGLU activation of an MLP's
// forward against gpt-oss's definition in float64, with a limit small enough
// that gate and up products pass it on both sides, separate and fused, and
// that Backward refuses it.
func TestMLPClampedSwiGLU(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	const rows, h, in = 5, 6, 4
	const alpha, limit = 1.702, 1.5
	dev := cpu.New(cpu.PureGo())
	x, wg, wu, wd := testutil.RandNormal(r, rows*h, 1), testutil.RandNormal(r, in*h, 1), testutil.RandNormal(r, in*h, 1),
		testutil.RandNormal(r, h*in, 1)
	want := make([]float64, rows*h)
	var beyond [4]int
	for i := 0; i < rows; i++ {
		act := make([]float64, in)
		for j := 0; j < in; j++ {
			var a, b float64
			for k := 0; k < h; k++ {
				a += float64(x[i*h+k]) * float64(wg[j*h+k])
				b += float64(x[i*h+k]) * float64(wu[j*h+k])
			}
			for n, c := range []bool{a > limit, a < -limit, b > limit, b < -limit} {
				if c {
					beyond[n]++
				}
			}
			g := math.Min(a, limit)
			u := math.Max(math.Min(b, limit), -limit)
			act[j] = (u + 1) * g / (1 + math.Exp(-float64(float32(alpha))*g))
		}
		for j := 0; j < h; j++ {
			for k := 0; k < in; k++ {
				want[i*h+j] += act[k] * float64(wd[j*in+k])
			}
		}
	}
	if beyond[0] == 0 || beyond[1] == 0 || beyond[2] == 0 || beyond[3] == 0 {
		t.Fatalf("gate and up products do not pass ±limit on every side: %v", beyond)
	}
	lin := func(w []float32, out, inF int) *Linear {
		l, err := NewLinear(dev, tensor.F32Matrix(w, out, inF), nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ten := func(v []float32, r, c int) tensor.Tensor { return cpu.HostTensor(v, r, c) }
	zeros := func(n int) []float32 { return make([]float32, n) }
	f := &MLP{Gate: lin(wg, in, h), Up: lin(wu, in, h), Down: lin(wd, h, in), Act: ClampedSwiGLU, Alpha: alpha, Limit: limit}
	out := zeros(rows * h)
	acts := &MLPActs{Gate: ten(zeros(rows*in), rows, in), Up: ten(zeros(rows*in), rows, in), Act: ten(zeros(rows*in), rows, in)}
	f.Forward(dev, ten(out, rows, h), ten(x, rows, h), acts, false)
	assertClose(t, "clamped mlp", out, want, 1e-5)

	fused := append(append([]float32(nil), wg...), wu...)
	ff := &MLP{Gate: f.Gate, Up: f.Up, Down: f.Down, GateUp: tensor.WeightOf(tensor.F32Matrix(fused, 2*in, h)),
		Act: ClampedSwiGLU, Alpha: alpha, Limit: limit}
	Freeze(dev, []*tensor.Weight{&ff.GateUp}, ff.Down)
	out2 := zeros(rows * h)
	ff.Forward(dev, ten(out2, rows, h), ten(x, rows, h), &MLPActs{Gate: ten(zeros(rows*in), rows, in), Fused: ten(zeros(rows*2*in), rows, 2*in)}, false)
	assertClose(t, "clamped mlp fused", out2, want, 1e-5)

	defer func() {
		if recover() == nil {
			t.Fatal("Backward of a ClampedSwiGLU block did not panic")
		}
	}()
	s := &MLPScratch{Act: ten(zeros(rows*in), rows, in), DAct: ten(zeros(rows*in), rows, in), DGate: ten(zeros(rows*in), rows, in), DUp: ten(zeros(rows*in), rows, in)}
	f.Backward(dev, ten(zeros(rows*h), rows, h), ten(zeros(rows*h), rows, h), ten(x, rows, h), acts,
		MLPGrads{Gate: ten(zeros(in*h), in, h), Up: ten(zeros(in*h), in, h), Down: ten(zeros(h*in), h, in)}, s)
}

// causalTTT is a one-step training-time-test attention (plain causal
// attention over one sequence) as an AttenderGrad, for the block's test.
type causalTTT struct {
	lse, dk, dv tensor.Tensor
	keys, vals  []tensor.Tensor
	shape       tensor.AttnShape
	seqs        []tensor.Span
}

func (c *causalTTT) Attend(dev tensor.Device, o, q, k, v tensor.Tensor) {
	c.keys, c.vals = []tensor.Tensor{k}, []tensor.Tensor{v}
	dev.AttendTTT(o, c.lse, q, c.keys, c.vals, c.shape, c.seqs)
}

func (c *causalTTT) AttendBackward(dev tensor.Device, dq, do, o, q tensor.Tensor) (tensor.Tensor, tensor.Tensor) {
	dev.Zero(c.dk)
	dev.Zero(c.dv)
	dev.AttendTTTBackward(dq, []tensor.Tensor{c.dk}, []tensor.Tensor{c.dv}, do, o, c.lse, q, c.keys, c.vals, c.shape, c.seqs)
	return c.dk, c.dv
}

func TestAttentionForwardBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	const rows, h, heads, kvHeads, hd = 5, 6, 2, 1, 4
	qw, kw := heads*hd, kvHeads*hd
	dev := cpu.New(cpu.PureGo())
	rp, err := NewRoPE(hd, 10000, nil, 16)
	if err != nil {
		t.Fatal(err)
	}
	rot, err := rp.On(dev)
	if err != nil {
		t.Fatal(err)
	}
	pos := []int32{0, 1, 2, 3, 4}
	inv := make([]float64, hd/2)
	for i := range inv {
		inv[i] = math.Pow(10000, -float64(2*i)/float64(hd))
	}
	x, wq, wk, wv, wo, g := testutil.RandNormal(r, rows*h, 1), testutil.RandNormal(r, qw*h, 0.5), testutil.RandNormal(r, kw*h, 0.5),
		testutil.RandNormal(r, kw*h, 0.5), testutil.RandNormal(r, h*qw, 0.5), testutil.RandNormal(r, rows*h, 1)
	x64, g64 := to64(x), to64(g)
	proj := func(x, w []float64, out, in int) []float64 {
		y := make([]float64, rows*out)
		for i := 0; i < rows; i++ {
			for j := 0; j < out; j++ {
				for k := 0; k < in; k++ {
					y[i*out+j] += x[i*in+k] * w[j*in+k]
				}
			}
		}
		return y
	}
	// The block in float64: causal softmax attention of RoPE'd queries and
	// keys, scale 1/√hd, the kv head shared by both query heads.
	block := func(x, wq, wk, wv, wo []float64) []float64 {
		q := rope64(proj(x, wq, qw, h), rows, heads, hd, pos, inv)
		k := rope64(proj(x, wk, kw, h), rows, kvHeads, hd, pos, inv)
		v := proj(x, wv, kw, h)
		o := make([]float64, rows*qw)
		for i := 0; i < rows; i++ {
			for hh := 0; hh < heads; hh++ {
				sc := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := 0; j <= i; j++ {
					for d := 0; d < hd; d++ {
						sc[j] += q[i*qw+hh*hd+d] * k[j*kw+d]
					}
					sc[j] /= math.Sqrt(hd)
					mx = math.Max(mx, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := range sc {
					for d := 0; d < hd; d++ {
						o[i*qw+hh*hd+d] += sc[j] / sum * v[j*kw+d]
					}
				}
			}
		}
		return proj(o, wo, h, qw)
	}
	lin := func(w []float32, out, in int) *Linear {
		l, err := NewLinear(dev, tensor.F32Matrix(w, out, in), nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	shape := tensor.AttnShape{Heads: heads, KVHeads: kvHeads, HeadDim: hd}
	a := &Attention{Q: lin(wq, qw, h), K: lin(wk, kw, h), V: lin(wv, kw, h), O: lin(wo, h, qw), Rot: rot, Shape: shape}
	ten := func(n, cols int) tensor.Tensor { return cpu.HostTensor(make([]float32, n*cols), n, cols) }
	acts := &AttnActs{Q: ten(rows, qw), K: ten(rows, kw), V: ten(rows, kw), O: ten(rows, qw)}
	pt, _ := dev.Alloc(tensor.I32, rows, 1)
	dev.WriteI32(pt, pos)
	attn := &causalTTT{lse: ten(rows, heads), dk: ten(rows, kw), dv: ten(rows, kw), shape: shape, seqs: []tensor.Span{{Start: 0, N: rows}}}
	out := make([]float32, rows*h)
	xt := cpu.HostTensor(x, rows, h)
	a.Forward(dev, cpu.HostTensor(out, rows, h), xt, pt, acts, attn, false)
	wq64, wk64, wv64, wo64 := to64(wq), to64(wk), to64(wv), to64(wo)
	assertClose(t, "attention", out, block(x64, wq64, wk64, wv64, wo64), 1e-5)

	dx, dq, dk, dv, do := make([]float32, rows*h), make([]float32, qw*h), make([]float32, kw*h), make([]float32, kw*h), make([]float32, h*qw)
	a.Backward(dev, cpu.HostTensor(dx, rows, h), cpu.HostTensor(g, rows, h), xt, pt, acts, attn,
		AttnGrads{Q: cpu.HostTensor(dq, qw, h), K: cpu.HostTensor(dk, kw, h), V: cpu.HostTensor(dv, kw, h), O: cpu.HostTensor(do, h, qw)},
		&AttnScratch{DO: ten(rows, qw), DQ: ten(rows, qw)})
	loss := func(x, wq, wk, wv, wo []float64) float64 { return dot(g64, block(x, wq, wk, wv, wo)) }
	assertClose(t, "attention dx", dx, numGrad(x64, func(v []float64) float64 { return loss(v, wq64, wk64, wv64, wo64) }), 1e-4)
	assertClose(t, "attention dq", dq, numGrad(wq64, func(v []float64) float64 { return loss(x64, v, wk64, wv64, wo64) }), 1e-4)
	assertClose(t, "attention dk", dk, numGrad(wk64, func(v []float64) float64 { return loss(x64, wq64, v, wv64, wo64) }), 1e-4)
	assertClose(t, "attention dv", dv, numGrad(wv64, func(v []float64) float64 { return loss(x64, wq64, wk64, v, wo64) }), 1e-4)
	assertClose(t, "attention do", do, numGrad(wo64, func(v []float64) float64 { return loss(x64, wq64, wk64, wv64, v) }), 1e-4)
}
