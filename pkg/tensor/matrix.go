package tensor

import "fmt"

// DType is the element type of a Matrix or a Tensor.
type DType uint8

// The element types: float32, the two 16-bit formats checkpoints store (bit
// patterns in the host's byte order, see half.go), int32 (positions and ids,
// in a Tensor only), and MXFP4 (gpt-oss's experts: 4-bit values in blocks
// of 32 sharing a power-of-two scale, see mxfp4.go; a Matrix, or a device's
// resident copy of one, only).
const (
	F32 DType = iota
	BF16
	F16
	I32
	MXFP4
)

// String returns the dtype's name as drafter prints it ("f32", "bf16",
// "f16").
func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	case I32:
		return "i32"
	case MXFP4:
		return "mxfp4"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size returns the bytes of one value: 0 for MXFP4, whose values take 4.25
// bits each (a nibble, and a scale byte per 32), which no whole number of
// bytes counts: MXFP4Bytes gives their size.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case MXFP4:
		return 0
	}
	return 2
}

// MXFP4Bytes returns the bytes an MXFP4 matrix of n values (a multiple of
// MXFP4Block) occupies: n/2 of blocks and n/32 of scales.
func MXFP4Bytes(n int) int64 { return int64(n/2 + n/MXFP4Block) }

// Matrix is a row-major weight matrix [Rows, Cols] held in the dtype its
// checkpoint stores: float32 values in F32 (DType F32), or bfloat16 or
// IEEE binary16 bit patterns in U16 (DType BF16 or F16), which may view a
// memory-mapped file. The other slice is nil. Products read the values
// where they are and widen 16-bit ones to float32 in registers, so a model
// keeps its weights in the checkpoint's bytes instead of a float32 copy of
// twice the size. An MXFP4 matrix (DType MXFP4, MXFP4Matrix) holds its
// checkpoint's blocks and scales in Blocks and Scales instead, and products
// widen it block by block. A Matrix is a small value (slices and sizes):
// copies share the values. The zero Matrix is empty (Rows 0).
type Matrix struct {
	// DType says which of F32 and U16 holds the values.
	DType DType
	// F32 holds the values when DType is F32, row-major.
	F32 []float32
	// U16 holds the bit patterns when DType is BF16 or F16, row-major.
	U16 []uint16
	// Blocks and Scales hold an MXFP4 matrix's bytes as its checkpoint
	// stores them (see MXFP4Matrix): Rows·Cols/2 bytes of FP4 pairs and
	// Rows·Cols/32 scale bytes, row-major; nil for another dtype.
	Blocks, Scales []uint8
	// Rows and Cols are the matrix's shape: a Hugging Face Linear weight
	// [out, in] has Rows out and Cols in.
	Rows, Cols int
}

// F32Matrix returns the float32 matrix [rows, cols] over v, which must hold
// rows·cols values (it panics otherwise: a caller's programming error).
func F32Matrix(v []float32, rows, cols int) Matrix {
	if len(v) != rows*cols {
		panic(fmt.Sprintf("tensor: F32Matrix of %d values for %dx%d", len(v), rows, cols))
	}
	return Matrix{DType: F32, F32: v, Rows: rows, Cols: cols}
}

// HalfMatrix returns the 16-bit matrix [rows, cols] of dtype dt (BF16 or
// F16) over the bit patterns v, which must hold rows·cols values (it panics
// otherwise, or for another dtype: a caller's programming error).
func HalfMatrix(dt DType, v []uint16, rows, cols int) Matrix {
	if dt != BF16 && dt != F16 {
		panic(fmt.Sprintf("tensor: HalfMatrix of dtype %s", dt))
	}
	if len(v) != rows*cols {
		panic(fmt.Sprintf("tensor: HalfMatrix of %d values for %dx%d", len(v), rows, cols))
	}
	return Matrix{DType: dt, U16: v, Rows: rows, Cols: cols}
}

// Empty reports whether the matrix has no rows (the zero Matrix).
func (a Matrix) Empty() bool { return a.Rows == 0 }

// Len returns the number of values, Rows·Cols.
func (a Matrix) Len() int { return a.Rows * a.Cols }

// Bytes returns the memory the values occupy (an MXFP4 matrix's blocks and
// scales together).
func (a Matrix) Bytes() int64 {
	if a.DType == MXFP4 {
		return MXFP4Bytes(a.Len())
	}
	return int64(a.Len()) * int64(a.DType.Size())
}

// RowRange returns the rows [lo, hi) as a matrix viewing the same values.
func (a Matrix) RowRange(lo, hi int) Matrix {
	b := a
	b.Rows = hi - lo
	switch a.DType {
	case F32:
		b.F32 = a.F32[lo*a.Cols : hi*a.Cols]
	case MXFP4:
		nb := a.Cols / MXFP4Block
		b.Blocks = a.Blocks[lo*nb*16 : hi*nb*16]
		b.Scales = a.Scales[lo*nb : hi*nb]
	default:
		b.U16 = a.U16[lo*a.Cols : hi*a.Cols]
	}
	return b
}

// Row writes row i widened to float32 into dst[:Cols] (16-bit and MXFP4
// values widen exactly): the gather of an embedding row.
func (a Matrix) Row(dst []float32, i int) {
	c := a.Cols
	switch a.DType {
	case F32:
		copy(dst[:c], a.F32[i*c:(i+1)*c])
	case BF16:
		BF16ToF32(dst[:c], a.U16[i*c:(i+1)*c])
	case F16:
		F16ToF32(dst[:c], a.U16[i*c:(i+1)*c])
	case MXFP4:
		r := a.RowRange(i, i+1)
		MXFP4ToF32(dst[:c], r.Blocks, r.Scales)
	}
}

// Float32 returns the values as float32: F32 itself for a float32 matrix
// (no copy), else a new widened copy.
func (a Matrix) Float32() []float32 {
	if a.DType == F32 {
		return a.F32
	}
	out := make([]float32, a.Len())
	a.widen(out)
	return out
}

// widen writes the 16-bit or MXFP4 values widened into out.
func (a Matrix) widen(out []float32) {
	switch a.DType {
	case BF16:
		BF16ToF32(out, a.U16)
	case F16:
		F16ToF32(out, a.U16)
	case MXFP4:
		MXFP4ToF32(out, a.Blocks, a.Scales)
	}
}
