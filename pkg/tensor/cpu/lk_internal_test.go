package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLKLog checks lkLog against math.Log on every float32 scale, at the
// table's boundaries (1 + k/256 and just below), powers of two and the
// float32 extremes: within 1e-15 absolute plus 4 ulps of the result.
func TestLKLog(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	var xs []float64
	for i := 0; i < 200000; i++ {
		xs = append(xs, float64(float32(math.Exp(r.Float64()*180-100))))
	}
	for k := 0; k <= 256; k++ {
		c := 1 + float64(k)/256
		xs = append(xs, c, math.Nextafter(c, 0), c/8, math.Nextafter(c, 0)*1024)
	}
	xs = append(xs, 1, 2, 0.5, math.SmallestNonzeroFloat32, math.MaxFloat32, float64(math.Float32frombits(0x00800000)), 1-1e-9)
	for _, x := range xs {
		want, got := math.Log(x), lkLog(x)
		ulp := math.Abs(math.Nextafter(want, math.Inf(1)) - want)
		if d := math.Abs(got - want); !(d <= 1e-15+4*ulp) {
			t.Fatalf("lkLog(%.17g) = %.17g, math.Log %.17g (difference %.3g)", x, got, want, d)
		}
	}
}
