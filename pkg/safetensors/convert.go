package safetensors

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The 16-bit codecs are pkg/tensor's conversions (tensor.BF16ToF32, ...,
// whose comment states the one rule for rounding, subnormals, infinities
// and NaNs) over the little-endian bytes of a tensor: viewed in place as
// uint16s where the host is little-endian and the bytes are 2-byte aligned
// (a safetensors payload usually is), assembled through a small buffer
// otherwise. So a value decodes and encodes here exactly as the devices
// convert it.

// convertChunk is the number of elements below which conversions stay on one goroutine.
const convertChunk = 1 << 18

// bounceLen is the buffer, in values, through which unaligned or big-endian
// bytes are converted.
const bounceLen = 256

// DecodeBF16 converts little-endian bfloat16 values in src to float32 in dst
// (len(src) == 2*len(dst)). The conversion is exact: a bfloat16 is the top half of a
// float32, and its bits move there unchanged (tensor.BF16ToF32).
func DecodeBF16(dst []float32, src []byte) { decodeHalf(dst, src, tensor.BF16ToF32) }

// DecodeF16 converts little-endian IEEE half-precision values in src to float32 in dst
// (len(src) == 2*len(dst)). The conversion is exact, including subnormals and
// infinities; NaNs keep sign and payload and come out quiet (tensor.F16ToF32).
func DecodeF16(dst []float32, src []byte) { decodeHalf(dst, src, tensor.F16ToF32) }

// decodeHalf runs the widening conv over the little-endian 16-bit values in
// src: in place when they can be viewed as uint16s (conv splits large slices
// over the workers), else through a buffer, split over the workers here.
func decodeHalf(dst []float32, src []byte, conv func([]float32, []uint16)) {
	src = src[:2*len(dst)]
	if u, ok := nativeU16(src); ok {
		conv(dst, u)
		return
	}
	tensor.Parallel(len(dst), convertChunk, func(lo, hi int) {
		var buf [bounceLen]uint16
		for i := lo; i < hi; i += bounceLen {
			b := buf[:min(bounceLen, hi-i)]
			for j := range b {
				b[j] = binary.LittleEndian.Uint16(src[2*(i+j):])
			}
			conv(dst[i:i+len(b)], b)
		}
	})
}

// encodeHalf runs the narrowing conv of src into little-endian 16-bit values
// in dst, as decodeHalf reads them.
func encodeHalf(dst []byte, src []float32, conv func([]uint16, []float32)) {
	dst = dst[:2*len(src)]
	if u, ok := nativeU16(dst); ok {
		conv(u, src)
		return
	}
	tensor.Parallel(len(src), convertChunk, func(lo, hi int) {
		var buf [bounceLen]uint16
		for i := lo; i < hi; i += bounceLen {
			b := buf[:min(bounceLen, hi-i)]
			conv(b, src[i:i+len(b)])
			for j, v := range b {
				binary.LittleEndian.PutUint16(dst[2*(i+j):], v)
			}
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

// BF16Bits rounds a float32 to the nearest bfloat16 (ties to even) and returns its bits:
// tensor.BF16Bits, kept here for the callers that build safetensors payloads by hand.
// NaN stays NaN (quiet, sign kept); values beyond the bfloat16 range round to infinity.
func BF16Bits(f float32) uint16 { return tensor.BF16Bits(f) }

// EncodeBF16 writes src as little-endian bfloat16 into dst (len(dst) == 2*len(src)),
// rounding to nearest, ties to even (tensor.F32ToBF16).
func EncodeBF16(dst []byte, src []float32) { encodeHalf(dst, src, tensor.F32ToBF16) }

// EncodeF16 writes src as little-endian IEEE half precision into dst
// (len(dst) == 2*len(src)), rounding to nearest, ties to even; values beyond the
// half-precision range become infinity (tensor.F32ToF16).
func EncodeF16(dst []byte, src []float32) { encodeHalf(dst, src, tensor.F32ToF16) }

// EncodeF32 writes src as little-endian float32 into dst (len(dst) == 4*len(src)).
func EncodeF32(dst []byte, src []float32) {
	dst = dst[:4*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}
