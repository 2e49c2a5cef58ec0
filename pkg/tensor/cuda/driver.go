//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The driver's and cuBLAS's types and prototypes, spelled out so that no CUDA
// header is needed at build time (the real ABI: handles are pointers, a
// CUdevice an int, a CUdeviceptr 64 bits, enums ints).
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUevent;
typedef unsigned long long CUdeviceptr;
typedef int cublasStatus_t;
typedef void *cublasHandle_t;

// dc_t is one loaded driver and cuBLAS: the entry points, found with dlsym,
// and the context, stream and cuBLAS handle a Device runs on. It lives in C
// memory, one per Probe or Open: nothing is global, so that two probes of
// different libraries (a test's stand-ins) do not share state.
typedef struct {
	void *lib, *blaslib;
	CUresult (*cuInit)(unsigned);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuGetErrorName)(CUresult, const char **);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuMemGetInfo)(size_t *, size_t *);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
	CUresult (*cuMemFreeHost)(void *);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
	CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
	CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
	CUresult (*cuModuleUnload)(CUmodule);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
		unsigned, CUstream, void **, void **);
	CUresult (*cuStreamCreate)(CUstream *, unsigned);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuEventCreate)(CUevent *, unsigned);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
	CUresult (*cuEventDestroy)(CUevent);

	cublasStatus_t (*cublasCreate)(cublasHandle_t *);
	cublasStatus_t (*cublasDestroy)(cublasHandle_t);
	cublasStatus_t (*cublasSetStream)(cublasHandle_t, CUstream);
	cublasStatus_t (*cublasSetMathMode)(cublasHandle_t, int);
	cublasStatus_t (*cublasGetVersion)(cublasHandle_t, int *);
	cublasStatus_t (*cublasGemmEx)(cublasHandle_t, int, int, int, int, int, const void *,
		const void *, int, int, const void *, int, int, const void *, void *, int, int, int, int);
	cublasStatus_t (*cublasGemmStridedBatchedEx)(cublasHandle_t, int, int, int, int, int, const void *,
		const void *, int, int, long long, const void *, int, int, long long, const void *,
		void *, int, int, long long, int, int, int);

	// A second stream's copies, ordered by events (streams.go).
	CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);

	CUdevice dev;
	CUcontext ctx;
	CUstream stream;
	cublasHandle_t blas;
} dc_t;

// dc_res is a call's outcome: the status (0 success) and, on failure, the
// entry point that returned it.
typedef struct {
	int code;
	const char *call;
} dc_res;

static dc_res dc_ok(void) { dc_res r = {0, 0}; return r; }
static dc_res dc_fail(int code, const char *call) { dc_res r = {code, call}; return r; }

#define DC_CALL(expr, name) do { int _c = (int)(expr); if (_c != 0) return dc_fail(_c, name); } while (0)
#define DC_CTX(d) DC_CALL((d)->cuCtxSetCurrent((d)->ctx), "cuCtxSetCurrent")

static dc_t *dc_new(void) { return (dc_t *)calloc(1, sizeof(dc_t)); }

// dc_open_driver dlopens the driver at path and finds its entry points. It
// returns NULL on success, else dlerror's message or the name of the first
// missing entry point (missing set).
static const char *dc_open_driver(dc_t *d, const char *path, int *missing) {
	*missing = 0;
	d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!d->lib) {
		const char *e = dlerror();
		return e ? e : "dlopen failed";
	}
	*missing = 1;
#define SYM(field, name) if (!(*(void **)&d->field = dlsym(d->lib, name))) return name
	SYM(cuInit, "cuInit");
	SYM(cuDriverGetVersion, "cuDriverGetVersion");
	SYM(cuGetErrorName, "cuGetErrorName");
	SYM(cuDeviceGetCount, "cuDeviceGetCount");
	SYM(cuDeviceGet, "cuDeviceGet");
	SYM(cuDeviceGetName, "cuDeviceGetName");
	SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute");
	SYM(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(cuCtxSynchronize, "cuCtxSynchronize");
	SYM(cuMemGetInfo, "cuMemGetInfo_v2");
	SYM(cuMemAlloc, "cuMemAlloc_v2");
	SYM(cuMemFree, "cuMemFree_v2");
	SYM(cuMemHostAlloc, "cuMemHostAlloc");
	SYM(cuMemFreeHost, "cuMemFreeHost");
	SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	SYM(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	SYM(cuMemsetD8Async, "cuMemsetD8Async");
	SYM(cuMemsetD32Async, "cuMemsetD32Async");
	SYM(cuModuleLoadDataEx, "cuModuleLoadDataEx");
	SYM(cuModuleUnload, "cuModuleUnload");
	SYM(cuModuleGetFunction, "cuModuleGetFunction");
	SYM(cuFuncSetAttribute, "cuFuncSetAttribute");
	SYM(cuLaunchKernel, "cuLaunchKernel");
	SYM(cuStreamCreate, "cuStreamCreate");
	SYM(cuStreamDestroy, "cuStreamDestroy_v2");
	SYM(cuStreamSynchronize, "cuStreamSynchronize");
	SYM(cuEventCreate, "cuEventCreate");
	SYM(cuEventRecord, "cuEventRecord");
	SYM(cuEventSynchronize, "cuEventSynchronize");
	SYM(cuEventElapsedTime, "cuEventElapsedTime");
	SYM(cuEventDestroy, "cuEventDestroy_v2");
	SYM(cuStreamWaitEvent, "cuStreamWaitEvent");
#undef SYM
	*missing = 0;
	return NULL;
}

// dc_open_blas dlopens the cuBLAS at path, as dc_open_driver does.
static const char *dc_open_blas(dc_t *d, const char *path, int *missing) {
	*missing = 0;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		return e ? e : "dlopen failed";
	}
	*missing = 1;
#define SYM(field, name) if (!(*(void **)&d->field = dlsym(h, name))) return name
	SYM(cublasCreate, "cublasCreate_v2");
	SYM(cublasDestroy, "cublasDestroy_v2");
	SYM(cublasSetStream, "cublasSetStream_v2");
	SYM(cublasSetMathMode, "cublasSetMathMode");
	SYM(cublasGetVersion, "cublasGetVersion_v2");
	SYM(cublasGemmEx, "cublasGemmEx");
	SYM(cublasGemmStridedBatchedEx, "cublasGemmStridedBatchedEx");
#undef SYM
	*missing = 0;
	d->blaslib = h;
	return NULL;
}

static const char *dc_error_name(dc_t *d, int code) {
	const char *s = 0;
	if (d->cuGetErrorName && d->cuGetErrorName(code, &s) != 0) s = 0;
	return s;
}

static dc_res dc_init(dc_t *d, int *version) {
	*version = 0;
	d->cuDriverGetVersion(version);
	DC_CALL(d->cuInit(0), "cuInit");
	return dc_ok();
}

// dc_device fills in the facts Probe reports about GPU ordinal.
static dc_res dc_device(dc_t *d, int ordinal, int *count, char *name, int namelen, int *major, int *minor,
		int *sms, int *shared, size_t *mem) {
	DC_CALL(d->cuDeviceGetCount(count), "cuDeviceGetCount");
	if (ordinal < 0 || ordinal >= *count) return dc_ok();
	DC_CALL(d->cuDeviceGet(&d->dev, ordinal), "cuDeviceGet");
	DC_CALL(d->cuDeviceGetName(name, namelen, d->dev), "cuDeviceGetName");
	DC_CALL(d->cuDeviceGetAttribute(major, 75, d->dev), "cuDeviceGetAttribute");
	DC_CALL(d->cuDeviceGetAttribute(minor, 76, d->dev), "cuDeviceGetAttribute");
	DC_CALL(d->cuDeviceGetAttribute(sms, 16, d->dev), "cuDeviceGetAttribute");
	DC_CALL(d->cuDeviceGetAttribute(shared, 97, d->dev), "cuDeviceGetAttribute");
	DC_CALL(d->cuDeviceTotalMem(mem, d->dev), "cuDeviceTotalMem_v2");
	return dc_ok();
}

// dc_start retains the device's primary context and, when full, creates the
// stream and the cuBLAS handle bound to it (Probe creates only the handle, to
// read cuBLAS's version and see that it runs).
static dc_res dc_start(dc_t *d, int full, int *blasVersion) {
	DC_CALL(d->cuDevicePrimaryCtxRetain(&d->ctx, d->dev), "cuDevicePrimaryCtxRetain");
	DC_CTX(d);
	if (full) DC_CALL(d->cuStreamCreate(&d->stream, 1), "cuStreamCreate"); // non-blocking
	DC_CALL(d->cublasCreate(&d->blas), "cublasCreate_v2");
	DC_CALL(d->cublasGetVersion(d->blas, blasVersion), "cublasGetVersion_v2");
	if (full) {
		DC_CALL(d->cublasSetStream(d->blas, d->stream), "cublasSetStream_v2");
		DC_CALL(d->cublasSetMathMode(d->blas, 0), "cublasSetMathMode"); // CUBLAS_DEFAULT_MATH: no TF32
	}
	return dc_ok();
}

// dc_stop undoes dc_start: synchronizes, destroys the handle and the stream
// and releases the primary context. It goes on after a failure and reports
// the first.
static dc_res dc_stop(dc_t *d) {
	dc_res r = dc_ok();
	if (!d->ctx) return r;
	int c = d->cuCtxSetCurrent(d->ctx);
	if (c && !r.code) r = dc_fail(c, "cuCtxSetCurrent");
	if (d->stream) {
		c = d->cuStreamSynchronize(d->stream);
		if (c && !r.code) r = dc_fail(c, "cuStreamSynchronize");
	}
	if (d->blas) {
		c = d->cublasDestroy(d->blas);
		if (c && !r.code) r = dc_fail(c, "cublasDestroy_v2");
		d->blas = 0;
	}
	if (d->stream) {
		c = d->cuStreamDestroy(d->stream);
		if (c && !r.code) r = dc_fail(c, "cuStreamDestroy_v2");
		d->stream = 0;
	}
	c = d->cuDevicePrimaryCtxRelease(d->dev);
	if (c && !r.code) r = dc_fail(c, "cuDevicePrimaryCtxRelease_v2");
	d->ctx = 0;
	return r;
}

static dc_res dc_mem_info(dc_t *d, size_t *free, size_t *total) {
	DC_CTX(d);
	DC_CALL(d->cuMemGetInfo(free, total), "cuMemGetInfo_v2");
	return dc_ok();
}

static dc_res dc_alloc(dc_t *d, size_t bytes, CUdeviceptr *p) {
	DC_CTX(d);
	DC_CALL(d->cuMemAlloc(p, bytes), "cuMemAlloc_v2");
	return dc_ok();
}

static dc_res dc_free(dc_t *d, CUdeviceptr p) {
	DC_CTX(d);
	DC_CALL(d->cuMemFree(p), "cuMemFree_v2");
	return dc_ok();
}

static dc_res dc_host_alloc(dc_t *d, size_t bytes, void **p) {
	DC_CTX(d);
	DC_CALL(d->cuMemHostAlloc(p, bytes, 0), "cuMemHostAlloc");
	return dc_ok();
}

static dc_res dc_host_free(dc_t *d, void *p) {
	DC_CTX(d);
	DC_CALL(d->cuMemFreeHost(p), "cuMemFreeHost");
	return dc_ok();
}

// The copies run on the stream and wait for it, so that they follow the
// kernels before them and the host memory is free to reuse on return.
static dc_res dc_htod(dc_t *d, CUdeviceptr dst, const void *src, size_t bytes) {
	DC_CTX(d);
	DC_CALL(d->cuMemcpyHtoDAsync(dst, src, bytes, d->stream), "cuMemcpyHtoDAsync_v2");
	DC_CALL(d->cuStreamSynchronize(d->stream), "cuStreamSynchronize");
	return dc_ok();
}

static dc_res dc_dtoh(dc_t *d, void *dst, CUdeviceptr src, size_t bytes) {
	DC_CTX(d);
	DC_CALL(d->cuMemcpyDtoHAsync(dst, src, bytes, d->stream), "cuMemcpyDtoHAsync_v2");
	DC_CALL(d->cuStreamSynchronize(d->stream), "cuStreamSynchronize");
	return dc_ok();
}

static dc_res dc_dtod(dc_t *d, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
	DC_CTX(d);
	DC_CALL(d->cuMemcpyDtoDAsync(dst, src, bytes, d->stream), "cuMemcpyDtoDAsync_v2");
	return dc_ok();
}

static dc_res dc_memset(dc_t *d, CUdeviceptr dst, unsigned value, size_t bytes) {
	DC_CTX(d);
	if (bytes % 4 == 0 && dst % 4 == 0)
		DC_CALL(d->cuMemsetD32Async(dst, value, bytes / 4, d->stream), "cuMemsetD32Async");
	else
		DC_CALL(d->cuMemsetD8Async(dst, (unsigned char)value, bytes, d->stream), "cuMemsetD8Async");
	return dc_ok();
}

static dc_res dc_sync(dc_t *d) {
	DC_CTX(d);
	DC_CALL(d->cuStreamSynchronize(d->stream), "cuStreamSynchronize");
	return dc_ok();
}

// dc_event_create makes an event for timing (CU_EVENT_DEFAULT).
static dc_res dc_event_create(dc_t *d, uintptr_t *e) {
	DC_CTX(d);
	CUevent ev = 0;
	DC_CALL(d->cuEventCreate(&ev, 0), "cuEventCreate");
	*e = (uintptr_t)ev;
	return dc_ok();
}

// dc_event_record records the event on the device's stream.
static dc_res dc_event_record(dc_t *d, uintptr_t e) {
	DC_CTX(d);
	DC_CALL(d->cuEventRecord((CUevent)e, d->stream), "cuEventRecord");
	return dc_ok();
}

// dc_event_elapsed waits for the event stop and gives the milliseconds
// between start and stop.
static dc_res dc_event_elapsed(dc_t *d, uintptr_t start, uintptr_t stop, float *ms) {
	DC_CTX(d);
	DC_CALL(d->cuEventSynchronize((CUevent)stop), "cuEventSynchronize");
	DC_CALL(d->cuEventElapsedTime(ms, (CUevent)start, (CUevent)stop), "cuEventElapsedTime");
	return dc_ok();
}

static dc_res dc_event_destroy(dc_t *d, uintptr_t e) {
	DC_CTX(d);
	DC_CALL(d->cuEventDestroy((CUevent)e), "cuEventDestroy_v2");
	return dc_ok();
}

// dc_load_module JIT-compiles the NUL-terminated PTX text, keeping the JIT's
// error log in log.
static dc_res dc_load_module(dc_t *d, const char *ptx, uintptr_t *mod, char *log, unsigned logsize) {
	DC_CTX(d);
	int opts[2] = {5, 6}; // CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	void *vals[2] = {log, (void *)(uintptr_t)logsize};
	CUmodule m = 0;
	DC_CALL(d->cuModuleLoadDataEx(&m, ptx, 2, opts, vals), "cuModuleLoadDataEx");
	*mod = (uintptr_t)m;
	return dc_ok();
}

static dc_res dc_unload_module(dc_t *d, uintptr_t mod) {
	DC_CTX(d);
	DC_CALL(d->cuModuleUnload((CUmodule)mod), "cuModuleUnload");
	return dc_ok();
}

static dc_res dc_function(dc_t *d, uintptr_t mod, const char *name, uintptr_t *fn) {
	DC_CTX(d);
	CUfunction f = 0;
	DC_CALL(d->cuModuleGetFunction(&f, (CUmodule)mod, name), "cuModuleGetFunction");
	*fn = (uintptr_t)f;
	return dc_ok();
}

static dc_res dc_func_attr(dc_t *d, uintptr_t fn, int attr, int value) {
	DC_CTX(d);
	DC_CALL(d->cuFuncSetAttribute((CUfunction)fn, attr, value), "cuFuncSetAttribute");
	return dc_ok();
}

static dc_res dc_launch(dc_t *d, uintptr_t fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		unsigned bz, unsigned shared, void **params) {
	DC_CTX(d);
	DC_CALL(d->cuLaunchKernel((CUfunction)fn, gx, gy, gz, bx, by, bz, shared, d->stream, params, 0), "cuLaunchKernel");
	return dc_ok();
}

// dc_gemm is cublasGemmEx with C in float32, compute in float32 (column-major,
// as cuBLAS counts).
static dc_res dc_gemm(dc_t *d, int ta, int tb, int m, int n, int k, float alpha, CUdeviceptr a, int atype, int lda,
		CUdeviceptr b, int btype, int ldb, float beta, CUdeviceptr c, int ldc) {
	DC_CTX(d);
	DC_CALL(d->cublasGemmEx(d->blas, ta, tb, m, n, k, &alpha, (const void *)a, atype, lda, (const void *)b, btype, ldb,
		&beta, (void *)c, 0, ldc, 68, -1), "cublasGemmEx");
	return dc_ok();
}

// dc_gemm_compute is dc_gemm with the compute type given: 68
// (CUBLAS_COMPUTE_32F) or 75 (CUBLAS_COMPUTE_32F_FAST_16BF, float32 A and B
// multiplied on bf16 tensor cores, accumulated in float32).
static dc_res dc_gemm_compute(dc_t *d, int ta, int tb, int m, int n, int k, float alpha, CUdeviceptr a, int atype,
		int lda, CUdeviceptr b, int btype, int ldb, float beta, CUdeviceptr c, int ldc, int compute) {
	DC_CTX(d);
	DC_CALL(d->cublasGemmEx(d->blas, ta, tb, m, n, k, &alpha, (const void *)a, atype, lda, (const void *)b, btype, ldb,
		&beta, (void *)c, 0, ldc, compute, -1), "cublasGemmEx");
	return dc_ok();
}

// dc_gemm_batched is cublasGemmStridedBatchedEx with dc_gemm's types.
static dc_res dc_gemm_batched(dc_t *d, int ta, int tb, int m, int n, int k, float alpha, CUdeviceptr a, int atype,
		int lda, long long sa, CUdeviceptr b, int btype, int ldb, long long sb, float beta, CUdeviceptr c, int ldc,
		long long sc, int batch) {
	DC_CTX(d);
	DC_CALL(d->cublasGemmStridedBatchedEx(d->blas, ta, tb, m, n, k, &alpha, (const void *)a, atype, lda, sa,
		(const void *)b, btype, ldb, sb, &beta, (void *)c, 0, ldc, sc, batch, 68, -1), "cublasGemmStridedBatchedEx");
	return dc_ok();
}

// ---- A second stream and the events that order it (streams.go). A stream
// or event handle of 0 in these calls means the device's own stream.

static CUstream dc_stream_of(dc_t *d, uintptr_t s) { return s ? (CUstream)s : d->stream; }

// dc_stream_new creates a non-blocking stream.
static dc_res dc_stream_new(dc_t *d, uintptr_t *s) {
	DC_CTX(d);
	CUstream st = 0;
	DC_CALL(d->cuStreamCreate(&st, 1), "cuStreamCreate");
	*s = (uintptr_t)st;
	return dc_ok();
}

// dc_stream_free waits for the stream's work and destroys it.
static dc_res dc_stream_free(dc_t *d, uintptr_t s) {
	DC_CTX(d);
	DC_CALL(d->cuStreamSynchronize((CUstream)s), "cuStreamSynchronize");
	DC_CALL(d->cuStreamDestroy((CUstream)s), "cuStreamDestroy_v2");
	return dc_ok();
}

// dc_order_event creates an event for ordering only
// (CU_EVENT_DISABLE_TIMING: cheaper to record and wait on).
static dc_res dc_order_event(dc_t *d, uintptr_t *e) {
	DC_CTX(d);
	CUevent ev = 0;
	DC_CALL(d->cuEventCreate(&ev, 2), "cuEventCreate");
	*e = (uintptr_t)ev;
	return dc_ok();
}

static dc_res dc_record_on(dc_t *d, uintptr_t e, uintptr_t s) {
	DC_CTX(d);
	DC_CALL(d->cuEventRecord((CUevent)e, dc_stream_of(d, s)), "cuEventRecord");
	return dc_ok();
}

// dc_wait_event makes stream s's later work wait for event e.
static dc_res dc_wait_event(dc_t *d, uintptr_t s, uintptr_t e) {
	DC_CTX(d);
	DC_CALL(d->cuStreamWaitEvent(dc_stream_of(d, s), (CUevent)e, 0), "cuStreamWaitEvent");
	return dc_ok();
}

// dc_host_wait blocks the host until event e has completed.
static dc_res dc_host_wait(dc_t *d, uintptr_t e) {
	DC_CTX(d);
	DC_CALL(d->cuEventSynchronize((CUevent)e), "cuEventSynchronize");
	return dc_ok();
}

// dc_dtoh_on queues a copy to (pinned) host memory on stream s, without
// waiting for it.
static dc_res dc_dtoh_on(dc_t *d, void *dst, CUdeviceptr src, size_t bytes, uintptr_t s) {
	DC_CTX(d);
	DC_CALL(d->cuMemcpyDtoHAsync(dst, src, bytes, dc_stream_of(d, s)), "cuMemcpyDtoHAsync_v2");
	return dc_ok();
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// driver is one loaded CUDA driver and cuBLAS (the C table of entry points,
// context, stream and cuBLAS handle). Every method makes the context current
// and does its work in one C call, so that no goroutine needs to be locked
// to an OS thread.
type driver struct {
	c *C.dc_t
	// graphs is the capture and graph entry points (graph_driver.go), nil
	// where the driver lacks them; gr is the graph pass in progress
	// (graph.go), nil outside one.
	graphs *graphDriver
	gr     *graphRun
}

// cgoEnabled reports that this build can load CUDA.
const cgoEnabled = true

// callError turns a failed call's outcome into an error naming the entry
// point and the status ("cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY"), or nil.
func (d *driver) callError(r C.dc_res) error {
	if r.code == 0 {
		return nil
	}
	call := C.GoString(r.call)
	if strings.HasPrefix(call, "cublas") {
		return &driverError{call: call, code: int(r.code), name: cublasStatusName(int(r.code))}
	}
	return &driverError{call: call, code: int(r.code), name: d.errorName(int(r.code))}
}

// errorName returns the driver's name of a CUresult (cuGetErrorName).
func (d *driver) errorName(code int) string {
	if s := C.dc_error_name(d.c, C.int(code)); s != nil {
		return C.GoString(s)
	}
	return fmt.Sprintf("CUresult %d", code)
}

// loadDriver dlopens the driver at path (a soname or a file) and finds its
// entry points.
func loadDriver(path string) (*driver, error) {
	d := &driver{c: C.dc_new()}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var missing C.int
	if e := C.dc_open_driver(d.c, cs, &missing); e != nil {
		msg := C.GoString(e)
		C.free(unsafe.Pointer(d.c))
		if missing != 0 {
			return nil, fmt.Errorf("%s has no %s: the driver is too old", path, msg)
		}
		return nil, fmt.Errorf("%s", msg)
	}
	return d, nil
}

// loadBLAS dlopens the cuBLAS at path and finds its entry points; missing
// reports a library that loaded without them.
func (d *driver) loadBLAS(path string) (missing bool, err error) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var m C.int
	if e := C.dc_open_blas(d.c, cs, &m); e != nil {
		if m != 0 {
			return true, fmt.Errorf("%s has no %s", path, C.GoString(e))
		}
		return false, fmt.Errorf("%s", C.GoString(e))
	}
	return false, nil
}

// init runs cuInit, returning the driver's version (readable before it).
func (d *driver) init() (version int, err error) {
	var v C.int
	r := C.dc_init(d.c, &v)
	return int(v), d.callError(r)
}

// device reads the facts about GPU ordinal; count is the GPUs the driver
// sees (the rest is unset when ordinal is not among them).
func (d *driver) device(ordinal int) (count int, info Info, err error) {
	var name [256]C.char
	var cnt, major, minor, sms, shared C.int
	var mem C.size_t
	r := C.dc_device(d.c, C.int(ordinal), &cnt, &name[0], C.int(len(name)), &major, &minor, &sms, &shared, &mem)
	if err := d.callError(r); err != nil {
		return int(cnt), info, err
	}
	info = Info{Ordinal: ordinal, Name: C.GoString(&name[0]), Major: int(major), Minor: int(minor), SMs: int(sms), SharedOptin: int(shared), Memory: int64(mem)}
	return int(cnt), info, nil
}

// start retains the primary context and creates the cuBLAS handle (and, when
// full, the stream it is bound to).
func (d *driver) start(full bool) (blasVersion int, err error) {
	var v C.int
	f := C.int(0)
	if full {
		f = 1
	}
	r := C.dc_start(d.c, f, &v)
	return int(v), d.callError(r)
}

// stop synchronizes and releases what start made.
func (d *driver) stop() error { return d.callError(C.dc_stop(d.c)) }

// release frees the C table (the libraries stay loaded: unloading a library
// whose threads may still run is unsafe, and a process loads them once).
func (d *driver) release() {
	if d.graphs != nil {
		d.graphs.free()
		d.graphs = nil
	}
	C.free(unsafe.Pointer(d.c))
	d.c = nil
}

func (d *driver) memInfo() (free, total int64, err error) {
	var f, t C.size_t
	r := C.dc_mem_info(d.c, &f, &t)
	return int64(f), int64(t), d.callError(r)
}

func (d *driver) alloc(bytes int) (uint64, error) {
	d.gr.guard(callAlloc)
	var p C.CUdeviceptr
	r := C.dc_alloc(d.c, C.size_t(bytes), &p)
	return uint64(p), d.callError(r)
}

func (d *driver) free(p uint64) error {
	d.gr.guard(callAlloc)
	return d.callError(C.dc_free(d.c, C.CUdeviceptr(p)))
}

func (d *driver) hostAlloc(bytes int) (unsafe.Pointer, error) {
	d.gr.guard(callAlloc)
	var p unsafe.Pointer
	r := C.dc_host_alloc(d.c, C.size_t(bytes), &p)
	return p, d.callError(r)
}

func (d *driver) hostFree(p unsafe.Pointer) error {
	d.gr.guard(callAlloc)
	return d.callError(C.dc_host_free(d.c, p))
}

// cMalloc returns zeroed C memory (the launch argument buffers).
func (d *driver) cMalloc(bytes int) unsafe.Pointer { return C.calloc(1, C.size_t(bytes)) }

func (d *driver) cFree(p unsafe.Pointer) { C.free(p) }

func (d *driver) htod(dst uint64, src unsafe.Pointer, bytes int) error {
	d.gr.guard(callHtoD)
	return d.callError(C.dc_htod(d.c, C.CUdeviceptr(dst), src, C.size_t(bytes)))
}

func (d *driver) dtoh(dst unsafe.Pointer, src uint64, bytes int) error {
	d.gr.guard(callDtoH)
	return d.callError(C.dc_dtoh(d.c, dst, C.CUdeviceptr(src), C.size_t(bytes)))
}

func (d *driver) dtod(dst, src uint64, bytes int) error {
	if d.gr != nil && !d.gr.record(graphOp{kind: opDtoD, n: 3, args: [maxArgs]uint64{dst, src, uint64(bytes)}}) {
		return nil
	}
	return d.callError(C.dc_dtod(d.c, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(bytes)))
}

func (d *driver) memset(dst uint64, value uint32, bytes int) error {
	if d.gr != nil && !d.gr.record(graphOp{kind: opMemset, n: 3, args: [maxArgs]uint64{dst, uint64(value), uint64(bytes)}}) {
		return nil
	}
	return d.callError(C.dc_memset(d.c, C.CUdeviceptr(dst), C.unsigned(value), C.size_t(bytes)))
}

func (d *driver) sync() error {
	d.gr.guard(callSync)
	return d.callError(C.dc_sync(d.c))
}

// eventCreate makes a timing event.
func (d *driver) eventCreate() (uintptr, error) {
	var e C.uintptr_t
	err := d.callError(C.dc_event_create(d.c, &e))
	return uintptr(e), err
}

// eventRecord records e on the stream: it completes when the work enqueued
// before it has.
func (d *driver) eventRecord(e uintptr) error {
	return d.callError(C.dc_event_record(d.c, C.uintptr_t(e)))
}

// eventElapsed waits for stop and returns the milliseconds from start to
// stop.
func (d *driver) eventElapsed(start, stop uintptr) (float32, error) {
	var ms C.float
	err := d.callError(C.dc_event_elapsed(d.c, C.uintptr_t(start), C.uintptr_t(stop), &ms))
	return float32(ms), err
}

// eventDestroy frees e.
func (d *driver) eventDestroy(e uintptr) error {
	return d.callError(C.dc_event_destroy(d.c, C.uintptr_t(e)))
}

// loadModule JIT-compiles a PTX text; the error includes the JIT's log.
func (d *driver) loadModule(ptx string) (uintptr, error) {
	cs := C.CString(ptx)
	defer C.free(unsafe.Pointer(cs))
	const logSize = 8192
	log := (*C.char)(C.calloc(1, logSize))
	defer C.free(unsafe.Pointer(log))
	var mod C.uintptr_t
	r := C.dc_load_module(d.c, cs, &mod, log, logSize)
	if err := d.callError(r); err != nil {
		if l := strings.TrimSpace(C.GoString(log)); l != "" {
			return 0, fmt.Errorf("%w: %s", err, l)
		}
		return 0, err
	}
	return uintptr(mod), nil
}

func (d *driver) unloadModule(mod uintptr) error {
	return d.callError(C.dc_unload_module(d.c, C.uintptr_t(mod)))
}

func (d *driver) function(mod uintptr, name string) (uintptr, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var fn C.uintptr_t
	r := C.dc_function(d.c, C.uintptr_t(mod), cs, &fn)
	return uintptr(fn), d.callError(r)
}

func (d *driver) funcAttr(fn uintptr, attr, value int) error {
	return d.callError(C.dc_func_attr(d.c, C.uintptr_t(fn), C.int(attr), C.int(value)))
}

// launch runs cuLaunchKernel on the stream; params is the C array of
// pointers to the argument values.
func (d *driver) launch(fn uintptr, grid, block dim3, shared int, params unsafe.Pointer) error {
	return d.callError(C.dc_launch(d.c, C.uintptr_t(fn), C.unsigned(grid.x), C.unsigned(grid.y), C.unsigned(grid.z),
		C.unsigned(block.x), C.unsigned(block.y), C.unsigned(block.z), C.unsigned(shared), (*unsafe.Pointer)(params)))
}

// gemm runs cublasGemmEx: C (float32, column-major m×n, ldc) = alpha·op(A)·op(B)
// + beta·C with A and B of the given cuBLAS data types, computed in float32.
func (d *driver) gemm(ta, tb bool, m, n, k int, alpha float32, a uint64, atype, lda int, b uint64, btype, ldb int, beta float32, c uint64, ldc int) error {
	if d.gr != nil && !d.gr.record(gemmOp(ta, tb, m, n, k, alpha, a, atype, lda, 0, b, btype, ldb, 0, beta, c, ldc, 0, 0)) {
		return nil
	}
	return d.callError(C.dc_gemm(d.c, cbool(ta), cbool(tb), C.int(m), C.int(n), C.int(k), C.float(alpha),
		C.CUdeviceptr(a), C.int(atype), C.int(lda), C.CUdeviceptr(b), C.int(btype), C.int(ldb), C.float(beta),
		C.CUdeviceptr(c), C.int(ldc)))
}

// gemmCompute is gemm with the cuBLAS compute type given (computeType):
// gemm's own is computeF32.
func (d *driver) gemmCompute(ta, tb bool, m, n, k int, alpha float32, a uint64, atype, lda int, b uint64, btype, ldb int, beta float32, c uint64, ldc, computeType int) error {
	return d.callError(C.dc_gemm_compute(d.c, cbool(ta), cbool(tb), C.int(m), C.int(n), C.int(k), C.float(alpha),
		C.CUdeviceptr(a), C.int(atype), C.int(lda), C.CUdeviceptr(b), C.int(btype), C.int(ldb), C.float(beta),
		C.CUdeviceptr(c), C.int(ldc), C.int(computeType)))
}

// gemmBatched runs cublasGemmStridedBatchedEx with gemm's types; sa, sb and sc
// are the strides between the batch's matrices, in values.
func (d *driver) gemmBatched(ta, tb bool, m, n, k int, alpha float32, a uint64, atype, lda int, sa int64, b uint64, btype, ldb int, sb int64, beta float32, c uint64, ldc int, sc int64, batch int) error {
	if d.gr != nil && !d.gr.record(gemmOp(ta, tb, m, n, k, alpha, a, atype, lda, sa, b, btype, ldb, sb, beta, c, ldc, sc, batch)) {
		return nil
	}
	return d.callError(C.dc_gemm_batched(d.c, cbool(ta), cbool(tb), C.int(m), C.int(n), C.int(k), C.float(alpha),
		C.CUdeviceptr(a), C.int(atype), C.int(lda), C.longlong(sa), C.CUdeviceptr(b), C.int(btype), C.int(ldb), C.longlong(sb),
		C.float(beta), C.CUdeviceptr(c), C.int(ldc), C.longlong(sc), C.int(batch)))
}

// cbool is a cuBLAS transpose flag: CUBLAS_OP_T (1) when t, else CUBLAS_OP_N (0).
func cbool(t bool) C.int {
	if t {
		return 1
	}
	return 0
}

// A second stream and the events that order it (streams.go); stream 0 is
// the device's own.

func (d *driver) streamNew() (uintptr, error) {
	var s C.uintptr_t
	err := d.callError(C.dc_stream_new(d.c, &s))
	return uintptr(s), err
}

func (d *driver) streamFree(s uintptr) error {
	return d.callError(C.dc_stream_free(d.c, C.uintptr_t(s)))
}

func (d *driver) orderEvent() (uintptr, error) {
	var e C.uintptr_t
	err := d.callError(C.dc_order_event(d.c, &e))
	return uintptr(e), err
}

func (d *driver) recordOn(e, s uintptr) error {
	return d.callError(C.dc_record_on(d.c, C.uintptr_t(e), C.uintptr_t(s)))
}

func (d *driver) waitEvent(s, e uintptr) error {
	return d.callError(C.dc_wait_event(d.c, C.uintptr_t(s), C.uintptr_t(e)))
}

func (d *driver) hostWait(e uintptr) error { return d.callError(C.dc_host_wait(d.c, C.uintptr_t(e))) }

func (d *driver) dtohOn(dst unsafe.Pointer, src uint64, bytes int, s uintptr) error {
	return d.callError(C.dc_dtoh_on(d.c, dst, C.CUdeviceptr(src), C.size_t(bytes), C.uintptr_t(s)))
}
