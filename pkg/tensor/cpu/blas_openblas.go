//go:build cgo

package cpu

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
	"errors"
	"sync"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// OpenBLAS is found at run time with dlopen, so one binary uses it where it is
// installed and falls back to pure Go where it is not. It is loaded once, on
// first use: OpenBLAS picks its kernels as it loads, from OPENBLAS_CORETYPE
// when set (see OpenBLASCoreType; the command sets it before loading).
var loadOpenBLAS = sync.OnceValue(func() *openblas {
	for _, name := range []string{"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0"} {
		cs := C.CString(name)
		ok := C.drafter_load_openblas(cs, 1)
		C.free(unsafe.Pointer(cs))
		if ok != 0 {
			return &openblas{splits: make(chan *split, 64)}
		}
	}
	return nil
})

// OpenBLAS returns the OpenBLAS backend, or an error when the shared library
// (libopenblas.so.0) cannot be loaded.
func OpenBLAS() (Backend, error) {
	if o := loadOpenBLAS(); o != nil {
		return o, nil
	}
	return nil, errors.New("tensor: OpenBLAS not found (no libopenblas.so.0 with cblas_sgemm and cblas_sgemv; Debian/Ubuntu: apt install libopenblas0)")
}

// openblas runs each OpenBLAS call on the calling thread (OpenBLAS is set to
// one thread) and spreads large products over the shared workers (tensor.Parallel) itself.
// OpenBLAS's own helper threads spin between calls and, called from two
// goroutines at once, queue behind each other: on 2 cores a model's decode
// step measured 6-8x the CPU time of this arrangement.
type openblas struct {
	// splits keeps split records for reuse (a channel, not a sync.Pool, which
	// drops items at random under the race detector).
	splits chan *split
}

func (*openblas) Name() string { return "openblas" }

// Threads reports that one call runs on one thread, so that Products splits
// large products, and callers their independent calls (ParallelCalls),
// across the workers.
func (*openblas) Threads() int { return 1 }

// splitMin is the product size (multiply-adds) from which a call is split over
// the workers, in blocks of splitBlock output columns (Sgemm) or rows (Sgemv).
const (
	splitMin   = 1 << 20
	splitBlock = 64
)

// split is one split call; it is pooled, with its chunk method stored once,
// so that splitting allocates nothing.
type split struct {
	gemv           bool
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        *C.float
	lda, ldb, ldc  int
	fn             func(c, lo, hi int)
}

func (o *openblas) getSplit() *split {
	select {
	case s := <-o.splits:
		return s
	default:
		s := &split{}
		s.fn = s.chunk
		return s
	}
}

func (s *split) chunk(_, lo, hi int) {
	lo, hi = lo*splitBlock, min(hi*splitBlock, s.n)
	if s.gemv { // rows lo..hi of A and y
		C.drafter_sgemv(0, C.int(hi-lo), C.int(s.k), C.float(s.alpha), (*C.float)(unsafe.Add(unsafe.Pointer(s.a), 4*lo*s.lda)), C.int(s.lda),
			s.b, C.float(s.beta), (*C.float)(unsafe.Add(unsafe.Pointer(s.c), 4*lo)))
		return
	}
	off := lo // B's columns lo..hi: a column offset, or a row offset when transposed
	if s.transB {
		off = lo * s.ldb
	}
	C.drafter_sgemm(cbool(s.transA), cbool(s.transB), C.int(s.m), C.int(hi-lo), C.int(s.k), C.float(s.alpha),
		s.a, C.int(s.lda), (*C.float)(unsafe.Add(unsafe.Pointer(s.b), 4*off)), C.int(s.ldb),
		C.float(s.beta), (*C.float)(unsafe.Add(unsafe.Pointer(s.c), 4*lo)), C.int(s.ldc))
}

func (o *openblas) runSplit(s *split) {
	tensor.ParallelChunks((s.n+splitBlock-1)/splitBlock, tensor.Workers(), s.fn)
	*s = split{fn: s.fn}
	select {
	case o.splits <- s:
	default:
	}
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func (o *openblas) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
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
	if tensor.Workers() > 1 && m*n*k >= splitMin && n >= 2*splitBlock {
		s := o.getSplit()
		s.transA, s.transB, s.m, s.n, s.k, s.alpha, s.beta = transA, transB, m, n, k, alpha, beta
		s.a, s.b, s.c = (*C.float)(unsafe.Pointer(pa)), (*C.float)(unsafe.Pointer(pb)), (*C.float)(unsafe.Pointer(&c[0]))
		s.lda, s.ldb, s.ldc = lda, ldb, ldc
		o.runSplit(s)
		return
	}
	C.drafter_sgemm(cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(pa)), C.int(lda), (*C.float)(unsafe.Pointer(pb)), C.int(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

func (o *openblas) Sgemv(t bool, m, n int, alpha float32, a []float32, lda int, x []float32, beta float32, y []float32) {
	if m == 0 || n == 0 {
		return
	}
	checkGemv(t, m, n, len(a), lda, len(x), len(y))
	if !t && tensor.Workers() > 1 && m*n >= splitMin/4 && m >= 2*splitBlock {
		s := o.getSplit()
		s.gemv, s.n, s.k, s.alpha, s.beta = true, m, n, alpha, beta
		s.a, s.b, s.c = (*C.float)(unsafe.Pointer(&a[0])), (*C.float)(unsafe.Pointer(&x[0])), (*C.float)(unsafe.Pointer(&y[0]))
		s.lda = lda
		o.runSplit(s)
		return
	}
	C.drafter_sgemv(cbool(t), C.int(m), C.int(n), C.float(alpha), (*C.float)(unsafe.Pointer(&a[0])), C.int(lda),
		(*C.float)(unsafe.Pointer(&x[0])), C.float(beta), (*C.float)(unsafe.Pointer(&y[0])))
}
