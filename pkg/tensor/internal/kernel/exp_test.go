package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSwigluMatchesExpf checks that SwiGLU's written-out exponential gives,
// bit for bit, g/(1+Expf(-g))*u, over ordinary values and the edges of expf's
// range (overflow, underflow, subnormal results, infinities and NaN).
func TestSwigluMatchesExpf(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	g := []float32{0, -0, 1, -1, 87.3, -87.3, 87.34, -87.34, 88.7, -88.7, 88.73, -88.73, 100, -100,
		86, -86, 103, -103, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-30, -1e-30}
	for len(g) < 20000 {
		g = append(g, float32(r.NormFloat64()*float64(1+r.IntN(60))))
	}
	u := make([]float32, len(g))
	for i := range u {
		u[i] = float32(r.NormFloat64())
	}
	out := make([]float32, len(g))
	SwiGLU(out, g, u)
	for i, gv := range g {
		want := gv / (1 + Expf(-gv)) * u[i]
		if math.Float32bits(out[i]) != math.Float32bits(want) && !(out[i] != out[i] && want != want) {
			t.Fatalf("swiglu(g=%g, u=%g) = %g, want %g", gv, u[i], out[i], want)
		}
	}
	// The reference itself must be close to float64 silu.
	for i, gv := range g[:2000] {
		want := float64(gv) / (1 + math.Exp(-float64(gv))) * float64(u[i])
		if math.IsNaN(want) || math.IsInf(float64(gv), 0) {
			continue
		}
		if d := math.Abs(float64(out[i]) - want); d > 1e-6*math.Abs(want)+1e-35 { // expf flushes results below 2^-126 to 0
			t.Fatalf("swiglu(g=%g, u=%g) = %g, float64 gives %g", gv, u[i], out[i], want)
		}
	}
}

// TestExpfRange checks Expf against float64 exp across its whole finite range,
// including just below the overflow threshold.
func TestExpfRange(t *testing.T) {
	for x := float32(-87.33); x <= 88.72; x += 0.01 { // below -87.3365 expf gives 0 by design
		got, want := float64(Expf(x)), math.Exp(float64(x))
		if math.IsInf(got, 0) || math.Abs(got-want) > 3e-7*want+1.5e-45 {
			t.Fatalf("Expf(%g) = %g, want %g", x, got, want)
		}
	}
}

// TestExpShiftVectorMatchesScalar checks ExpShift, which Softmax uses, (with its vector body where
// the processor has one) against the scalar Expf on every element, over
// lengths that leave every tail, including -Inf, NaN, underflowing and zero
// inputs; every value must be identical and the sum within float32 rounding
// of a float64 sum.
func TestExpShiftVectorMatchesScalar(t *testing.T) {
	for n := 0; n <= 41; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = -float32((i*37)%101) * 0.9
		}
		if n > 3 {
			x[1] = float32(math.Inf(-1))
			x[2] = float32(math.NaN())
			x[3] = -87.3
		}
		shift := float32(0.25)
		y := append([]float32(nil), x...)
		sum := ExpShift(y, shift)
		var want float64
		for i, v := range x {
			e := Expf(v - shift)
			if v != v {
				e = 0 // expShift maps NaN to 0, where expf keeps it
			}
			if math.Float32bits(y[i]) != math.Float32bits(e) {
				t.Fatalf("n=%d: element %d: exp(%v) = %v, scalar Expf %v", n, i, v-shift, y[i], e)
			}
			want += float64(e)
		}
		if d := math.Abs(float64(sum) - want); d > 1e-6*want+1e-30 {
			t.Fatalf("n=%d: sum %v, want %v", n, sum, want)
		}
	}
}

// TestSoftmaxRowVector checks Softmax (vector bodies included) against a
// float64 softmax over every length up to 41, with -Inf entries.
func TestSoftmaxRowVector(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := 1; n <= 41; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 4)
			if i%5 == 3 {
				x[i] = float32(math.Inf(-1))
			}
		}
		x[r.IntN(n)] = 9 // the maximum sits anywhere, tails included
		mx := math.Inf(-1)
		for _, v := range x {
			mx = math.Max(mx, float64(v))
		}
		var z float64
		for _, v := range x {
			z += math.Exp(float64(v) - mx)
		}
		y := append([]float32(nil), x...)
		Softmax(y)
		for i, v := range x {
			want := math.Exp(float64(v)-mx) / z
			if d := math.Abs(float64(y[i]) - want); d > 1e-6 {
				t.Fatalf("n=%d: softmax[%d] = %v, want %v", n, i, y[i], want)
			}
		}
	}
}
