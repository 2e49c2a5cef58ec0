package tensor

import (
	"fmt"
	"math"
)

// MXFP4 weights as gpt-oss checkpoints store them (the OCP microscaling
// format's FP4, as Transformers' convert_moe_packed_tensors reads it): a
// weight [Rows, Cols] (Cols a multiple of MXFP4Block) is two uint8 tensors,
//
//	blocks [Rows, Cols/32, 16]: each byte two FP4 (e2m1) values, the low
//	                            nibble first (value 2k of a block of 32 from
//	                            byte k & 0x0F, value 2k+1 from byte k >> 4);
//	scales [Rows, Cols/32]:     each block's power of two, biased by 127;
//
// and value = mxfp4Values[nibble] · 2^(scale-127). Every such value with a
// scale of at most MXFP4MaxScale is a float32 exactly (at most two
// significant bits; the smallest, 0.5·2^-127, is a float32 subnormal), so
// the dequantization below is exact and a product over MXFP4 weights is the
// float32 product over their values. Keeping the bytes as stored holds a
// weight in 4.25 bits a value instead of float32's 32 or bfloat16's 16,
// which a mixture of experts of tens of gigabytes needs to fit.

// MXFP4Block is the number of values that share one scale: a row's values
// come in blocks of 32, each 16 bytes of blocks and one byte of scales.
const MXFP4Block = 32

// MXFP4MaxScale is the largest scale byte MXFP4Matrix accepts: the largest
// value a block may hold, 6·2^(scale-127), is finite in float32 up to it
// (scale 253 would put 4·2^126 = 2^128 past float32's range).
const MXFP4MaxScale = 252

// mxfp4Values is the e2m1 value of each nibble: sign bit 3, then a 2-bit
// exponent and a 1-bit mantissa.
var mxfp4Values = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, float32(math.Copysign(0, -1)), -0.5, -1, -1.5, -2, -3, -4, -6}

// MXFP4Value returns the float32 value of the FP4 nibble (its low 4 bits)
// in a block of scale byte scale (at most MXFP4MaxScale): the format's
// definition for one value, which tests and a device's own kernels check
// against.
func MXFP4Value(nibble, scale uint8) float32 {
	return mxfp4Values[nibble&15] * mxfp4Scale(scale)
}

// mxfp4Scale returns 2^(s-127) as a float32 (s at most MXFP4MaxScale):
// built from its bits, the normal powers for s ≥ 1 and the subnormal 2^-127
// for s = 0.
func mxfp4Scale(s uint8) float32 {
	if s == 0 {
		return math.Float32frombits(1 << 22)
	}
	return math.Float32frombits(uint32(s) << 23)
}

// MXFP4Matrix returns the MXFP4 weight [rows, cols] over a checkpoint's
// blocks (rows·cols/2 bytes, the [rows, cols/32, 16] tensor flattened) and
// scales (rows·cols/32 bytes, [rows, cols/32]), viewing them (no copy: a
// memory-mapped checkpoint stays mapped). For one expert of a stacked
// gpt-oss tensor ([experts, rows, cols/32, 16] and [experts, rows, cols/32])
// the caller passes expert e's slices. It fails when cols is not a multiple
// of MXFP4Block, the lengths do not match the shape, or a scale exceeds
// MXFP4MaxScale (its values would not be finite float32s: a checkpoint
// that is not what it says it is). It reads every scale once.
func MXFP4Matrix(blocks, scales []uint8, rows, cols int) (Matrix, error) {
	if rows < 0 || cols < 0 || cols%MXFP4Block != 0 {
		return Matrix{}, fmt.Errorf("tensor: an MXFP4 matrix of %dx%d values: the columns must be a multiple of %d", rows, cols, MXFP4Block)
	}
	nb := rows * (cols / MXFP4Block)
	if len(blocks) != nb*MXFP4Block/2 || len(scales) != nb {
		return Matrix{}, fmt.Errorf("tensor: an MXFP4 matrix of %dx%d values over %d bytes of blocks and %d of scales, want %d and %d",
			rows, cols, len(blocks), len(scales), nb*MXFP4Block/2, nb)
	}
	for i, s := range scales {
		if s > MXFP4MaxScale {
			return Matrix{}, fmt.Errorf("tensor: MXFP4 scale %d (2^%d) of row %d, block %d, is past %d: the block's values would overflow float32",
				s, int(s)-127, i/(cols/MXFP4Block), i%(cols/MXFP4Block), MXFP4MaxScale)
		}
	}
	return Matrix{DType: MXFP4, Blocks: blocks, Scales: scales, Rows: rows, Cols: cols}, nil
}

// MXFP4ToF32 dequantizes the MXFP4 blocks and scales (16 bytes of blocks
// for each scale, as MXFP4Matrix takes them) into dst[:32·len(scales)],
// exactly: every value is a float32. Large slices are split over the
// workers. The scales must be at most MXFP4MaxScale (MXFP4Matrix checked
// them).
func MXFP4ToF32(dst []float32, blocks, scales []uint8) {
	n := len(scales)
	if len(blocks) < n*MXFP4Block/2 || len(dst) < n*MXFP4Block {
		panic(fmt.Sprintf("tensor: MXFP4ToF32 of %d blocks from %d bytes into %d values", n, len(blocks), len(dst)))
	}
	const chunk = convertChunk / MXFP4Block
	if n < 2*chunk {
		mxfp4ToF32(dst, blocks, scales)
		return
	}
	Parallel(n, chunk, func(lo, hi int) {
		mxfp4ToF32(dst[lo*MXFP4Block:hi*MXFP4Block], blocks[lo*MXFP4Block/2:hi*MXFP4Block/2], scales[lo:hi])
	})
}

// mxfp4ToF32 is MXFP4ToF32 on the calling goroutine.
func mxfp4ToF32(dst []float32, blocks, scales []uint8) {
	for b, s := range scales {
		f := mxfp4Scale(s)
		src := blocks[b*16 : b*16+16 : b*16+16]
		out := dst[b*MXFP4Block : b*MXFP4Block+MXFP4Block : b*MXFP4Block+MXFP4Block]
		for i, v := range src {
			out[2*i] = mxfp4Values[v&15] * f
			out[2*i+1] = mxfp4Values[v>>4] * f
		}
	}
}
