// Package cuda is drafter's CUDA device: a tensor.Device whose tensors live
// in an NVIDIA GPU's memory and whose ops run as drafter's own kernels
// (CUDA C in kernels/, compiled to PTX by clang and embedded) and cuBLAS
// products.
//
// Nothing is linked at build time: the driver (libcuda.so.1, or
// $DRAFTER_LIBCUDA) and cuBLAS (libcublas.so.13, .12 or .11, from
// $DRAFTER_CUDA_LIBS when set) are loaded with dlopen when a device is
// opened, so one binary runs on machines with and without a GPU, with any
// CUDA major the driver supports (README.md, "GPUs (CUDA)"). Probe says
// whether a GPU is usable and, when not, why in one line; Open opens it.
//
// Every call into the driver makes the device's context current and does its
// work in one C call, so no goroutine is locked to a thread. Kernels and
// copies run in order on one stream per device; a copy to or from the host
// waits for it. Device memory lives until the Device that Open returned is
// closed: tensors carry no finalizers, and a model allocates its memory once.
package cuda

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

var _ tensor.Device = (*Device)(nil)

// ptxFiles holds the kernels compiled to PTX (make ptx), one file per group
// of kernels/*.cu, JIT-compiled by the driver for the GPU at Open.
//
//go:embed ptx/*.ptx
var ptxFiles embed.FS

// Info describes a GPU and the libraries that drive it.
type Info struct {
	// Ordinal is the GPU's index among the driver's devices.
	Ordinal int
	// Name is the GPU's name ("NVIDIA H100 80GB HBM3").
	Name string
	// Major and Minor are its compute capability (9.0 for Hopper).
	Major, Minor int
	// SMs is its number of multiprocessors.
	SMs int
	// SharedOptin is the most shared memory a block may ask for (bytes),
	// once a kernel opts in.
	SharedOptin int
	// Memory is its total memory in bytes.
	Memory int64
	// Driver is the driver's CUDA version as cuDriverGetVersion gives it
	// (12020 for 12.2).
	Driver int
	// CUBLAS is cuBLAS's version as cublasGetVersion gives it (120804 for
	// 12.8.4), and CUBLASLib the library it was loaded from.
	CUBLAS    int
	CUBLASLib string
	// Err is why drafter cannot use this GPU (ProbeAll), nil when it can.
	Err error
}

// String describes the GPU in one line.
func (i Info) String() string {
	blas := i.CUBLASLib
	if i.CUBLAS != 0 {
		blas = "cuBLAS " + blasVersion(i.CUBLAS) + " (" + i.CUBLASLib + ")"
	}
	return fmt.Sprintf("cuda:%d %s: compute capability %d.%d, %s, %d SMs, driver %s, %s",
		i.Ordinal, i.Name, i.Major, i.Minor, gib(i.Memory), i.SMs, driverVersion(i.Driver), blas)
}

// driverVersion formats a cuDriverGetVersion value ("12.2").
func driverVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// blasVersion formats a cublasGetVersion value ("12.8.4").
func blasVersion(v int) string { return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100) }

// gib formats a size in bytes as drafter's messages do ("1.0 GiB").
func gib(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", b)
}

// minMajor is the least compute capability drafter runs on (8.0, Ampere):
// the PTX targets sm_80 (bf16 conversions and tensor cores).
const minMajor = 8

// driverError is a failed driver or cuBLAS call: the entry point and the
// status's name ("cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY").
type driverError struct {
	call string
	code int
	name string
}

func (e *driverError) Error() string { return e.call + ": " + e.name }

// cublasStatusName returns the name of a cublasStatus_t.
func cublasStatusName(code int) string {
	switch code {
	case 1:
		return "CUBLAS_STATUS_NOT_INITIALIZED"
	case 3:
		return "CUBLAS_STATUS_ALLOC_FAILED"
	case 7:
		return "CUBLAS_STATUS_INVALID_VALUE"
	case 8:
		return "CUBLAS_STATUS_ARCH_MISMATCH"
	case 11:
		return "CUBLAS_STATUS_MAPPING_ERROR"
	case 13:
		return "CUBLAS_STATUS_EXECUTION_FAILED"
	case 14:
		return "CUBLAS_STATUS_INTERNAL_ERROR"
	case 15:
		return "CUBLAS_STATUS_NOT_SUPPORTED"
	case 16:
		return "CUBLAS_STATUS_LICENSE_ERROR"
	}
	return fmt.Sprintf("cublasStatus %d", code)
}

// blasNames are the cuBLAS sonames tried, newest CUDA major first.
var blasNames = [...]string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}

// Probe reports whether GPU ordinal can run drafter: the driver loads, cuInit
// succeeds, the GPU exists with compute capability 8.0 or later and a cuBLAS
// loads and starts. The error is the one-line reason it cannot ("driver 12.2
// loaded, cuInit -> 100 (CUDA_ERROR_NO_DEVICE)"), which a caller falling
// back to the CPU prints.
func Probe(ordinal int) (Info, error) {
	drv, info, err := start(ordinal, false)
	if err != nil {
		return Info{}, err
	}
	err = drv.stop()
	drv.release()
	if err != nil {
		return Info{}, fmt.Errorf("GPU %d (%s): %v", ordinal, info.Name, err)
	}
	return info, nil
}

// ProbeAll reports every GPU the driver shows, each with Err set where
// drafter cannot use it (compute capability below 8.0), or the one-line
// reason no GPU can be used at all (no driver, cuInit failing, no GPU, no
// cuBLAS). It starts no context: the cuBLAS version stays 0.
func ProbeAll() ([]Info, error) {
	drv, version, err := loadInit()
	if err != nil {
		return nil, err
	}
	defer drv.release()
	count, _, err := drv.device(-1)
	if err != nil {
		return nil, fmt.Errorf("driver %s: %v", driverVersion(version), err)
	}
	if count == 0 {
		return nil, fmt.Errorf("driver %s sees no GPU", driverVersion(version))
	}
	lib, err := drv.findBLAS()
	if err != nil {
		return nil, err
	}
	infos := make([]Info, count)
	for i := range infos {
		infos[i], infos[i].Err = drv.check(i, version)
		infos[i].Ordinal, infos[i].Driver, infos[i].CUBLASLib = i, version, lib
	}
	return infos, nil
}

// loadInit loads the driver ($DRAFTER_LIBCUDA, else libcuda.so.1) and runs
// cuInit, returning the driver's CUDA version.
func loadInit() (*driver, int, error) {
	path := os.Getenv("DRAFTER_LIBCUDA")
	if path == "" {
		path = "libcuda.so.1"
	}
	drv, err := loadDriver(path)
	if err != nil {
		return nil, 0, err
	}
	version, err := drv.init()
	if err != nil {
		drv.release()
		if e, ok := err.(*driverError); ok {
			return nil, 0, fmt.Errorf("driver %s loaded, cuInit -> %d (%s)", driverVersion(version), e.code, e.name)
		}
		return nil, 0, fmt.Errorf("driver %s loaded, %v", driverVersion(version), err)
	}
	return drv, version, nil
}

// check reads GPU ordinal's facts and says why drafter cannot use it, if it
// cannot.
func (drv *driver) check(ordinal, version int) (Info, error) {
	count, info, err := drv.device(ordinal)
	info.Driver = version
	switch {
	case err != nil:
		return info, fmt.Errorf("driver %s: %v", driverVersion(version), err)
	case count == 0:
		return info, fmt.Errorf("driver %s sees no GPU", driverVersion(version))
	case ordinal < 0 || ordinal >= count:
		return info, fmt.Errorf("no GPU %d: driver %s sees %d (0 to %d)", ordinal, driverVersion(version), count, count-1)
	case info.Major < minMajor:
		return info, fmt.Errorf("GPU %d (%s) has compute capability %d.%d; drafter needs %d.0 or later", ordinal, info.Name, info.Major, info.Minor, minMajor)
	}
	return info, nil
}

// findBLAS loads the newest cuBLAS it finds ($DRAFTER_CUDA_LIBS/libcublas.so.N
// when set, else libcublas.so.N from the default search path) and returns
// where it found it.
func (drv *driver) findBLAS() (string, error) {
	dir := os.Getenv("DRAFTER_CUDA_LIBS")
	var other []string // failures other than a missing file
	for _, name := range blasNames {
		p := name
		if dir != "" {
			p = filepath.Join(dir, name)
		}
		missing, err := drv.loadBLAS(p)
		if err == nil {
			return p, nil
		}
		if missing || !strings.Contains(err.Error(), "cannot open shared object file") {
			other = append(other, err.Error())
		}
	}
	where := ""
	if dir != "" {
		where = " in " + dir
	}
	msg := fmt.Sprintf("no cuBLAS%s: tried libcublas.so.13, .12, .11", where)
	if len(other) > 0 {
		msg += " (" + strings.Join(other, "; ") + ")"
	}
	return "", fmt.Errorf("%s", msg)
}

// start loads the driver and cuBLAS, checks the GPU and starts its primary
// context and a cuBLAS handle (with a stream when full), as Probe describes.
func start(ordinal int, full bool) (*driver, Info, error) {
	drv, version, err := loadInit()
	if err != nil {
		return nil, Info{}, err
	}
	fail := func(err error) (*driver, Info, error) {
		drv.stop()
		drv.release()
		return nil, Info{}, err
	}
	info, err := drv.check(ordinal, version)
	if err != nil {
		return fail(err)
	}
	if info.CUBLASLib, err = drv.findBLAS(); err != nil {
		return fail(err)
	}
	if info.CUBLAS, err = drv.start(full); err != nil {
		return fail(fmt.Errorf("GPU %d (%s): %v", ordinal, info.Name, err))
	}
	return drv, info, nil
}

// Device is a CUDA GPU as a tensor.Device: Open returns the root, Sibling
// more device values on the same context and stream with scratch of their
// own. A Device value serves one caller at a time; siblings may run on
// several goroutines at once (their work is ordered on the shared stream).
type Device struct {
	sh   *shared
	root bool
	// products is MatMul's arithmetic (WithProducts): float32 unless a
	// trainer asked for bf16 tensor cores.
	products tensor.Products
	// arg is the launch argument buffer (C memory, args/launch).
	arg argBuf
	// scr are the scratch buffers (scratch), host the pinned host buffer
	// (hostScratch).
	scr  [numScratch]devBuf
	host hostBuf
	// The op groups' kernels and state, looked up once (init).
	core coreOps
	ew   elementwiseOps
	att  attentionOps
	loss lossOps
	dec  decodeOps
	// gs is the value's CUDA graphs (graph.go).
	gs graphState
}

// shared is what a root Device and its siblings share: the driver (context,
// stream, cuBLAS handle), the kernels and the memory.
type shared struct {
	drv     *driver
	info    Info
	modules []uintptr
	kern    map[string]*kernel
	// mu guards the memory below: siblings allocate from several
	// goroutines.
	mu sync.Mutex
	// blocks is the device memory to free at Close: the arena's chunks and
	// allocations of their own.
	blocks []uint64
	// next and end bound the free part of the current arena chunk.
	next, end uint64
	devs      []*Device // the root and its open siblings
	// weights are the weights whose resident copy this device uploaded.
	weights map[*tensor.Weight]struct{}
	closed  bool
	// graphsOff says why the device runs no CUDA graphs, "" when it can
	// (startGraphs); gr is its values' switch and counts.
	graphsOff string
	gr        sharedGraphs
}

// The arena: small allocations are carved from chunks of arenaChunk bytes,
// aligned to allocAlign (cuMemAlloc's own alignment), so that a model's
// hundreds of tensors cost a few driver calls (cuMemAlloc synchronizes the
// device); allocations of a quarter chunk or more get their own.
const (
	arenaChunk = 32 << 20
	allocAlign = 256
)

// Open opens GPU ordinal (see Probe for what it checks and its errors),
// retains its primary context, creates a stream and a cuBLAS handle bound to
// it and loads the kernels. Close releases them.
func Open(ordinal int) (*Device, error) {
	drv, info, err := start(ordinal, true)
	if err != nil {
		return nil, err
	}
	sh := &shared{drv: drv, info: info, kern: map[string]*kernel{}, weights: map[*tensor.Weight]struct{}{}}
	d := &Device{sh: sh, root: true}
	if err := sh.loadKernels(); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.setup(); err != nil {
		d.Close()
		return nil, err
	}
	sh.startGraphs()
	return d, nil
}

// loadKernels JIT-compiles the embedded PTX and looks up every drafter_
// kernel of it once.
func (sh *shared) loadKernels() error {
	files, err := ptxFiles.ReadDir("ptx")
	if err != nil {
		return err
	}
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".ptx") {
			continue
		}
		text, err := ptxFiles.ReadFile("ptx/" + f.Name())
		if err != nil {
			return err
		}
		names := entries(string(text))
		if len(names) == 0 {
			continue
		}
		mod, err := sh.drv.loadModule(string(text))
		if err != nil {
			return fmt.Errorf("GPU %d (%s): loading ptx/%s: %v", sh.info.Ordinal, sh.info.Name, f.Name(), err)
		}
		sh.modules = append(sh.modules, mod)
		for _, name := range names {
			fn, err := sh.drv.function(mod, name)
			if err != nil {
				return fmt.Errorf("GPU %d (%s): kernel %s of ptx/%s: %v", sh.info.Ordinal, sh.info.Name, name, f.Name(), err)
			}
			sh.kern[name] = &kernel{name: name, fn: fn}
		}
	}
	return nil
}

// entries returns the names of the drafter_ kernels a PTX text defines (its
// ".entry" directives).
func entries(ptx string) []string {
	var names []string
	for line := range strings.Lines(ptx) {
		i := strings.Index(line, ".entry ")
		if i < 0 {
			continue
		}
		name := strings.TrimSpace(line[i+len(".entry "):])
		if j := strings.IndexAny(name, "( \t"); j >= 0 {
			name = name[:j]
		}
		if strings.HasPrefix(name, "drafter_") {
			names = append(names, name)
		}
	}
	return names
}

// setup makes d ready to run ops: its argument buffer, and each op group's
// kernels looked up (a kernel missing from the PTX is an error, not a panic
// in the middle of a model).
func (d *Device) setup() (err error) {
	sh := d.sh
	sh.mu.Lock()
	sh.devs = append(sh.devs, d)
	sh.mu.Unlock()
	d.arg.init(sh.drv)
	defer func() {
		if r := recover(); r != nil {
			if m, ok := r.(missingKernel); ok {
				err = fmt.Errorf("GPU %d (%s): %s", sh.info.Ordinal, sh.info.Name, m)
				return
			}
			panic(r)
		}
	}()
	d.core.init(d)
	d.ew.init(d)
	d.att.init(d)
	d.loss.init(d)
	d.dec.init(d)
	return nil
}

// Info describes the device's GPU and libraries.
func (d *Device) Info() Info { return d.sh.info }

// Name says "cuda:" the ordinal and the GPU's name.
func (d *Device) Name() string { return fmt.Sprintf("cuda:%d/%s", d.sh.info.Ordinal, d.sh.info.Name) }

// Sibling returns another device value on the same GPU, context and stream,
// sharing the memory, with scratch of its own (and d's MatMul arithmetic,
// WithProducts).
func (d *Device) Sibling() tensor.Device {
	s := &Device{sh: d.sh, products: d.products}
	if err := s.setup(); err != nil {
		// The kernels were found for d already: this cannot happen.
		panic(fmt.Sprintf("cuda: Sibling: %v", err))
	}
	return s
}

// Close releases the device. Closing the device Open returned frees all its
// memory (every tensor, cache and weight copy of it and its siblings),
// its kernels, stream, cuBLAS handle and context: nothing of it may be used
// afterwards. Closing a sibling frees only its scratch. The error is the
// first failed call's.
func (d *Device) Close() error {
	sh := d.sh
	if sh == nil {
		return nil
	}
	if !d.root {
		sh.mu.Lock()
		for i, x := range sh.devs {
			if x == d {
				sh.devs = append(sh.devs[:i], sh.devs[i+1:]...)
				break
			}
		}
		closed := sh.closed
		sh.mu.Unlock()
		if !closed {
			sh.drv.sync()
			d.freeOwn()
		}
		d.sh = nil
		return nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return nil
	}
	sh.closed = true
	first := sh.drv.sync()
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, x := range sh.devs {
		x.freeOwn()
	}
	sh.devs = nil
	for _, p := range sh.blocks {
		keep(sh.drv.free(p))
	}
	sh.blocks = nil
	sh.weights = nil
	for _, m := range sh.modules {
		keep(sh.drv.unloadModule(m))
	}
	sh.modules = nil
	keep(sh.drv.stop())
	sh.drv.release()
	d.sh = nil
	if first != nil {
		return fmt.Errorf("cuda: Close: %v", first)
	}
	return nil
}

// freeOwn frees a device value's scratch, pinned buffer and argument buffer.
func (d *Device) freeOwn() {
	drv := d.sh.drv
	d.freeGraphs()
	for i := range d.scr {
		if d.scr[i].addr != 0 {
			drv.free(d.scr[i].addr)
		}
		d.scr[i] = devBuf{}
	}
	if d.host.p != nil {
		drv.hostFree(d.host.p)
		d.host = hostBuf{}
	}
	d.arg.free(drv)
}

// MemInfo returns the GPU's free and total memory in bytes.
func (d *Device) MemInfo() (free, total int64, err error) { return d.sh.drv.memInfo() }

// allocBytes returns bytes of device memory (uninitialized) from the arena,
// or an allocation of its own for a large one.
func (d *Device) allocBytes(bytes int) (uint64, error) {
	sh := d.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return 0, fmt.Errorf("cuda: allocation on a closed device")
	}
	n := uint64(bytes+allocAlign-1) &^ (allocAlign - 1)
	if n >= arenaChunk/4 {
		p, err := sh.drv.alloc(bytes)
		if err != nil {
			return 0, allocError(err, int64(bytes))
		}
		sh.blocks = append(sh.blocks, p)
		return p, nil
	}
	if sh.next+n > sh.end || sh.next == 0 {
		p, err := sh.drv.alloc(arenaChunk)
		if err != nil {
			return 0, allocError(err, arenaChunk)
		}
		sh.blocks = append(sh.blocks, p)
		sh.next, sh.end = p, p+arenaChunk
	}
	p := sh.next
	sh.next += n
	return p, nil
}

// allocError says which allocation failed ("cuda: cuMemAlloc_v2 of 1.0 GiB:
// CUDA_ERROR_OUT_OF_MEMORY").
func allocError(err error, bytes int64) error {
	if e, ok := err.(*driverError); ok {
		return fmt.Errorf("cuda: %s of %s: %s", e.call, gib(bytes), e.name)
	}
	return fmt.Errorf("cuda: allocating %s: %v", gib(bytes), err)
}

// alloc returns an uninitialized [rows, cols] tensor of dtype dt.
func (d *Device) alloc(dt tensor.DType, rows, cols int) (tensor.Tensor, error) {
	if rows < 0 || cols < 0 {
		return tensor.Tensor{}, fmt.Errorf("cuda: cannot allocate %dx%d values", rows, cols)
	}
	switch dt {
	case tensor.F32, tensor.BF16, tensor.F16, tensor.I32:
	default:
		return tensor.Tensor{}, fmt.Errorf("cuda: cannot allocate values of dtype %s", dt)
	}
	bytes := rows * cols * dt.Size()
	if bytes == 0 {
		return tensor.OnDevice(dt, rows, cols, 0), nil
	}
	p, err := d.allocBytes(bytes)
	if err != nil {
		return tensor.Tensor{}, err
	}
	return tensor.OnDevice(dt, rows, cols, p), nil
}

// Alloc returns a zeroed [rows, cols] tensor of dtype dt in the GPU's memory.
func (d *Device) Alloc(dt tensor.DType, rows, cols int) (tensor.Tensor, error) {
	t, err := d.alloc(dt, rows, cols)
	if err != nil || t.Empty() {
		return t, err
	}
	if err := d.sh.drv.memset(tensor.DeviceAddr(t), 0, bytesOf(t)); err != nil {
		return tensor.Tensor{}, fmt.Errorf("cuda: Alloc: %v", err)
	}
	return t, nil
}

// bytesOf returns the bytes t's values occupy (an MXFP4 weight's blocks and
// scales together).
func bytesOf(t tensor.Tensor) int {
	if t.DType() == tensor.MXFP4 {
		return int(tensor.MXFP4Bytes(t.Len()))
	}
	return t.Len() * t.DType().Size()
}

// Upload copies m to the GPU, in m's dtype. An MXFP4 matrix's bytes go as
// stored, its blocks then its scales in one allocation: MulT's kernels read
// them there (a resident weight only: no other op takes an MXFP4 tensor).
func (d *Device) Upload(m tensor.Matrix) (tensor.Tensor, error) {
	if m.DType == tensor.MXFP4 {
		return d.uploadMXFP4(m)
	}
	t, err := d.alloc(m.DType, m.Rows, m.Cols)
	if err != nil || t.Empty() {
		return t, err
	}
	var src unsafe.Pointer
	if m.DType == tensor.F32 {
		src = unsafe.Pointer(&m.F32[:m.Len()][0])
	} else {
		src = unsafe.Pointer(&m.U16[:m.Len()][0])
	}
	if err := d.sh.drv.htod(tensor.DeviceAddr(t), src, bytesOf(t)); err != nil {
		return tensor.Tensor{}, fmt.Errorf("cuda: Upload of %s: %v", gib(int64(bytesOf(t))), err)
	}
	return t, nil
}

// uploadMXFP4 is Upload of an MXFP4 matrix.
func (d *Device) uploadMXFP4(m tensor.Matrix) (tensor.Tensor, error) {
	nb, ns := len(m.Blocks), len(m.Scales)
	if m.Rows < 0 || m.Cols%tensor.MXFP4Block != 0 || nb != m.Len()/2 || ns != m.Len()/tensor.MXFP4Block {
		return tensor.Tensor{}, fmt.Errorf("cuda: Upload of a %dx%d mxfp4 matrix of %d bytes of blocks and %d of scales", m.Rows, m.Cols, nb, ns)
	}
	if nb == 0 {
		return tensor.OnDevice(tensor.MXFP4, m.Rows, m.Cols, 0), nil
	}
	p, err := d.allocBytes(nb + ns)
	if err != nil {
		return tensor.Tensor{}, err
	}
	if err := d.sh.drv.htod(p, unsafe.Pointer(&m.Blocks[0]), nb); err != nil {
		return tensor.Tensor{}, fmt.Errorf("cuda: Upload of %s: %v", gib(int64(nb+ns)), err)
	}
	if err := d.sh.drv.htod(p+uint64(nb), unsafe.Pointer(&m.Scales[0]), ns); err != nil {
		return tensor.Tensor{}, fmt.Errorf("cuda: Upload of %s: %v", gib(int64(nb+ns)), err)
	}
	return tensor.OnDevice(tensor.MXFP4, m.Rows, m.Cols, p), nil
}

// Write copies src into dst's first values.
func (d *Device) Write(dst tensor.Tensor, src []float32) {
	if dst.DType() != tensor.F32 || len(src) > dst.Len() || dst.Cols() > 0 && len(src)%dst.Cols() != 0 {
		panic(fmt.Sprintf("cuda: Write of %d values into a %dx%d %s tensor", len(src), dst.Rows(), dst.Cols(), dst.DType()))
	}
	if len(src) > 0 {
		d.toDevice(tensor.DeviceAddr(dst), unsafe.Pointer(&src[0]), 4*len(src))
	}
}

// WriteI32 copies src into the I32 tensor dst's first values.
func (d *Device) WriteI32(dst tensor.Tensor, src []int32) {
	if dst.DType() != tensor.I32 || len(src) > dst.Len() {
		panic(fmt.Sprintf("cuda: WriteI32 of %d values into a %dx%d %s tensor", len(src), dst.Rows(), dst.Cols(), dst.DType()))
	}
	if len(src) > 0 {
		d.toDevice(tensor.DeviceAddr(dst), unsafe.Pointer(&src[0]), 4*len(src))
	}
}

// Read copies the float32 tensor src into dst, waiting for the work before.
func (d *Device) Read(dst []float32, src tensor.Tensor) {
	if src.DType() != tensor.F32 || len(dst) < src.Len() {
		panic(fmt.Sprintf("cuda: Read of a %dx%d %s tensor into %d values", src.Rows(), src.Cols(), src.DType(), len(dst)))
	}
	if n := src.Len(); n > 0 {
		d.toHost(unsafe.Pointer(&dst[0]), tensor.DeviceAddr(src), 4*n)
	}
}

// HostF32 returns false: the GPU's memory is not the host's.
func (d *Device) HostF32(tensor.Tensor) ([]float32, bool) { return nil, false }

// Copy copies src's values into dst (the same dtype; dst at least as long).
func (d *Device) Copy(dst, src tensor.Tensor) {
	if dst.DType() != src.DType() || dst.Len() < src.Len() {
		panic(fmt.Sprintf("cuda: Copy of a %dx%d %s tensor into a %dx%d %s one", src.Rows(), src.Cols(), src.DType(), dst.Rows(), dst.Cols(), dst.DType()))
	}
	if n := bytesOf(src); n > 0 {
		d.check("Copy", d.sh.drv.dtod(tensor.DeviceAddr(dst), tensor.DeviceAddr(src), n))
	}
}

// Zero sets x's values to zero.
func (d *Device) Zero(x tensor.Tensor) {
	if n := bytesOf(x); n > 0 {
		d.check("Zero", d.sh.drv.memset(tensor.DeviceAddr(x), 0, n))
	}
}

// check panics with the op's name when a driver call failed: an op cannot
// return an error, and a failed call on memory the device allocated is a
// device fault, not bad input.
func (d *Device) check(op string, err error) {
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
}

// Sync waits for the work queued on the device's stream (Read does so
// itself; a caller timing the device needs it).
func (d *Device) Sync() { d.check("Sync", d.sh.drv.sync()) }
