package kernel

import (
	"fmt"
	"math"
)

// Half names a 16-bit floating-point format in which weights are stored:
// the values are uint16 bit patterns, in the host's byte order.
type Half uint8

const (
	// BF16 is bfloat16: the upper half of a float32 (8 exponent bits, 7
	// mantissa bits), the format of most Hugging Face checkpoints.
	BF16 Half = iota + 1
	// F16 is IEEE 754 binary16 (5 exponent bits, 10 mantissa bits).
	F16
)

// String returns "bf16" or "f16".
func (h Half) String() string {
	switch h {
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("Half(%d)", uint8(h))
}

// BF16ToF32 sets dst[i] to the bfloat16 src[i] widened to float32, for i <
// len(src) (dst must be at least as long). The widening is exact: the bits
// move to the upper half, so every value, a signalling NaN included, keeps
// its bits (as PyTorch and the safetensors decoder widen). It runs on the
// calling goroutine, sixteen values at a time where the processor has
// AVX-512 (eight with AVX2).
func BF16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	i := bf16ToF32Vec(dst, src)
	for ; i < len(src); i++ {
		dst[i] = bf16ToF32(src[i])
	}
}

// F16ToF32 sets dst[i] to the binary16 src[i] converted to float32, for i <
// len(src) (dst must be at least as long). The conversion is exact,
// subnormals and infinities included; a NaN keeps its sign and payload and
// comes out quiet, as IEEE 754 converts it (and as x86's F16C does). It runs
// on the calling goroutine, with F16C where the processor has it.
func F16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	i := f16ToF32Vec(dst, src)
	for ; i < len(src); i++ {
		dst[i] = f16ToF32(src[i])
	}
}

// F32ToBF16 sets dst[i] to src[i] rounded to the nearest bfloat16, ties to
// even, for i < len(src) (dst must be at least as long): subnormal results
// are rounded like any other (not flushed to zero, as AVX512_BF16's
// VCVTNEPS2BF16 would), values past the largest bfloat16 become infinities,
// and a NaN stays a NaN of the same sign with its upper payload bits, made
// quiet. It runs on the calling goroutine, in vector integer arithmetic
// where the processor has AVX-512 or AVX2.
func F32ToBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	i := f32ToBF16Vec(dst, src)
	for ; i < len(src); i++ {
		dst[i] = f32ToBF16(src[i])
	}
}

// F32ToF16 sets dst[i] to src[i] rounded to the nearest binary16, ties to
// even, for i < len(src) (dst must be at least as long): subnormal results
// are rounded to the binary16 subnormals, values that round past 65504
// become infinities, and a NaN stays a NaN of the same sign with its upper
// payload bits, made quiet (as F16C's VCVTPS2PH converts). It runs on the
// calling goroutine, with F16C where the processor has it.
func F32ToF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	i := f32ToF16Vec(dst, src)
	for ; i < len(src); i++ {
		dst[i] = f32ToF16(src[i])
	}
}

// BF16Bits is F32ToBF16 of one value (pkg/tensor's scalar conversions
// run these, so that a scalar and a slice conversion cannot differ).
func BF16Bits(f float32) uint16 { return f32ToBF16(f) }

// F16Bits is F32ToF16 of one value.
func F16Bits(f float32) uint16 { return f32ToF16(f) }

// BF16Float is BF16ToF32 of one value.
func BF16Float(h uint16) float32 { return bf16ToF32(h) }

// F16Float is F16ToF32 of one value.
func F16Float(h uint16) float32 { return f16ToF32(h) }

// bf16ToF32 widens one bfloat16.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f16ToF32 converts one binary16 exactly. The magnitude bits shifted into
// float32 position read as a float32 with the right mantissa and an
// exponent 112 too small; multiplying by 2^112 restores it exactly and
// normalises subnormals.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	mag := uint32(h&0x7fff) << 13
	switch {
	case mag == 0x7c00<<13:
		return math.Float32frombits(sign | 0x7f800000)
	case mag > 0x7c00<<13: // NaN: keep the payload, set the quiet bit
		return math.Float32frombits(sign | 0x7fc00000 | mag)
	}
	return math.Float32frombits(sign | math.Float32bits(math.Float32frombits(mag)*0x1p112))
}

// f32ToBF16 rounds one float32 to bfloat16, ties to even: adding 0x7fff
// plus the lowest kept bit before truncating 16 bits rounds the magnitude
// correctly across the whole range (subnormals, and the carry into the
// exponent, overflow to infinity included).
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: rounding could carry it into infinity
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// f32ToF16 rounds one float32 to binary16, ties to even. Normal results
// round by adding 0xfff plus the lowest kept bit before truncating 13 bits;
// subnormal results are rounded by the float32 adder itself (adding 0.5
// puts the binary16 subnormal step at the float32 ulp).
func f32ToF16(v float32) uint16 {
	const (
		overflow    = 0x477ff000                         // 65520: the smallest magnitude that rounds to infinity
		minNorm     = (127 - 14) << 23                   // 2^-14, the smallest normal binary16
		denormMagic = ((127 - 15) + (23 - 10) + 1) << 23 // 0.5
	)
	u := math.Float32bits(v)
	sign := uint16(u>>16) & 0x8000
	u &= 0x7fffffff
	switch {
	case u > 0x7f800000: // NaN
		return sign | 0x7e00 | uint16(u>>13)&0x3ff
	case u >= overflow:
		return sign | 0x7c00
	case u < minNorm:
		f := math.Float32frombits(u) + math.Float32frombits(denormMagic)
		return sign | uint16(math.Float32bits(f)-denormMagic)
	}
	return sign | uint16((u-((127-15)<<23-0xfff)+(u>>13)&1)>>13)
}
