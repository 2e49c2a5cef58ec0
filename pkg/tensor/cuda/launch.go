package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The internal launch API the op groups run their kernels with:
//
//	k := d.fn("drafter_rmsnorm")        // once, in the group's init
//	a := d.args()                       // per launch: reset the argument buffer
//	a.ptr(out).ptr(x).i32(rows).f32(eps)
//	d.launch(k, dim3{x: rows, y: 1, z: 1}, dim3{x: 256, y: 1, z: 1}, 0)
//
// The argument buffer is C memory owned by the device value (cuLaunchKernel
// reads it through a C array of pointers to its slots), so a launch
// allocates nothing.

// dim3 is a launch's grid or block size, as CUDA's.
type dim3 struct{ x, y, z uint32 }

// kernel is a kernel of the embedded PTX, looked up once at Open.
type kernel struct {
	name string
	fn   uintptr // CUfunction
}

// missingKernel is fn's panic for a kernel the embedded PTX lacks, which
// Open turns into its error.
type missingKernel string

func (m missingKernel) String() string {
	return fmt.Sprintf("kernel %s is not in the embedded PTX (run make ptx)", string(m))
}

// fn returns the kernel name of the embedded PTX. Call it once, in an op
// group's init, and keep the result: it panics (Open reports it as an
// error) when the PTX lacks the kernel.
func (d *Device) fn(name string) *kernel {
	k, ok := d.sh.kern[name]
	if !ok {
		panic(missingKernel(name))
	}
	return k
}

// maxArgs is the most arguments a kernel takes.
const maxArgs = 32

// argBuf is a device value's launch arguments: maxArgs 8-byte slots in C
// memory (a 32-bit value in a slot's low half: the host is little-endian)
// and the C array of pointers to them that cuLaunchKernel takes.
type argBuf struct {
	n      int
	vals   *[maxArgs]uint64
	params unsafe.Pointer
	mem    unsafe.Pointer
}

func (a *argBuf) init(drv *driver) {
	a.mem = drv.cMalloc(16 * maxArgs)
	a.vals = (*[maxArgs]uint64)(a.mem)
	a.params = unsafe.Add(a.mem, 8*maxArgs)
	ptrs := (*[maxArgs]unsafe.Pointer)(a.params)
	for i := range ptrs {
		ptrs[i] = unsafe.Add(a.mem, 8*i)
	}
}

func (a *argBuf) free(drv *driver) {
	if a.mem != nil {
		drv.cFree(a.mem)
	}
	*a = argBuf{}
}

// args resets the device's argument buffer and returns it, for the next
// launch.
func (d *Device) args() *argBuf {
	d.arg.n = 0
	return &d.arg
}

// u64 appends a 64-bit argument (long long, a pointer).
func (a *argBuf) u64(v uint64) *argBuf {
	if a.n == maxArgs {
		panic("cuda: more than 32 kernel arguments")
	}
	a.vals[a.n] = v
	a.n++
	return a
}

// ptr appends the device address of t's first value (0 for an empty tensor).
func (a *argBuf) ptr(t tensor.Tensor) *argBuf { return a.u64(tensor.DeviceAddr(t)) }

// addr appends a device address.
func (a *argBuf) addr(p uint64) *argBuf { return a.u64(p) }

// i32 appends an int argument; v must fit in 32 bits.
func (a *argBuf) i32(v int) *argBuf {
	if v != int(int32(v)) {
		panic(fmt.Sprintf("cuda: kernel argument %d does not fit an int", v))
	}
	return a.u64(uint64(uint32(int32(v))))
}

// f32 appends a float argument.
func (a *argBuf) f32(v float32) *argBuf { return a.u64(uint64(math.Float32bits(v))) }

// f64 appends a double argument.
func (a *argBuf) f64(v float64) *argBuf { return a.u64(math.Float64bits(v)) }

// launch runs k on the device's stream with the arguments of args (a grid
// with no blocks launches nothing). A failed launch panics: it is a device
// fault or a kernel's bad configuration, not bad input.
func (d *Device) launch(k *kernel, grid, block dim3, sharedBytes int) {
	if grid.x == 0 || grid.y == 0 || grid.z == 0 {
		return
	}
	if r := d.graphing(); r != nil && !r.record(kernelOp(k, grid, block, sharedBytes, &d.arg)) {
		return
	}
	if err := d.sh.drv.launch(k.fn, grid, block, sharedBytes, d.arg.params); err != nil {
		panic(fmt.Sprintf("cuda: launching %s (grid %d,%d,%d block %d,%d,%d, %d bytes shared): %v",
			k.name, grid.x, grid.y, grid.z, block.x, block.y, block.z, sharedBytes, err))
	}
}

// allowShared lets k ask for up to bytes of dynamic shared memory (above the
// default 48 KiB a kernel must opt in; Info.SharedOptin is the GPU's most).
// Call it once, in the group's init.
func (d *Device) allowShared(k *kernel, bytes int) {
	const maxDynamicShared = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	d.check("setting "+k.name+"'s shared memory", d.sh.drv.funcAttr(k.fn, maxDynamicShared, bytes))
}

// The scratch slots: one device buffer each per device value, grown on
// demand. An op uses its slots only until it returns (the next op may reuse
// them: the stream orders the kernels), so ops share them; an op that calls
// another op must not expect its slots to survive the call. scratchCast is
// MulT's (the input cast to 16 bits), scratchWeight too (an MXFP4 weight's
// panel widened to float32).
const (
	scratchIDs = iota
	scratchMask
	scratchA
	scratchB
	scratchC
	scratchD
	scratchCast
	scratchWeight
	numScratch
)

// devBuf is a scratch buffer: its address and size in bytes.
type devBuf struct {
	addr uint64
	size int
}

// hostBuf is the pinned host buffer: its address and size in bytes.
type hostBuf struct {
	p    unsafe.Pointer
	size int
}

// grown returns the size a buffer grows to when it must hold need bytes:
// at least 1.5 times the old size, so that a growing caller reallocates
// rarely, in 256-byte units.
func grown(old, need int) int {
	n := max(need, old+old/2, 4096)
	return (n + 255) &^ 255
}

// scratch returns the device buffer of slot, of at least bytes (its values
// left from earlier ops).
func (d *Device) scratch(slot int, bytes int) uint64 {
	s := &d.scr[slot]
	if bytes <= s.size {
		return s.addr
	}
	drv := d.sh.drv
	n := grown(s.size, bytes)
	if s.addr != 0 {
		// Earlier kernels may still read it.
		d.check("growing scratch", drv.sync())
		d.check("growing scratch", drv.free(s.addr))
		*s = devBuf{}
	}
	p, err := drv.alloc(n)
	if err != nil {
		panic(allocError(err, int64(n)).Error() + " (scratch)")
	}
	*s = devBuf{addr: p, size: n}
	return p
}

// hostScratch returns the device value's pinned host buffer, of at least
// bytes: where an op stages host values (ids, masks) for toDevice, and reads
// small results back with toHost.
func (d *Device) hostScratch(bytes int) unsafe.Pointer {
	h := &d.host
	if bytes <= h.size {
		return h.p
	}
	drv := d.sh.drv
	n := grown(h.size, bytes)
	if h.p != nil {
		// The copies wait for the stream: nothing reads it now.
		d.check("growing the pinned buffer", drv.hostFree(h.p))
		*h = hostBuf{}
	}
	p, err := drv.hostAlloc(n)
	if err != nil {
		panic(fmt.Sprintf("cuda: pinning %s of host memory: %v", gib(int64(n)), err))
	}
	*h = hostBuf{p: p, size: n}
	return p
}

// toDevice copies bytes from host memory src (pinned, or Go memory holding
// no pointers) to the device address dst, after the work queued before, and
// returns when src may be reused.
func (d *Device) toDevice(dst uint64, src unsafe.Pointer, bytes int) {
	if r := d.graphing(); r != nil && bytes > 0 {
		d.stageToDevice(r, dst, src, bytes)
		return
	}
	if bytes > 0 {
		d.check("copy to the device", d.sh.drv.htod(dst, src, bytes))
	}
}

// toHost copies bytes from the device address src to host memory dst once
// the work queued before is done.
func (d *Device) toHost(dst unsafe.Pointer, src uint64, bytes int) {
	if bytes > 0 {
		d.check("copy to the host", d.sh.drv.dtoh(dst, src, bytes))
	}
}
