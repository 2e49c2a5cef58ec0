//go:build cgo

package cuda

/*
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// dg_t is the driver's stream-capture and graph entry points and cuBLAS's
// cublasSetWorkspace, found with dlsym in the libraries driver.go loaded.
// They are looked up apart from driver.go's table: a driver without them
// (older than CUDA 11.4) still runs drafter, on the plain path.
typedef struct {
	int (*cuCtxSetCurrent)(void *);
	int (*cuStreamBeginCapture)(void *, int);
	int (*cuStreamEndCapture)(void *, void **);
	int (*cuGraphInstantiateWithFlags)(void **, void *, unsigned long long);
	int (*cuGraphLaunch)(void *, void *);
	int (*cuGraphExecDestroy)(void *);
	int (*cuGraphDestroy)(void *);
	int (*cublasSetWorkspace)(void *, void *, size_t);
} dg_t;

typedef struct {
	int code;
	const char *call;
} dg_res;

static dg_res dg_r(int code, const char *call) { dg_res r = {code, call}; return r; }

#define DG_CALL(expr, name) do { int _c = (int)(expr); if (_c != 0) return dg_r(_c, name); } while (0)

// dg_open finds the entry points; it returns NULL, or the first one missing.
static const char *dg_open(dg_t *g, void *lib, void *blaslib) {
#define SYM(h, field, name) if (!(*(void **)&g->field = dlsym(h, name))) return name
	SYM(lib, cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(lib, cuStreamBeginCapture, "cuStreamBeginCapture_v2");
	SYM(lib, cuStreamEndCapture, "cuStreamEndCapture");
	SYM(lib, cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
	SYM(lib, cuGraphLaunch, "cuGraphLaunch");
	SYM(lib, cuGraphExecDestroy, "cuGraphExecDestroy");
	SYM(lib, cuGraphDestroy, "cuGraphDestroy");
	SYM(blaslib, cublasSetWorkspace, "cublasSetWorkspace_v2");
#undef SYM
	return NULL;
}

// dg_begin starts capturing the stream in CU_STREAM_CAPTURE_MODE_GLOBAL: any
// call that is unsafe during a capture (an allocation, a synchronize)
// fails, as drafter wants to know.
static dg_res dg_begin(dg_t *g, void *ctx, void *stream) {
	DG_CALL(g->cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	DG_CALL(g->cuStreamBeginCapture(stream, 0), "cuStreamBeginCapture_v2");
	return dg_r(0, 0);
}

static dg_res dg_end(dg_t *g, void *ctx, void *stream, uintptr_t *graph) {
	void *gr = 0;
	DG_CALL(g->cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	int c = g->cuStreamEndCapture(stream, &gr);
	*graph = (uintptr_t)gr;
	return c ? dg_r(c, "cuStreamEndCapture") : dg_r(0, 0);
}

static dg_res dg_instantiate(dg_t *g, void *ctx, uintptr_t graph, uintptr_t *exec) {
	void *e = 0;
	DG_CALL(g->cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	DG_CALL(g->cuGraphInstantiateWithFlags(&e, (void *)graph, 0), "cuGraphInstantiateWithFlags");
	*exec = (uintptr_t)e;
	return dg_r(0, 0);
}

static dg_res dg_launch(dg_t *g, void *ctx, uintptr_t exec, void *stream) {
	DG_CALL(g->cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	DG_CALL(g->cuGraphLaunch((void *)exec, stream), "cuGraphLaunch");
	return dg_r(0, 0);
}

static dg_res dg_destroy(dg_t *g, void *ctx, uintptr_t exec, uintptr_t graph) {
	DG_CALL(g->cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	if (exec) DG_CALL(g->cuGraphExecDestroy((void *)exec), "cuGraphExecDestroy");
	if (graph) DG_CALL(g->cuGraphDestroy((void *)graph), "cuGraphDestroy");
	return dg_r(0, 0);
}

static dg_res dg_workspace(dg_t *g, void *blas, uint64_t p, size_t bytes) {
	DG_CALL(g->cublasSetWorkspace(blas, (void *)(uintptr_t)p, bytes), "cublasSetWorkspace_v2");
	return dg_r(0, 0);
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// graphDriver is the loaded driver's capture and graph entry points, a
// table in C memory (free releases it).
type graphDriver struct {
	c *C.dg_t
}

func (g *graphDriver) free() { C.free(unsafe.Pointer(g.c)) }

// loadGraphs finds the capture and graph entry points of the driver and
// cuBLAS d loaded; the error names the first one missing.
func (d *driver) loadGraphs() error {
	g := (*C.dg_t)(C.calloc(1, C.size_t(unsafe.Sizeof(C.dg_t{}))))
	if e := C.dg_open(g, unsafe.Pointer(d.c.lib), unsafe.Pointer(d.c.blaslib)); e != nil {
		C.free(unsafe.Pointer(g))
		return fmt.Errorf("the driver or cuBLAS has no %s", C.GoString(e))
	}
	d.graphs = &graphDriver{c: g}
	return nil
}

// graphError turns a failed call into a driverError, or nil.
func (d *driver) graphError(r C.dg_res) error {
	if r.code == 0 {
		return nil
	}
	call := C.GoString(r.call)
	if strings.HasPrefix(call, "cublas") {
		return &driverError{call: call, code: int(r.code), name: cublasStatusName(int(r.code))}
	}
	return &driverError{call: call, code: int(r.code), name: d.errorName(int(r.code))}
}

func (d *driver) ctxPtr() unsafe.Pointer    { return unsafe.Pointer(d.c.ctx) }
func (d *driver) streamPtr() unsafe.Pointer { return unsafe.Pointer(d.c.stream) }

// beginCapture starts capturing the device's stream (global mode).
func (d *driver) beginCapture() error {
	return d.graphError(C.dg_begin(d.graphs.c, d.ctxPtr(), d.streamPtr()))
}

// endCapture ends the capture and returns its graph (0 with the error of an
// invalidated capture).
func (d *driver) endCapture() (uintptr, error) {
	var g C.uintptr_t
	err := d.graphError(C.dg_end(d.graphs.c, d.ctxPtr(), d.streamPtr(), &g))
	return uintptr(g), err
}

// instantiate makes an executable graph of graph.
func (d *driver) instantiate(graph uintptr) (uintptr, error) {
	var e C.uintptr_t
	err := d.graphError(C.dg_instantiate(d.graphs.c, d.ctxPtr(), C.uintptr_t(graph), &e))
	return uintptr(e), err
}

// graphLaunch enqueues the executable graph on the device's stream.
func (d *driver) graphLaunch(exec uintptr) error {
	return d.graphError(C.dg_launch(d.graphs.c, d.ctxPtr(), C.uintptr_t(exec), d.streamPtr()))
}

// graphDestroy frees an executable graph and its graph (either may be 0).
func (d *driver) graphDestroy(exec, graph uintptr) error {
	return d.graphError(C.dg_destroy(d.graphs.c, d.ctxPtr(), C.uintptr_t(exec), C.uintptr_t(graph)))
}

// setWorkspace gives the cuBLAS handle its workspace: cuBLAS must not
// allocate one itself inside a capture.
func (d *driver) setWorkspace(p uint64, bytes int) error {
	return d.graphError(C.dg_workspace(d.graphs.c, unsafe.Pointer(d.c.blas), C.uint64_t(p), C.size_t(bytes)))
}
