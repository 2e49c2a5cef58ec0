//go:build cgo

package tensor

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// The CBLAS enums, spelled out so that no cblas.h is needed at build time.
enum { RowMajor = 101, NoTrans = 111, Trans = 112 };

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
typedef void (*setthreads_fn)(int);

static sgemm_fn p_sgemm;
static sgemv_fn p_sgemv;

static int drafter_load_openblas(const char *path, int threads) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return 0;
	p_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
	p_sgemv = (sgemv_fn)dlsym(h, "cblas_sgemv");
	if (!p_sgemm || !p_sgemv) return 0;
	setthreads_fn st = (setthreads_fn)dlsym(h, "openblas_set_num_threads");
	if (st && threads > 0) st(threads);
	return 1;
}

static void drafter_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
	p_sgemm(RowMajor, ta ? Trans : NoTrans, tb ? Trans : NoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void drafter_sgemv(int t, int m, int n, float alpha, const float *a, int lda, const float *x, float beta, float *y) {
	p_sgemv(RowMajor, t ? Trans : NoTrans, m, n, alpha, a, lda, x, 1, beta, y, 1);
}
*/
import "C"

import (
	"os"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// OpenBLAS is found at run time with dlopen, so one binary uses it where it is
// installed and falls back to pure Go where it is not. It is loaded lazily, after
// OPENBLAS_CORETYPE is set: on virtual machines that mask the CPU model OpenBLAS
// otherwise picks its generic "Prescott" kernels, 6x slower than SkylakeX ones.
var loadOpenBLAS = sync.OnceValue(func() bool {
	if os.Getenv("DRAFTER_BLAS") == "go" {
		return false
	}
	if os.Getenv("OPENBLAS_CORETYPE") == "" {
		switch {
		case cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512CD:
			os.Setenv("OPENBLAS_CORETYPE", "SkylakeX")
		case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
			os.Setenv("OPENBLAS_CORETYPE", "Haswell")
		}
	}
	for _, name := range []string{"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0"} {
		cs := C.CString(name)
		ok := C.drafter_load_openblas(cs, C.int(runtime.GOMAXPROCS(0)))
		C.free(unsafe.Pointer(cs))
		if ok != 0 {
			return true
		}
	}
	return false
})

// CPU returns the CPU backend: OpenBLAS when the shared library is installed
// (and DRAFTER_BLAS is not "go"), otherwise pure Go.
func CPU() Backend {
	if loadOpenBLAS() {
		return openblas{}
	}
	return goBLAS{}
}

type openblas struct{}

func (openblas) Name() string { return "openblas" }

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func (openblas) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	checkGemm(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	var pa, pb *float32
	if len(a) > 0 {
		pa = &a[0]
	}
	if len(b) > 0 {
		pb = &b[0]
	}
	C.drafter_sgemm(cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(pa)), C.int(lda), (*C.float)(unsafe.Pointer(pb)), C.int(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

func (openblas) Sgemv(t bool, m, n int, alpha float32, a []float32, lda int, x []float32, beta float32, y []float32) {
	if m == 0 || n == 0 {
		return
	}
	checkGemv(t, m, n, len(a), lda, len(x), len(y))
	C.drafter_sgemv(cbool(t), C.int(m), C.int(n), C.float(alpha), (*C.float)(unsafe.Pointer(&a[0])), C.int(lda),
		(*C.float)(unsafe.Pointer(&x[0])), C.float(beta), (*C.float)(unsafe.Pointer(&y[0])))
}
