package capture

import (
	"encoding/binary"
	"math"
	"sync/atomic"

	"github.com/drafter-ai/drafter/pkg/finite"
	"github.com/drafter-ai/drafter/pkg/safetensors"
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

// encodeF16 writes the float16 bits of src into dst (len(dst) == 2*len(src)), rounding to
// nearest even (safetensors.EncodeF16: pkg/tensor's conversion, the one every package
// stores float16 with), and reports whether all results are finite (a value that rounds
// beyond ±65504, an inf or a NaN is not).
func encodeF16(dst []byte, src []float32) bool {
	dst = dst[:2*len(src)]
	safetensors.EncodeF16(dst, src)
	return finite.F16(dst) < 0
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
			if tensor.F16Bits(v)&0x7c00 == 0x7c00 {
				return i
			}
		} else if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
			return i
		}
	}
	return -1
}

// decodeF16 widens the little-endian float16 values src into dst (len(src) ==
// 2*len(dst)), exactly (safetensors.DecodeF16).
func decodeF16(dst []float32, src []byte) { safetensors.DecodeF16(dst, src) }

func decodeF32(dst []float32, src []byte) {
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}
