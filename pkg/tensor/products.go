package tensor

import "fmt"

// Products is the arithmetic of a device's training products
// (Device.MatMul): the values the multiplier sees. Every choice takes and
// gives float32 tensors and accumulates in float32; the weights a trainer
// updates (and AdamW's state) stay float32 whatever it is.
type Products uint8

const (
	// F32Products multiplies the float32 operands as they are: what every
	// device does unless asked otherwise.
	F32Products Products = iota
	// BF16Products rounds both operands of a product to bfloat16 (to
	// nearest, ties to even) and accumulates their exact products in
	// float32: a GPU's bf16 tensor cores (cuBLAS's
	// CUBLAS_COMPUTE_32F_FAST_16BF), at several times float32's rate.
	BF16Products
)

// String names p as --precision spells it: "fp32" or "bf16".
func (p Products) String() string {
	switch p {
	case F32Products:
		return "fp32"
	case BF16Products:
		return "bf16"
	}
	return fmt.Sprintf("Products(%d)", uint8(p))
}

// MixedPrecision is a Device that can run its training products with other
// arithmetic than float32 (the CUDA device). Only MatMul is affected: the
// products of a model's forward (MulT, HeadMatMul) and every other op are
// the device's own, so inference computes the same numbers on a device
// WithProducts returned.
type MixedPrecision interface {
	// WithProducts returns a sibling of the device (the same memory) whose
	// MatMul computes with p, and whose own siblings do too; an error
	// says why the device cannot.
	WithProducts(p Products) (Device, error)
}

// WithProducts returns a device on d's memory whose MatMul computes with p:
// d itself for F32Products on a device that is not MixedPrecision (float32
// is every device's arithmetic), else d's WithProducts. A device that cannot
// is an error naming it.
func WithProducts(d Device, p Products) (Device, error) {
	if mp, ok := d.(MixedPrecision); ok {
		return mp.WithProducts(p)
	}
	if p == F32Products {
		return d, nil
	}
	return nil, fmt.Errorf("the %s device computes its products in float32 only, not %s", d.Name(), p)
}
