package tensortest

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Counting is a device that only allocates, for measuring what code would
// allocate on a device without the memory or the time: Alloc and Upload
// hand out tensors at made-up addresses of a memory that does not exist and
// count their bytes (rounded to 256, the CUDA device's alignment) under the
// current Label, Write and WriteI32 drop the values, and every other op
// panics (the nil tensor.Device it embeds): code that runs on it to the end
// allocated and did not compute. Its siblings are itself.
type Counting struct {
	tensor.Device // nil: an op that computes panics
	c             *counted
}

// counted is what a Counting device and its siblings allocated.
type counted struct {
	label        string
	bytes        map[string]int64
	next         uint64
	largest      int64
	largestShape string
}

// NewCounting returns a Counting device that has allocated nothing.
func NewCounting() Counting {
	return Counting{c: &counted{bytes: map[string]int64{}, next: 1 << 20}}
}

// Label makes the allocations that follow count under label.
func (d Counting) Label(label string) { d.c.label = label }

// Bytes returns the bytes allocated under each label.
func (d Counting) Bytes() map[string]int64 { return d.c.bytes }

// Largest returns the largest single allocation's bytes and a description
// of it (shape, dtype, label).
func (d Counting) Largest() (int64, string) { return d.c.largest, d.c.largestShape }

// Name names the device.
func (d Counting) Name() string { return "counting" }

// Sibling returns d: its allocations count with d's.
func (d Counting) Sibling() tensor.Device { return d }

// Alloc counts a [rows, cols] tensor of dt and returns it, with no memory.
func (d Counting) Alloc(dt tensor.DType, rows, cols int) (tensor.Tensor, error) {
	return d.take(dt, rows, cols), nil
}

// Upload counts a tensor of m's shape and dtype and returns it, without
// reading m's values.
func (d Counting) Upload(m tensor.Matrix) (tensor.Tensor, error) {
	return d.take(m.DType, m.Rows, m.Cols), nil
}

// Write drops the values.
func (d Counting) Write(tensor.Tensor, []float32) {}

// WriteI32 drops the values.
func (d Counting) WriteI32(tensor.Tensor, []int32) {}

func (d Counting) take(dt tensor.DType, rows, cols int) tensor.Tensor {
	if dt == tensor.MXFP4 {
		panic("tensortest: Counting does not count MXFP4 tensors")
	}
	n := (int64(dt.Size())*int64(rows)*int64(cols) + 255) &^ 255
	c := d.c
	c.bytes[c.label] += n
	if n > c.largest {
		c.largest, c.largestShape = n, fmt.Sprintf("%dx%d %s (%s)", rows, cols, dt, c.label)
	}
	t := tensor.OnDevice(dt, rows, cols, c.next)
	c.next += uint64(n)
	return t
}
