package tensor

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor/internal/kernel"
)

// The conversions between float32 and the 16-bit formats checkpoints store:
// bfloat16 or IEEE binary16 values as uint16 bit patterns in the host's byte
// order (a little-endian safetensors payload viewed in place on amd64 and
// arm64), in drafter's assembly kernels where the processor has them.

// convertChunk is the number of values below which a conversion stays on
// the calling goroutine.
const convertChunk = 1 << 18

// BF16ToF32 widens the bfloat16 values src into dst[:len(src)], exactly:
// the bits move to the upper half of a float32, so every value (NaNs
// included) keeps its bits. Large slices are split over the workers.
func BF16ToF32(dst []float32, src []uint16) {
	convert("BF16ToF32", dst, src, kernel.BF16ToF32)
}

// F16ToF32 converts the IEEE binary16 values src into dst[:len(src)],
// exactly (subnormals and infinities included; a NaN keeps its sign and
// payload and comes out quiet). Large slices are split over the workers.
func F16ToF32(dst []float32, src []uint16) {
	convert("F16ToF32", dst, src, kernel.F16ToF32)
}

// F32ToBF16 rounds src to the nearest bfloat16 values, ties to even, into
// dst[:len(src)]: subnormals round like any other value (not flushed to
// zero), values past the bfloat16 range become infinities, and a NaN stays a
// quiet NaN of the same sign. Large slices are split over the workers.
func F32ToBF16(dst []uint16, src []float32) {
	convert("F32ToBF16", dst, src, kernel.F32ToBF16)
}

// F32ToF16 rounds src to the nearest IEEE binary16 values, ties to even,
// into dst[:len(src)]: results below the normal range round to binary16
// subnormals, values that round past 65504 become infinities, and a NaN
// stays a quiet NaN of the same sign with its upper payload bits. Large
// slices are split over the workers.
func F32ToF16(dst []uint16, src []float32) {
	convert("F32ToF16", dst, src, kernel.F32ToF16)
}

// convert runs the conversion f of src into dst: on the calling goroutine
// (allocating nothing) below two chunks, else split over the workers. A
// destination shorter than the source is a programming error inside
// drafter: it panics.
func convert[D, S any](name string, dst []D, src []S, f func([]D, []S)) {
	if len(dst) < len(src) {
		panic(fmt.Sprintf("tensor: %s: a destination of %d values for %d", name, len(dst), len(src)))
	}
	if len(src) < 2*convertChunk {
		f(dst, src)
		return
	}
	Parallel(len(src), convertChunk, func(lo, hi int) { f(dst[lo:hi], src[lo:hi]) })
}
