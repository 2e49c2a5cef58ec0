package tensor

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor/internal/kernel"
)

// The conversions between float32 and the 16-bit formats checkpoints store:
// bfloat16 or IEEE binary16 values as uint16 bit patterns in the host's byte
// order (a little-endian safetensors payload viewed in place on amd64 and
// arm64). pkg/safetensors' codecs, the CPU device's casts and the GEMM's
// packing all run these (the vector bodies in pkg/tensor/internal/kernel
// where the processor has them, the same bits as the scalar ones), so that
// a value converts the same way wherever it is read or written.
//
// The rule, for both formats and both directions:
//
//   - Widening (BF16ToF32, F16ToF32, BF16Float, F16Float) is exact: every
//     finite value, subnormals included, every zero with its sign and both
//     infinities come out as the equal float32.
//   - Narrowing (F32ToBF16, F32ToF16, BF16Bits, F16Bits) rounds to the
//     nearest representable value, ties to even. Results below the normal
//     range round to the format's subnormals (never flushed to zero), a
//     value that rounds past the largest finite value (in magnitude,
//     bfloat16: (2-2^-8)·2^127 and above; binary16: 65520 and above)
//     becomes an infinity of its sign, and infinities stay infinities.
//   - A NaN stays a NaN of the same sign that keeps the leading bits of its
//     payload (as many as the narrower format holds), and comes out quiet,
//     with one exception: widening a bfloat16 moves its bits unchanged into
//     the upper half of the float32 (as PyTorch widens), so a signalling
//     bfloat16 NaN stays signalling. Narrowing sets the quiet bit because a
//     payload whose kept bits are all zero would otherwise read as an
//     infinity; binary16 widening sets it as F16C and IEEE 754 do.
//
// Round trips follow: every 16-bit pattern that is not a NaN widens and
// narrows back to itself, and a NaN pattern comes back with its quiet bit
// set (TestHalfRoundTrip checks all 65536 of each format).

// convertChunk is the number of values below which a conversion stays on
// the calling goroutine.
const convertChunk = 1 << 18

// BF16ToF32 widens the bfloat16 values src into dst[:len(src)], exactly:
// the bits move to the upper half of a float32, so every value (NaNs
// included) keeps its bits (the rule above). Large slices are split over
// the workers.
func BF16ToF32(dst []float32, src []uint16) {
	convert("BF16ToF32", dst, src, kernel.BF16ToF32)
}

// F16ToF32 converts the IEEE binary16 values src into dst[:len(src)],
// exactly (subnormals and infinities included; a NaN keeps its sign and
// payload and comes out quiet: the rule above). Large slices are split over
// the workers.
func F16ToF32(dst []float32, src []uint16) {
	convert("F16ToF32", dst, src, kernel.F16ToF32)
}

// F32ToBF16 rounds src to the nearest bfloat16 values, ties to even, into
// dst[:len(src)]: subnormals round like any other value (not flushed to
// zero), values past the bfloat16 range become infinities, and a NaN stays a
// quiet NaN of the same sign with its upper payload bits (the rule above).
// Large slices are split over the workers.
func F32ToBF16(dst []uint16, src []float32) {
	convert("F32ToBF16", dst, src, kernel.F32ToBF16)
}

// F32ToF16 rounds src to the nearest IEEE binary16 values, ties to even,
// into dst[:len(src)]: results below the normal range round to binary16
// subnormals, values that round past 65504 become infinities, and a NaN
// stays a quiet NaN of the same sign with its upper payload bits (the rule
// above). Large slices are split over the workers.
func F32ToF16(dst []uint16, src []float32) {
	convert("F32ToF16", dst, src, kernel.F32ToF16)
}

// BF16Bits is F32ToBF16 of one value: f rounded to the nearest bfloat16,
// ties to even, as its bits. For a few values (a test's weights, one value
// of an error message) where a slice would be a detour.
func BF16Bits(f float32) uint16 { return kernel.BF16Bits(f) }

// F16Bits is F32ToF16 of one value: f rounded to the nearest IEEE binary16,
// ties to even, as its bits.
func F16Bits(f float32) uint16 { return kernel.F16Bits(f) }

// BF16Float is BF16ToF32 of one value: the bfloat16 bits h widened to the
// equal float32.
func BF16Float(h uint16) float32 { return kernel.BF16Float(h) }

// F16Float is F16ToF32 of one value: the IEEE binary16 bits h converted to
// the equal float32.
func F16Float(h uint16) float32 { return kernel.F16Float(h) }

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
