package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSwigluMatchesExpf checks that swiglu's written-out exponential gives,
// bit for bit, g/(1+expf(-g))*u, over ordinary values and the edges of expf's
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
	swiglu(out, g, u)
	for i, gv := range g {
		want := gv / (1 + expf(-gv)) * u[i]
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

// TestExpfRange checks expf against float64 exp across its whole finite range,
// including just below the overflow threshold.
func TestExpfRange(t *testing.T) {
	for x := float32(-87.33); x <= 88.72; x += 0.01 { // below -87.3365 expf gives 0 by design
		got, want := float64(expf(x)), math.Exp(float64(x))
		if math.IsInf(got, 0) || math.Abs(got-want) > 3e-7*want+1.5e-45 {
			t.Fatalf("expf(%g) = %g, want %g", x, got, want)
		}
	}
}
