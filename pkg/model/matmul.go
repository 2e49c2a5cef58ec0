package model

import "github.com/drafter-ai/drafter/pkg/tensor"

// Products of at most smallRows rows (decode steps, drafts and their
// verification) run through tensor.DotRows on every backend: it beats a BLAS
// call at these sizes, and computes each row the same way whatever the
// number of rows, so that verifying a draft scores each row exactly as a
// one-token decode step would. Larger products go to the backend.
//
// Weights a checkpoint stores as bf16 or f16 stay so (tensor.Matrix): their
// few-row products run tensor.DotRowsBF16/F16, split over the workers as
// below and just as row-independent, and larger ones SgemmBF16/F16, which
// widen the weights as they pack them and split themselves. They read half
// the bytes of a float32 product, which a decode step over weights larger
// than the caches waits on.
//
// The model's matrix multiplies are split over the output features across
// tensor's shared workers: each worker multiplies the input by its own block of
// weight rows, with a single backend call. Every output element is one inner
// product over the same inputs whichever block computes it, so the split does
// not change what is computed. It gives a single-row (decode) product, which a
// single-threaded BLAS or the pure-Go backend runs on one core, the memory
// bandwidth of both, and keeps the threading in one place (Go's scheduler)
// instead of two.
//
// A backend that threads each call itself (OpenBLAS with several threads) must
// not be called from two goroutines at once: its calls then queue behind each
// other's helper threads, which spin meanwhile (a decode step measured 6-8x the
// CPU time of a single-threaded BLAS split here). The model splits only on a
// backend known to run a call on one thread: any backend with a Threads
// method (see threaded) that reports 1. The pure-Go backend splits its own
// large products over the same workers (its packed kernels lose half their
// efficiency on 64-feature pieces), so the model hands it whole products and
// splits only attention heads and the small products below on it.

// threaded is implemented by backends that say how many threads one call
// uses; the model splits its products across goroutines when it is 1.
type threaded interface{ Threads() int }

// splits reports whether the model should split products over the workers on be.
func splits(be tensor.Backend) bool {
	if t, ok := be.(threaded); ok {
		return t.Threads() == 1
	}
	return be.Name() == "go"
}

// mmBlock is the number of output features in a unit of the split; blocks stay
// aligned to the BLAS kernels' register tiles.
const mmBlock = 64

// mmMinWork is the number of multiply-adds below which a product runs on the
// calling goroutine (a hand-off costs a few microseconds).
const mmMinWork = 1 << 17

// smallRows is the most rows a product sends to tensor.DotRows: beyond
// tensor.SmallRows, since the model's products (a few hundred features) stay
// cheaper there than in a BLAS call up to a few dozen rows (BenchmarkSmall:
// 33 rows faster, 64 rows slower), and a draft tree's verification then
// scores each node exactly as a decode step would.
const smallRows = 48

// smallMinWork is mmMinWork for products that go through tensor.DotRows.
const smallMinWork = 1 << 19

// splitWeights is the weight-matrix size (floats, 1 MiB) from which a
// product through tensor.DotRows is memory-bound for a few rows and is split
// over the workers in several chunks each.
const splitWeights = 1 << 18

// mmJob is the product being split, read by matmulChunk.
type mmJob struct {
	out, x  []float32
	w       tensor.Matrix
	wt      *tensor.Transposed
	rows, n int
	k       int
	beta    float32
}

// matmul computes out[rows, n] = x[rows, k]·w[n, k]^T, or adds it to out when
// acc is true, with w in its own dtype. wt is w transposed, or nil: products
// of at most smallRows rows use it when it is there.
func (m *Model) matmul(out, x []float32, w tensor.Matrix, wt *tensor.Transposed, rows int, acc bool) {
	n, k := w.Rows, w.Cols
	if rows == 0 || n == 0 {
		return
	}
	var beta float32
	if acc {
		beta = 1
	}
	if wt != nil && rows <= smallRows {
		m.matmulT(out, x, wt, rows, n, k, acc)
		return
	}
	if w.DType != tensor.F32 && rows > smallRows {
		// The 16-bit GEMM widens the weights as it packs them and splits
		// itself over the workers.
		w.MulT(m.be, out, n, x, k, rows, beta)
		return
	}
	units := (n + mmBlock - 1) / mmBlock
	chunks := tensor.Workers()
	small := rows <= smallRows
	if small {
		// tensor.DotRows runs in Go on the calling goroutine: always safe
		// to split, and a row's result does not depend on the split. A
		// short pass (a decode step, a draft's verification) splits only
		// its largest products: a hand-off to the other core costs
		// microseconds, more on a loaded machine.
		// A product whose weights do not fit in a core's cache is
		// memory-bound whatever the rows: split it finely, so that a
		// worker that wakes late takes what is left instead of the
		// caller waiting for its fixed half.
		switch {
		case n*k >= splitWeights:
			chunks *= 4
		case rows*n*k < smallMinWork:
			chunks = 1
		}
	} else if !m.split || m.goBLAS || rows*n*k < mmMinWork {
		// Small, or a backend that splits its products itself.
		chunks = 1
	}
	s := &m.s
	s.mm = mmJob{out: out, x: x, w: w, rows: rows, n: n, k: k, beta: beta}
	tensor.ParallelChunks(units, chunks, s.mmFn)
	s.mm = mmJob{}
}

// mulTSplitWork is the multiply-adds from which a product of several rows
// through a transposed weight is split over the workers: the same bound as
// smallMinWork. Lower bounds (down to 1<<15, which splits a five-row
// verification's larger products) measured no faster on 2 cores in an
// interleaved comparison and doubled the CPU time.
const mulTSplitWork = 1 << 19

// matmulT computes a product of at most smallRows rows through the
// transposed weight wt: on the calling goroutine, or for a large product of
// several rows split over the workers by column blocks, which computes every
// element as the unsplit product does.
func (m *Model) matmulT(out, x []float32, wt *tensor.Transposed, rows, n, k int, acc bool) {
	s := &m.s
	var beta float32
	if acc {
		beta = 1
	}
	s.mm = mmJob{out: out, x: x, wt: wt, rows: rows, n: n, k: k, beta: beta}
	units := (n + tensor.MulTPad - 1) / tensor.MulTPad
	chunks := 1
	if rows >= 2 && rows*n*k >= mulTSplitWork {
		chunks = tensor.Workers()
	}
	tensor.ParallelChunks(units, chunks, s.mmFn)
	s.mm = mmJob{}
}

// matmulChunk computes the output features of blocks [lo, hi) of m.s.mm
// (blocks of tensor.MulTPad features through a transposed weight, else of
// mmBlock).
func (m *Model) matmulChunk(_, lo, hi int) {
	j := &m.s.mm
	if j.wt != nil {
		j.wt.MulCols(j.out, j.n, j.x, j.k, j.rows, lo*tensor.MulTPad, min(hi*tensor.MulTPad, j.n), j.beta != 0)
		return
	}
	lo *= mmBlock
	hi = min(hi*mmBlock, j.n)
	w := j.w.RowRange(lo, hi)
	if j.rows <= smallRows {
		w.DotRows(j.out[lo:], j.n, j.x[:j.rows*j.k], j.k, j.rows, j.beta != 0)
		return
	}
	w.MulT(m.be, j.out[lo:], j.n, j.x[:j.rows*j.k], j.k, j.rows, j.beta)
}

// linear runs l on rows of x into out (acc adds to out), splitting the product.
func (m *Model) linear(l *Linear, out, x []float32, rows int, acc bool) {
	m.matmul(out, x, l.W, l.wt, rows, acc)
	if l.B != nil {
		addBias(out[:rows*l.Out], l.B)
	}
}
