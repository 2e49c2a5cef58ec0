package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
)

// Tensor is one tensor to write: raw little-endian row-major bytes of the given dtype.
type Tensor struct {
	// Name is the header key; it must be unique, non-empty and not "__metadata__".
	Name string
	// DType is the element type of Data.
	DType DType
	// Shape is the dimensions, outermost first (empty for a scalar).
	Shape []int
	// Data holds exactly product(Shape) elements.
	Data []byte
}

// F32Tensor encodes float32 values as an F32 tensor.
func F32Tensor(name string, shape []int, data []float32) Tensor {
	b := make([]byte, 4*len(data))
	EncodeF32(b, data)
	return Tensor{Name: name, DType: F32, Shape: append([]int(nil), shape...), Data: b}
}

// F16Tensor rounds float32 values to IEEE half precision (nearest, ties to even).
func F16Tensor(name string, shape []int, data []float32) Tensor {
	b := make([]byte, 2*len(data))
	EncodeF16(b, data)
	return Tensor{Name: name, DType: F16, Shape: append([]int(nil), shape...), Data: b}
}

// BF16Tensor rounds float32 values to bfloat16 (nearest, ties to even).
func BF16Tensor(name string, shape []int, data []float32) Tensor {
	b := make([]byte, 2*len(data))
	EncodeBF16(b, data)
	return Tensor{Name: name, DType: BF16, Shape: append([]int(nil), shape...), Data: b}
}

// FloatTensor encodes float32 values as dt, which must be F32, F16 or BF16.
func FloatTensor(name string, dt DType, shape []int, data []float32) (Tensor, error) {
	switch dt {
	case F32:
		return F32Tensor(name, shape, data), nil
	case F16:
		return F16Tensor(name, shape, data), nil
	case BF16:
		return BF16Tensor(name, shape, data), nil
	}
	return Tensor{}, fmt.Errorf("safetensors: tensor %q: cannot encode float32 values as dtype %q (use F32, F16 or BF16)", name, dt)
}

// I64Tensor encodes int64 values as an I64 tensor.
func I64Tensor(name string, shape []int, data []int64) Tensor {
	b := make([]byte, 8*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return Tensor{Name: name, DType: I64, Shape: append([]int(nil), shape...), Data: b}
}

// I32Tensor encodes int32 values as an I32 tensor.
func I32Tensor(name string, shape []int, data []int32) Tensor {
	b := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return Tensor{Name: name, DType: I32, Shape: append([]int(nil), shape...), Data: b}
}

// BoolTensor encodes booleans as a BOOL tensor (one byte each, 0 or 1).
func BoolTensor(name string, shape []int, data []bool) Tensor {
	b := make([]byte, len(data))
	for i, v := range data {
		if v {
			b[i] = 1
		}
	}
	return Tensor{Name: name, DType: BOOL, Shape: append([]int(nil), shape...), Data: b}
}

// U8Tensor wraps bytes as a U8 tensor (the data is copied).
func U8Tensor(name string, shape []int, data []byte) Tensor {
	return Tensor{Name: name, DType: U8, Shape: append([]int(nil), shape...), Data: append([]byte(nil), data...)}
}

// headerEntry is one tensor's header entry, in the field order written.
type headerEntry struct {
	DType       DType    `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// encodeHeader returns the 8-byte length prefix and JSON header for tensors, which must
// already be validated and sorted by name, followed by the padding spaces that make the
// header length a multiple of 8. Keys are written as __metadata__ (when non-empty, with
// its keys sorted) and then the tensors in order, laid out back to back.
func encodeHeader(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(make([]byte, 8))
	buf.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		m, err := json.Marshal(metadata) // encoding/json sorts map keys
		if err != nil {
			return nil, err
		}
		buf.WriteString(`"__metadata__":`)
		buf.Write(m)
		first = false
	}
	var off int64
	for _, t := range tensors {
		if !first {
			buf.WriteByte(',')
		}
		first = false
		k, err := json.Marshal(t.Name)
		if err != nil {
			return nil, err
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		e, err := json.Marshal(headerEntry{t.DType, shape, [2]int64{off, off + int64(len(t.Data))}})
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(e)
		off += int64(len(t.Data))
	}
	buf.WriteByte('}')
	for (buf.Len()-8)%8 != 0 {
		buf.WriteByte(' ')
	}
	b := buf.Bytes()
	binary.LittleEndian.PutUint64(b[:8], uint64(len(b)-8))
	return b, nil
}

// WriteFile writes tensors to path in safetensors format: sorted by name, data back to
// back in that order, header padded with spaces to a multiple of 8 bytes, metadata under
// __metadata__. It writes a temporary file in the same folder, syncs it and renames it
// over path, so readers never see a partial file. The caller's slice is not reordered.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	sorted := append([]Tensor(nil), tensors...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for i, t := range sorted {
		if t.Name == "" || t.Name == metadataKey {
			return fmt.Errorf("safetensors: writing %s: invalid tensor name %q", path, t.Name)
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return fmt.Errorf("safetensors: writing %s: tensor %q given twice", path, t.Name)
		}
		size, ok := t.DType.Size()
		if !ok {
			return fmt.Errorf("safetensors: writing %s: tensor %q: unknown dtype %q (known: %s)", path, t.Name, t.DType, knownDTypes)
		}
		n := 1
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("safetensors: writing %s: tensor %q: negative dimension in shape %s", path, t.Name, ShapeString(t.Shape))
			}
			n *= d
		}
		if len(t.Data) != n*size {
			return fmt.Errorf("safetensors: writing %s: tensor %q: dtype %s shape %s needs %d bytes, data has %d",
				path, t.Name, t.DType, ShapeString(t.Shape), n*size, len(t.Data))
		}
	}
	hdr, err := encodeHeader(sorted, metadata)
	if err != nil {
		return fmt.Errorf("safetensors: writing %s: encoding header: %w", path, err)
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		if _, err := w.Write(hdr); err != nil {
			return err
		}
		for _, t := range sorted {
			if _, err := w.Write(t.Data); err != nil {
				return err
			}
		}
		return nil
	})
}
