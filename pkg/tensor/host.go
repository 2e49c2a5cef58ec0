package tensor

import "fmt"

// Host storage, for a device's implementation only.
//
// A device whose memory is the host's (the CPU device, pkg/tensor/cpu) keeps
// a tensor's values in host slices and builds and reads its tensors and
// caches through the functions below. They are not for the callers of a
// device: a layer, a model or a trainer reaches values through the Device
// (Upload, Write, Read, HostF32), so that it runs on any device.
// internal/deps checks that no package outside pkg/tensor/... calls them.

// HostTensorF32 returns the float32 host values v as a [rows, cols] tensor
// viewing them (v holds at least rows·cols values), for a device's
// implementation only.
func HostTensorF32(v []float32, rows, cols int) Tensor {
	if len(v) < rows*cols {
		panic(fmt.Sprintf("tensor: HostTensorF32 of %d values for %dx%d", len(v), rows, cols))
	}
	return Tensor{dt: F32, rows: rows, cols: cols, f32: v[:rows*cols]}
}

// HostTensorU16 returns the 16-bit host values v (bit patterns of dtype dt,
// BF16 or F16) as a [rows, cols] tensor viewing them (v holds rows·cols
// values), for a device's implementation only.
func HostTensorU16(dt DType, v []uint16, rows, cols int) Tensor {
	return Tensor{dt: dt, rows: rows, cols: cols, u16: v}
}

// HostTensorI32 returns the int32 host values v as a [rows, cols] I32 tensor
// viewing them (v holds rows·cols values), for a device's implementation
// only.
func HostTensorI32(v []int32, rows, cols int) Tensor {
	return Tensor{dt: I32, rows: rows, cols: cols, i32: v}
}

// HostValuesF32 returns the host values of a float32 tensor made by
// HostTensorF32 (nil for another dtype), for a device's implementation only.
func HostValuesF32(t Tensor) []float32 { return t.f32 }

// HostValuesU16 returns the host bit patterns of a 16-bit tensor made by
// HostTensorU16 (nil for another dtype), for a device's implementation only.
func HostValuesU16(t Tensor) []uint16 { return t.u16 }

// HostValuesI32 returns the host values of an I32 tensor made by
// HostTensorI32 (nil for another dtype), for a device's implementation only.
func HostValuesI32(t Tensor) []int32 { return t.i32 }

// HostKV returns a cache of capacity positions of kvDim keys and values per
// layer whose memory is the host slices k, v and kt (per layer: K and V
// [capacity, kvDim] row-major, K transposed [kvDim, capacity]; the CPU
// device's layout, which KV.K, KV.V and KV.KT return), for a device's
// implementation only.
func HostKV(kvDim, capacity int, k, v, kt [][]float32) *KV {
	return &KV{kvDim: kvDim, cap: capacity, k: k, v: v, kt: kt}
}

// HostKVLayers returns the per-layer host slices a cache made by HostKV holds
// (K, V and K transposed), for a device's implementation only.
func HostKVLayers(kv *KV) (k, v, kt [][]float32) { return kv.k, kv.v, kv.kt }

// Device storage, for the implementation of a device whose memory is not the
// host's (pkg/tensor/cuda), likewise for a device's implementation only.

// OnDevice returns a [rows, cols] tensor of dtype dt whose values lie in a
// device's own memory at address addr: the constructor a device other than
// the CPU's (pkg/tensor/cuda) builds its tensors with. Only that device
// reads or writes the values.
func OnDevice(dt DType, rows, cols int, addr uint64) Tensor {
	return Tensor{dt: dt, rows: rows, cols: cols, addr: addr}
}

// DeviceAddr returns the device address of t's first value for a tensor made
// by OnDevice (0 for a tensor in host memory): what a device passes to its
// kernels.
func DeviceAddr(t Tensor) uint64 { return t.addr }

// NewDeviceKV returns a cache of capacity positions of kvDim keys and values
// per layer whose memory a device other than the CPU's keeps in storage (its
// own value, which only it interprets).
func NewDeviceKV(kvDim, capacity int, storage any) *KV {
	return &KV{kvDim: kvDim, cap: capacity, storage: storage}
}
