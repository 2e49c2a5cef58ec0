package cpu_test

import (
	"math"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// TestExpfAccuracy checks the exponential the CPU device's losses take
// (Expf, the inference kernels') over the shifted logits' range.
func TestExpfAccuracy(t *testing.T) {
	worst := 0.0
	for i := 0; i <= 2_000_000; i++ {
		x := float32(-86 * float64(i) / 2_000_000)
		want := math.Exp(float64(x))
		rel := math.Abs(float64(cpu.Expf(x))-want) / want
		worst = math.Max(worst, rel)
	}
	if worst > 3e-7 { // float32 epsilon is 1.19e-7: about two ulps
		t.Fatalf("expf worst relative error %g", worst)
	}
	if cpu.Expf(-88) != 0 || cpu.Expf(0) != 1 {
		t.Fatalf("Expf(-88)=%g Expf(0)=%g", cpu.Expf(-88), cpu.Expf(0))
	}
}
