package train

import (
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// TestTrainingDevicePrecision: on the CPU device (float32 products only)
// auto and fp32 train on the device itself with float32 products, so the
// CPU's numbers cannot change; bf16 is an error naming --precision. The
// CUDA side is TestCUDATrain (cmd/drafter) and TestBF16Products
// (pkg/tensor/cuda).
func TestTrainingDevicePrecision(t *testing.T) {
	dev := cpu.New(nil)
	for _, p := range []Precision{PrecisionAuto, PrecisionFP32} {
		d, products, err := TrainingDevice(dev, p)
		if err != nil || d != tensor.Device(dev) || products != tensor.F32Products {
			t.Errorf("precision %d on the cpu: %v, %s, %v; want the device itself, fp32", p, d, products, err)
		}
	}
	if _, _, err := TrainingDevice(dev, PrecisionBF16); err == nil || !strings.Contains(err.Error(), "--precision bf16") {
		t.Errorf("bf16 on the cpu: %v, want an error naming --precision bf16", err)
	}
	for v, want := range map[string]Precision{"auto": PrecisionAuto, "": PrecisionAuto, "fp32": PrecisionFP32, "f32": PrecisionFP32, "bf16": PrecisionBF16} {
		if got, err := ParsePrecision(v); err != nil || got != want {
			t.Errorf("ParsePrecision(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	if _, err := ParsePrecision("fp16"); err == nil || !strings.Contains(err.Error(), `--precision "fp16"`) {
		t.Errorf("ParsePrecision(fp16): %v", err)
	}
}
