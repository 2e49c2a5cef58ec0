package safetensors

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/x448/float16"
)

// convertChunk is the number of elements below which conversions stay on one goroutine.
const convertChunk = 1 << 18

// DecodeBF16 converts little-endian bfloat16 values in src to float32 in dst
// (len(src) == 2*len(dst)). The conversion is exact: a bfloat16 is the top half of a
// float32.
func DecodeBF16(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	tensor.Parallel(len(dst), convertChunk, func(lo, hi int) {
		d, s := dst[lo:hi], src[2*lo:2*hi]
		if u, ok := nativeU16(s); ok {
			for i, v := range u[:len(d)] {
				d[i] = math.Float32frombits(uint32(v) << 16)
			}
			return
		}
		for i := range d {
			j := 2 * i
			d[i] = math.Float32frombits(uint32(s[j])<<16 | uint32(s[j+1])<<24)
		}
	})
}

// DecodeF16 converts little-endian IEEE half-precision values in src to float32 in dst
// (len(src) == 2*len(dst)). The conversion is exact, including subnormals and
// infinities; NaNs keep sign and payload and come out quiet (as x86 F16C converts them).
func DecodeF16(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	tensor.Parallel(len(dst), convertChunk, func(lo, hi int) {
		d, s := dst[lo:hi], src[2*lo:2*hi]
		if u, ok := nativeU16(s); ok {
			for i, v := range u[:len(d)] {
				d[i] = math.Float32frombits(f16ToF32Bits(v))
			}
			return
		}
		for i := range d {
			j := 2 * i
			d[i] = math.Float32frombits(f16ToF32Bits(uint16(s[j]) | uint16(s[j+1])<<8))
		}
	})
}

// nativeU16 views little-endian bytes as []uint16 without copying when the host is
// little-endian and the bytes are 2-byte aligned (safetensors data usually is); ok is
// false otherwise and the caller assembles the values byte by byte.
func nativeU16(b []byte) (u []uint16, ok bool) {
	one := uint16(1)
	if len(b) < 2 || *(*byte)(unsafe.Pointer(&one)) != 1 || uintptr(unsafe.Pointer(&b[0]))%2 != 0 {
		return nil, false
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2), true
}

// f16ToF32Bits widens the bits of an IEEE binary16 to the bits of the equal binary32.
//
// For finite values, the magnitude bits shifted into float32 position read as a float32
// of the right mantissa with an exponent 112 too small (127 - 15); multiplying by 2^112
// restores it exactly, and the same product normalises subnormals.
func f16ToF32Bits(h uint16) uint32 {
	sign := uint32(h&0x8000) << 16
	mag := uint32(h&0x7fff) << 13
	if mag >= 0x7c00<<13 { // infinity, or NaN: keep the payload, set the quiet bit as F16C does
		if mag != 0x7c00<<13 {
			return sign | 0x7fc00000 | mag
		}
		return sign | 0x7f800000
	}
	return sign | math.Float32bits(math.Float32frombits(mag)*0x1p112)
}

// DecodeF32 copies little-endian float32 values from src into dst
// (len(src) == 4*len(dst)).
func DecodeF32(dst []float32, src []byte) {
	src = src[:4*len(dst)]
	tensor.Parallel(len(dst), convertChunk, func(lo, hi int) {
		d := dst[lo:hi]
		s := src[4*lo : 4*hi]
		for i := range d {
			j := 4 * i
			d[i] = math.Float32frombits(uint32(s[j]) | uint32(s[j+1])<<8 | uint32(s[j+2])<<16 | uint32(s[j+3])<<24)
		}
	})
}

// BF16Bits rounds a float32 to the nearest bfloat16 (ties to even) and returns its bits.
// NaN stays NaN (quiet, sign kept); values beyond the bfloat16 range round to infinity.
func BF16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: truncating could turn it into infinity
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// EncodeBF16 writes src as little-endian bfloat16 into dst (len(dst) == 2*len(src)),
// rounding to nearest, ties to even.
func EncodeBF16(dst []byte, src []float32) {
	dst = dst[:2*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], BF16Bits(v))
	}
}

// EncodeF16 writes src as little-endian IEEE half precision into dst
// (len(dst) == 2*len(src)), rounding to nearest, ties to even; values beyond the
// half-precision range become infinity.
func EncodeF16(dst []byte, src []float32) {
	dst = dst[:2*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], float16.Fromfloat32(v).Bits())
	}
}

// EncodeF32 writes src as little-endian float32 into dst (len(dst) == 4*len(src)).
func EncodeF32(dst []byte, src []float32) {
	dst = dst[:4*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}
