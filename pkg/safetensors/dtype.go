// Package safetensors reads and writes the safetensors format used by Hugging Face
// checkpoints: an 8-byte little-endian header length N, N bytes of JSON header, and a
// data section that the header's tensors cover exactly, without holes or overlaps.
//
// Files are memory-mapped; Raw returns zero-copy views and Float32 converts F32, F16 and
// BF16 tensors to float32 (both half-precision conversions are exact). Folders holding
// model.safetensors.index.json and its shards are read as one Set.
//
// The writer lays tensors out sorted by name, pads the header with spaces to a multiple
// of 8 bytes and writes atomically (temporary file in the same folder, fsync, rename).
package safetensors

import "fmt"

// DType is a safetensors element type as spelled in the header ("F32", "BF16", ...).
type DType string

// The element types drafter reads and writes. Other types of the safetensors
// specification (F64, I8, I16, U16, U32, U64, F8_E4M3, F8_E5M2) are accepted for layout
// and Raw access only.
const (
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	BOOL DType = "BOOL"
	U8   DType = "U8"
)

// Size returns the number of bytes of one element and whether the type is known.
func (d DType) Size() (int, bool) {
	switch d {
	case F64, I64, U64:
		return 8, true
	case F32, I32, U32:
		return 4, true
	case F16, BF16, I16, U16:
		return 2, true
	case BOOL, U8, I8, F8E4M3, F8E5M2:
		return 1, true
	}
	return 0, false
}

// IsFloat reports whether Float32 can convert the type (F32, F16 or BF16).
func (d DType) IsFloat() bool { return d == F32 || d == F16 || d == BF16 }

// Additional element types of the specification, readable through Raw only.
const (
	F64    DType = "F64"
	I8     DType = "I8"
	I16    DType = "I16"
	U16    DType = "U16"
	U32    DType = "U32"
	U64    DType = "U64"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
)

// knownDTypes lists every accepted type, for error messages.
const knownDTypes = "F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2"

// Info describes one tensor of a Set.
type Info struct {
	// Name is the tensor's key in the header.
	Name string
	// DType is its element type.
	DType DType
	// Shape is its dimensions, outermost first (empty for a scalar).
	Shape []int
	// File is the path of the file that holds it.
	File string
	// Offset is the absolute byte offset of its data in File.
	Offset int64
	// Size is its length in bytes.
	Size int64
}

// NumElements returns the product of the shape (1 for a scalar).
func (i Info) NumElements() int {
	n := 1
	for _, d := range i.Shape {
		n *= d
	}
	return n
}

// ShapeString formats a shape as "[a, b]" for error messages.
func ShapeString(shape []int) string {
	s := "["
	for i, d := range shape {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(d)
	}
	return s + "]"
}
