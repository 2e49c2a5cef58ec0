package cpu

import "github.com/drafter-ai/drafter/pkg/tensor"

// f32s, u16s and i32s return a tensor's host values (the CPU device's memory
// is the host's): pkg/tensor's accessors for a device's implementation.
func f32s(t tensor.Tensor) []float32 { return tensor.HostValuesF32(t) }

func u16s(t tensor.Tensor) []uint16 { return tensor.HostValuesU16(t) }

func i32s(t tensor.Tensor) []int32 { return tensor.HostValuesI32(t) }
