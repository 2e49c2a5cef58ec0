package capture

import (
	"encoding/binary"
	"math"
	"sync/atomic"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// convertChunk is the smallest number of elements worth handing to another goroutine.
const convertChunk = 1 << 15

// encodeStates stores src into dst (little-endian, dtype's element size) and reports
// whether every stored value is finite. float16 rounds to nearest even; a value that rounds
// beyond ±65504, and any inf or NaN, makes the result false. The work is split over the
// cores with tensor.Parallel.
func encodeStates(dst []byte, src []float32, dtype DType) bool {
	var bad atomic.Bool
	tensor.Parallel(len(src), convertChunk, func(lo, hi int) {
		var ok bool
		if dtype == Float16 {
			ok = encodeF16(dst[2*lo:2*hi], src[lo:hi])
		} else {
			ok = encodeF32(dst[4*lo:4*hi], src[lo:hi])
		}
		if !ok {
			bad.Store(true)
		}
	})
	return !bad.Load()
}

// f32ToF16 converts v to IEEE binary16 bits, rounding to nearest with ties to even; values
// that round beyond ±65504 give ±inf and NaN gives a quiet NaN. It is a branch-light form of
// the usual bit manipulation: normal results round by adding 0xfff plus the lowest kept
// mantissa bit before truncating 13 bits, and subnormal results are rounded by the float32
// adder itself (adding 2^-1 places the float16 subnormal grid in the float32 mantissa).
// The tests check it (and encodeF16's inlined copy of its common case) against
// github.com/x448/float16 over float32 bit patterns (with a stride; all 2^32 with
// DRAFTER_EXHAUSTIVE_F16=1, which passes) and against a float64 definition of rounding.
// With encodeF16's inlined fast path it runs 2-4 times faster than float16.Fromfloat32,
// whose rounding branch is unpredictable on real data.
func f32ToF16(v float32) uint16 {
	const (
		f16Overflow = (127 + 16) << 23                   // 65536: rounds to inf whatever the mantissa
		f16MinNorm  = (127 - 14) << 23                   // 2^-14, smallest normal float16
		denormMagic = ((127 - 15) + (23 - 10) + 1) << 23 // 0.5: float16 subnormal step = float32 ulp
	)
	u := math.Float32bits(v)
	sign := u & 0x80000000
	u ^= sign
	var o uint32
	switch {
	case u >= f16Overflow:
		o = 0x7c00 // overflow and inf
		if u > 0x7f800000 {
			o = 0x7e00 // NaN
		}
	case u < f16MinNorm:
		f := math.Float32frombits(u) + math.Float32frombits(denormMagic)
		o = math.Float32bits(f) - denormMagic
	default:
		odd := (u >> 13) & 1
		u -= (127-15)<<23 - 0xfff // rebias the exponent and add the rounding constant
		u += odd
		o = u >> 13
	}
	return uint16(o | sign>>16)
}

// f16ToF32 converts IEEE binary16 bits to float32 exactly.
func f16ToF32(h uint16) float32 {
	const magic = 113 << 23 // 2^-14 as float32 bits
	o := uint32(h&0x7fff) << 13
	exp := o & (0x7c00 << 13)
	o += (127 - 15) << 23
	switch exp {
	case 0x7c00 << 13: // inf or NaN
		o += (128 - 16) << 23
	case 0: // zero or subnormal: renormalise through the float32 unit
		o += 1 << 23
		o = math.Float32bits(math.Float32frombits(o) - math.Float32frombits(magic))
	}
	return math.Float32frombits(o | uint32(h&0x8000)<<16)
}

// encodeF16 writes the float16 bits of src into dst (len(dst) == 2*len(src)), rounding to
// nearest even as f32ToF16 does, and reports whether all results are finite.
func encodeF16(dst []byte, src []float32) bool {
	const (
		minNorm = (127 - 14) << 23 // 2^-14: smallest magnitude with a normal float16 result
		limit   = 0x477ff000       // 65520: smallest magnitude that rounds to inf
	)
	dst = dst[:2*len(src)]
	ok := true
	for i, v := range src {
		b := math.Float32bits(v)
		if u := b & 0x7fffffff; u-minNorm < limit-minNorm {
			// Common case, a finite normal result: f32ToF16's last branch, inlined.
			o := (u - ((127-15)<<23 - 0xfff) + (u>>13)&1) >> 13
			binary.LittleEndian.PutUint16(dst[2*i:], uint16(o|(b>>16)&0x8000))
			continue
		}
		h := f32ToF16(v)
		binary.LittleEndian.PutUint16(dst[2*i:], h)
		if h&0x7c00 == 0x7c00 {
			ok = false
		}
	}
	return ok
}

// encodeF32 writes src into dst (len(dst) == 4*len(src)) and reports whether all values
// are finite.
func encodeF32(dst []byte, src []float32) bool {
	dst = dst[:4*len(src)]
	ok := true
	for i, v := range src {
		b := math.Float32bits(v)
		binary.LittleEndian.PutUint32(dst[4*i:], b)
		if b&0x7f800000 == 0x7f800000 {
			ok = false
		}
	}
	return ok
}

// firstUnstorable returns the index of the first element of src that dtype cannot store
// finitely, or -1.
func firstUnstorable(src []float32, dtype DType) int {
	for i, v := range src {
		if dtype == Float16 {
			if f32ToF16(v)&0x7c00 == 0x7c00 {
				return i
			}
		} else if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
			return i
		}
	}
	return -1
}

func decodeF16(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = f16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func decodeF32(dst []float32, src []byte) {
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}
