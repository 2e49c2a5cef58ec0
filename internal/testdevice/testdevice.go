// Package testdevice holds a test device: the CPU device presented as a
// device whose memory is not the host's (as the CUDA device's is), so that a
// test can show that code reaches every value through the device's
// interface (Alloc, Upload, Write, Read) and not through host slices that
// only the CPU device shares.
package testdevice

import (
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// Copying is the CPU device with Upload copying the matrix, HostF32
// declining and siblings that are Copying too: code that updated host
// values after uploading them, or read values through a host slice, gets
// other results on it than on the CPU device.
type Copying struct{ *cpu.Device }

// New returns a Copying device on the default backend.
func New() Copying { return Copying{cpu.New(nil)} }

// Sibling returns a Copying sibling.
func (d Copying) Sibling() tensor.Device {
	return Copying{d.Device.Sibling().(*cpu.Device)}
}

// Upload returns a tensor holding a copy of m's values.
func (d Copying) Upload(m tensor.Matrix) (tensor.Tensor, error) {
	c := m
	if m.DType == tensor.F32 {
		c.F32 = append([]float32(nil), m.F32...)
	} else {
		c.U16 = append([]uint16(nil), m.U16...)
	}
	return d.Device.Upload(c)
}

// HostF32 declines: the values are reached through Read only.
func (d Copying) HostF32(tensor.Tensor) ([]float32, bool) { return nil, false }
