package tensortest

import (
	"fmt"
	"math"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The checks of the ops that Gemma-2/3 and Phi-3 targets add to Llama's:
// Softcap, GELUTanhGLU, partial and scaled rotaries, each against a float64
// reference written here from the ops' definitions (Hugging Face's), not
// from a device's code.

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
