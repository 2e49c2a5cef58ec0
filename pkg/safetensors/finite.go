package safetensors

import (
	"fmt"
	"math"
	"slices"

	"github.com/drafter-ai/drafter/pkg/finite"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// NonFiniteError reports the first NaN or infinite element of a float tensor.
type NonFiniteError struct {
	// File is the file holding the tensor ("" for a tensor not yet written).
	File string
	// Tensor is the tensor's name, DType its element type, Shape its dimensions.
	Tensor string
	DType  DType
	Shape  []int
	// Index is the element's position in row-major order, Value its value.
	Index int
	Value float32
}

// Error names the file, the tensor and the element.
func (e *NonFiniteError) Error() string {
	where := ""
	if e.File != "" {
		where = e.File + ": "
	}
	return fmt.Sprintf("%stensor %q (%s %s) holds %v at element %d (index %s): weights must be finite",
		where, e.Tensor, e.DType, ShapeString(e.Shape), e.Value, e.Index, ShapeString(unravel(e.Index, e.Shape)))
}

// unravel turns a row-major flat index into one index per dimension.
func unravel(i int, shape []int) []int {
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = i % shape[d]
			i /= shape[d]
		}
	}
	return idx
}

// finiteChunk is the number of elements below which a scan stays on one goroutine.
const finiteChunk = 1 << 20

// FirstNonFinite returns the index of the first NaN or infinite element of data, which
// holds little-endian values of the float type dt (F32, F16 or BF16), or -1 when every
// element is finite or dt is not a float type. It reads the bits in place (an element is
// non-finite when its exponent bits are all ones) and splits large tensors over the
// processors.
func FirstNonFinite(dt DType, data []byte) int {
	size, ok := dt.Size()
	if !ok || !dt.IsFloat() {
		return -1
	}
	n := len(data) / size
	chunks := min(tensor.Workers(), (n+finiteChunk-1)/finiteChunk)
	if chunks <= 1 {
		return scanNonFinite(dt, data, 0, n)
	}
	first := make([]int, chunks)
	tensor.ParallelChunks(n, chunks, func(c, lo, hi int) { first[c] = scanNonFinite(dt, data, lo, hi) })
	for _, i := range first {
		if i >= 0 {
			return i
		}
	}
	return -1
}

// scanNonFinite returns the index of the first non-finite element in [lo, hi), or -1.
func scanNonFinite(dt DType, data []byte, lo, hi int) int {
	var i int
	switch dt {
	case F32:
		i = finite.F32(data[4*lo : 4*hi])
	case F16:
		i = finite.F16(data[2*lo : 2*hi])
	case BF16:
		i = finite.BF16(data[2*lo : 2*hi])
	default:
		return -1
	}
	if i < 0 {
		return -1
	}
	return lo + i
}

// elementValue decodes element i of float data of type dt.
func elementValue(dt DType, data []byte, i int) float32 {
	var v [1]float32
	switch dt {
	case F32:
		DecodeF32(v[:], data[4*i:4*i+4])
	case F16:
		DecodeF16(v[:], data[2*i:2*i+2])
	case BF16:
		DecodeBF16(v[:], data[2*i:2*i+2])
	default:
		return float32(math.NaN())
	}
	return v[0]
}

// CheckFinite returns a *NonFiniteError when the float tensor's data holds a NaN or an
// infinity (for example a value beyond the range of F16 rounded to infinity), nil
// otherwise and for tensors of other types.
func (t Tensor) CheckFinite() error {
	if i := FirstNonFinite(t.DType, t.Data); i >= 0 {
		return &NonFiniteError{Tensor: t.Name, DType: t.DType, Shape: t.Shape, Index: i, Value: elementValue(t.DType, t.Data, i)}
	}
	return nil
}

// CheckAllFinite returns the error of the first tensor of ts whose CheckFinite fails.
func CheckAllFinite(ts []Tensor) error {
	for _, t := range ts {
		if err := t.CheckFinite(); err != nil {
			return err
		}
	}
	return nil
}

// CheckFinite returns a *NonFiniteError naming the file when the float tensor name holds
// a NaN or an infinity, nil when every element is finite or the tensor is not of a float
// type, and an error when there is no such tensor.
func (s *Set) CheckFinite(name string) error {
	e, err := s.lookup(name)
	if err != nil {
		return err
	}
	in := e.info
	data := e.file.data[in.Offset : in.Offset+in.Size]
	if i := FirstNonFinite(in.DType, data); i >= 0 {
		return &NonFiniteError{File: in.File, Tensor: name, DType: in.DType, Shape: append([]int(nil), in.Shape...), Index: i, Value: elementValue(in.DType, data, i)}
	}
	return nil
}

// ReadFinite converts the float tensor name into dst as Float32Into does, after checking
// that it has exactly the given shape and that every element is finite. Errors name the
// file and the tensor; a non-finite element is reported as a *NonFiniteError.
func (s *Set) ReadFinite(name string, shape []int, dst []float32) error {
	e, err := s.lookup(name)
	if err != nil {
		return err
	}
	in := e.info
	if !slices.Equal(in.Shape, shape) {
		return fmt.Errorf("safetensors: %s: tensor %q has shape %s, want %s", in.File, name, ShapeString(in.Shape), ShapeString(shape))
	}
	if !in.DType.IsFloat() {
		return fmt.Errorf("safetensors: %s: tensor %q has dtype %s, want F32, BF16 or F16", in.File, name, in.DType)
	}
	if err := s.CheckFinite(name); err != nil {
		return err
	}
	return s.Float32Into(name, dst)
}
