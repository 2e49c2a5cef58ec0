package cpu

// Backend performs the dense linear algebra the models need. Implementations must
// be safe for use by one goroutine at a time per call; they may use several
// threads internally.
type Backend interface {
	// Name says which implementation runs, for example "openblas" or "go".
	Name() string
	// Sgemm computes C = alpha*op(A)*op(B) + beta*C where op(X) is X or its
	// transpose. op(A) is m x k, op(B) is k x n and C is m x n; lda, ldb and ldc
	// are the row strides of A, B and C as stored.
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	// Sgemv computes y = alpha*op(A)*x + beta*y for an m x n matrix A with row
	// stride lda; op(A) is A (y has m entries) or its transpose (y has n entries).
	Sgemv(trans bool, m, n int, alpha float32, a []float32, lda int, x []float32, beta float32, y []float32)
}

// CPU returns the CPU backend: OpenBLAS when the shared library is installed
// (and the build has cgo), otherwise pure Go. It reads no environment: the
// command chooses a backend (cmd/drafter's DRAFTER_BLAS) and passes it down.
func DefaultBackend() Backend {
	if o, err := OpenBLAS(); err == nil {
		return o
	}
	return PureGo()
}

// PureGo returns the pure-Go backend: drafter's own kernels, in Go assembly
// on amd64 (gonum's BLAS on other processors or with -tags purego).
func PureGo() Backend { return goBLAS{} }

// threaded is implemented by backends that say how many threads one call
// uses (openblas: 1, set when it loads). A backend without it may thread
// each call itself, and is called from one goroutine at a time.
type threaded interface{ Threads() int }

// threading says how Products threads its products on be: parallel when be's
// calls may run side by side on the workers (tensor.Parallel), one thread each (a
// threaded backend with one thread, or the pure-Go backend, whose calls are
// safe to nest in the workers); selfSplit when be splits its large products
// over the workers itself (the pure-Go backend), so that a caller hands them
// over whole.
func threading(be Backend) (parallel, selfSplit bool) {
	switch b := be.(type) {
	case goBLAS:
		return true, true
	case threaded:
		return b.Threads() == 1, false
	}
	return false, false
}
