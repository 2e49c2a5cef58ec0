package cuda

import (
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// decodeOps are the kernels of kernels/decode.cu: decoding's sampling step.
type decodeOps struct {
	sample *kernel
}

func (o *decodeOps) init(d *Device) { o.sample = d.fn("drafter_decode_sample") }

// sampleBlock is SampleRows' block for rows of n logits: a power of two
// from 32 to 1024, about 8 columns per thread (the kernel's trees halve the
// block, and thread 0's scan over the threads' sums is short beside a row
// of a large vocabulary).
func sampleBlock(n int) dim3 {
	b := 32
	for b < 1024 && b*8 < n {
		b *= 2
	}
	return dim3{x: uint32(b), y: 1, z: 1}
}

// SampleRows draws every row's token on the device (one block per row) and
// copies back only the ids: the uniforms go up, rows·8 bytes, at a
// temperature above 0.
func (d *Device) SampleRows(ids []int32, logits tensor.Tensor, temperature float64, u []float64) {
	tensor.CheckSampleRows("SampleRows", ids, logits, temperature, u)
	rows, n := logits.Rows(), logits.Cols()
	if rows == 0 {
		return
	}
	buf := d.scratch(scratchA, 4*rows)
	var up uint64
	if temperature != 0 {
		up = d.scratch(scratchB, 8*rows)
		d.toDevice(up, unsafe.Pointer(&u[0]), 8*rows)
	}
	d.args().addr(buf).ptr(logits).i32(n).f64(temperature).addr(up)
	d.launch(d.dec.sample, lossGrid(rows), sampleBlock(n), 0)
	d.toHost(unsafe.Pointer(&ids[0]), buf, 4*rows)
}
