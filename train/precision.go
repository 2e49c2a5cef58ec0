package train

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Precision chooses the arithmetic of the trainer's products
// (tensor.Products). The weights, their gradients and AdamW's state are
// float32 whatever it is.
type Precision uint8

const (
	// PrecisionAuto is bf16 products on a device that has them (a CUDA
	// GPU's tensor cores) and float32 products elsewhere (the CPU). The
	// default, because bf16 products with float32 master weights keep the
	// training's quality: on the stand-in cuBLAS (which rounds as the tensor
	// cores do) with stories260k, 200 Medusa steps ended at held-out loss
	// 4.8714 against float32's 4.8711 (acceptance 2.18 and 2.16) and 60
	// EAGLE-3 steps at 14.4973 against 14.4989 (accept length 1.382 and
	// 1.381); per step the losses stay within 2^-8 of float32's
	// (TestCUDATrain in cmd/drafter). Other trainers autocast further
	// (bf16 activations too); here only the multiplier's inputs are bf16.
	PrecisionAuto Precision = iota
	// PrecisionFP32 multiplies in float32 on every device.
	PrecisionFP32
	// PrecisionBF16 multiplies bf16-rounded operands, accumulating in
	// float32; a device without bf16 products is an error.
	PrecisionBF16
)

// ParsePrecision reads a --precision value: auto, fp32 (float32, f32) or
// bf16 (bfloat16).
func ParsePrecision(v string) (Precision, error) {
	switch v {
	case "", "auto":
		return PrecisionAuto, nil
	case "fp32", "f32", "float32":
		return PrecisionFP32, nil
	case "bf16", "bfloat16":
		return PrecisionBF16, nil
	}
	return 0, fmt.Errorf("--precision %q: want auto, fp32 or bf16", v)
}

// TrainingDevice returns the device a trainer computes on for precision p
// (a sibling of dev whose MatMul uses the chosen products), and those
// products: what drafter train does, and what drafter bench measures.
func TrainingDevice(dev tensor.Device, p Precision) (tensor.Device, tensor.Products, error) {
	want := tensor.BF16Products
	if p == PrecisionFP32 {
		want = tensor.F32Products
	}
	d, err := tensor.WithProducts(dev, want)
	if err == nil {
		return d, want, nil
	}
	if p == PrecisionAuto {
		d, err = tensor.WithProducts(dev, tensor.F32Products)
		if err == nil {
			return d, tensor.F32Products, nil
		}
	}
	return nil, 0, fmt.Errorf("train: --precision %s: %w", want, err)
}
