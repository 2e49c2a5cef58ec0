package cuda

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// kvStorage is a KV cache's memory on the GPU (tensor.KV.Storage): one block
// of 2·layers planes of [capacity, kvDim] float32 values, row-major, layer
// l's keys in plane 2l and its values in plane 2l+1.
type kvStorage struct {
	base          uint64
	layers        int
	kvDim, cap    int
	plane         int // bytes per plane: cap·kvDim·4
	owner         *shared
	layerAddrsBuf [2]uint64
}

// kvOf returns kv's GPU storage, panicking for a cache of another device.
func (d *Device) kvOf(kv *tensor.KV) *kvStorage {
	s, ok := kv.Storage().(*kvStorage)
	if !ok || s.owner != d.sh {
		panic("cuda: a KV cache of another device")
	}
	return s
}

// kvLayer returns the device addresses of layer l's keys and values, each
// [Cap, KVDim] float32 row-major (position p's keys at k + p·KVDim·4): the
// layout Attend reads.
func (d *Device) kvLayer(kv *tensor.KV, l int) (k, v uint64) {
	s := d.kvOf(kv)
	if l < 0 || l >= s.layers {
		panic(fmt.Sprintf("cuda: layer %d of a KV cache of %d", l, s.layers))
	}
	k = s.base + uint64(2*l*s.plane)
	return k, k + uint64(s.plane)
}

// NewKV allocates a zeroed cache of capacity positions for layers layers of
// kvDim keys and values each (see kvStorage for the layout).
func (d *Device) NewKV(layers, kvDim, capacity int) (*tensor.KV, error) {
	if layers <= 0 || kvDim <= 0 {
		return nil, fmt.Errorf("cuda: a KV cache of %d layers of %d key values: both must be positive", layers, kvDim)
	}
	if capacity < 0 {
		return nil, fmt.Errorf("cuda: KV cache capacity %d is negative", capacity)
	}
	plane := capacity * kvDim * 4
	s := &kvStorage{layers: layers, kvDim: kvDim, cap: capacity, plane: plane, owner: d.sh}
	if total := 2 * layers * plane; total > 0 {
		p, err := d.allocBytes(total)
		if err != nil {
			return nil, fmt.Errorf("cuda: KV cache of %d positions: %v", capacity, err)
		}
		if err := d.sh.drv.memset(p, 0, total); err != nil {
			return nil, fmt.Errorf("cuda: KV cache of %d positions: %v", capacity, err)
		}
		s.base = p
	}
	return tensor.NewDeviceKV(kvDim, capacity, s), nil
}

// The device reports its memory, so that a distillation sizes its batch from it.
var _ tensor.MemoryReporter = (*Device)(nil)

// KVBytes returns the bytes NewKV allocates for a cache of layers layers of
// kvDim keys and values at capacity positions: float32 keys and values, one
// plane each per layer (tensor.MemoryReporter).
func (d *Device) KVBytes(layers, kvDim, capacity int) int64 {
	return 2 * int64(layers) * int64(capacity) * int64(kvDim) * 4
}

// KVWrite stores the rows of k and v (both [r, kvDim] float32) at positions
// row..row+r-1 of layer l: two copies on the stream.
func (d *Device) KVWrite(kv *tensor.KV, l, row int, k, v tensor.Tensor) {
	s := d.kvOf(kv)
	n := k.Len()
	if k.DType() != tensor.F32 || v.DType() != tensor.F32 || v.Len() != n || n%s.kvDim != 0 || row < 0 || row+n/s.kvDim > s.cap {
		panic(fmt.Sprintf("cuda: KVWrite of %dx%d keys and %dx%d values at position %d of a cache of %d positions of %d",
			k.Rows(), k.Cols(), v.Rows(), v.Cols(), row, s.cap, s.kvDim))
	}
	if n == 0 {
		return
	}
	kd, vd := d.kvLayer(kv, l)
	off := uint64(row * s.kvDim * 4)
	if r := d.graphing(); r != nil {
		d.kvWriteStaged(r, kd+off, vd+off, k, v, n)
		return
	}
	d.check("KVWrite", d.sh.drv.dtod(kd+off, tensor.DeviceAddr(k), 4*n))
	d.check("KVWrite", d.sh.drv.dtod(vd+off, tensor.DeviceAddr(v), 4*n))
}

// KVMove copies position src to position dst in every layer's keys and
// values: one kernel over all the planes.
func (d *Device) KVMove(kv *tensor.KV, dst, src int) {
	s := d.kvOf(kv)
	if dst < 0 || src < 0 || dst >= s.cap || src >= s.cap {
		panic(fmt.Sprintf("cuda: KVMove of position %d to %d in a cache of %d", src, dst, s.cap))
	}
	if dst == src {
		return
	}
	a := d.args()
	a.addr(s.base).i32(2 * s.layers).u64(uint64(s.cap * s.kvDim)).i32(s.kvDim).i32(dst).i32(src)
	d.launch(d.core.kvMove, dim3{uint32((s.kvDim + 255) / 256), uint32(2 * s.layers), 1}, dim3{256, 1, 1}, 0)
}
