package cpu

import "github.com/drafter-ai/drafter/pkg/tensor"

// Products runs a caller's weight products out[rows, n] (+)= x[rows, k]·Wᵀ
// on one backend, and decides everything about how: which kernel (the
// few-row kernels or the backend's GEMM), the layout of the weights
// (Prepare), and the split over tensor's workers. A model or a drafter
// creates one and keeps it: it holds the scratch of the product in flight, so
// that a product allocates nothing. It is not safe for concurrent use.
//
// Products of at most FewRows rows (decode steps, drafts and their
// verification) run the few-row kernels on every backend: they beat a BLAS
// call at these sizes, and compute each row the same way whatever the number
// of rows, so that verifying a draft scores each row exactly as a one-token
// decode step would. Larger products go to the backend for float32 weights,
// to SgemmF16 (which widens the weights as it packs them and splits itself)
// for binary16 ones, and to GemmBF16 for bfloat16 ones, which on processors
// with AVX512_BF16 rounds the activations to bfloat16 and runs at twice the
// float32 rate (see RoundsBF16Activations), elsewhere SgemmBF16. 16-bit
// weights read half the bytes of a float32 product, which a decode step
// over weights larger than the caches waits on. MXFP4 weights are widened
// a tile or panel at a time into float32 scratch and run the float32
// kernels (mxfp4.go), with the same rule for few rows.
//
// Products are split over the output features across tensor's workers: each
// worker multiplies the input by its own block of weight rows, with a single
// kernel or backend call. Every output element is one inner product over the
// same inputs whichever block computes it, so the split does not change what
// is computed. It gives a single-row (decode) product, which a
// single-threaded BLAS or the pure-Go backend runs on one core, the memory
// bandwidth of both, and keeps the threading in one place (Go's scheduler)
// instead of two. Large products are split only on a backend whose calls may
// run side by side (see ParallelCalls), and not on the pure-Go backend, which
// splits its own (its packed kernels lose half their efficiency on
// 64-feature pieces).
type Products struct {
	be Backend
	// parallel: be's calls may run on several workers at once, one thread
	// each (see ParallelCalls).
	parallel bool
	// selfSplit: be's Sgemm splits large products over tensor's workers
	// itself, so a product is handed to it whole.
	selfSplit bool
	job       productJob
	fn        func(c, lo, hi int) // p.chunk, stored once so that a split allocates nothing
	// mx is the scratch of the products over MXFP4 weights (mxfp4.go).
	mx mxfp4Scratch
}

// The split of a product over the workers.
const (
	// mmBlock is the number of output features in a unit of the split of a
	// row-major product; blocks stay aligned to the BLAS kernels' register
	// tiles.
	mmBlock = 64
	// mmMinWork is the number of multiply-adds below which a GEMM product
	// runs on the calling goroutine (a hand-off costs a few microseconds).
	mmMinWork = 1 << 17
	// fewMinWork is mmMinWork for products through the few-row kernels.
	fewMinWork = 1 << 19
	// splitWeights is the weight-matrix size (values, 1 MiB of float32) from
	// which a few-row product is memory-bound and is split over the workers
	// in several chunks each.
	splitWeights = 1 << 18
	// mulTSplitWork is the multiply-adds from which a product of several
	// rows through a transposed weight is split over the workers: the same
	// bound as fewMinWork. Lower bounds (down to 1<<15, which splits a
	// five-row verification's larger products) measured no faster on 2
	// cores in an interleaved comparison and doubled the CPU time.
	mulTSplitWork = 1 << 19
)

// transposeMaxWeights is the most weight values (64 MiB of float32) for which
// Prepare keeps transposed copies.
const transposeMaxWeights = 1 << 24

// productJob is the product being split, read by Products.chunk.
type productJob struct {
	out, x  []float32
	w       tensor.Matrix
	t       *Transposed
	rows, n int
	k       int
	ldo     int // out's row stride: n, or the whole weight's rows for a panel of it
	beta    float32
}

// NewProducts returns the weight products of one caller on be (DefaultBackend() when
// nil).
func NewProducts(be Backend) *Products {
	if be == nil {
		be = DefaultBackend()
	}
	p := &Products{be: be}
	p.parallel, p.selfSplit = threading(be)
	p.fn = p.chunk
	p.mx.deqFn = p.mx.dequantize
	return p
}

// Backend returns the backend p runs its large float32 products on.
func (p *Products) Backend() Backend { return p.be }

// ParallelCalls reports whether the backend's calls may run on several of
// tensor's workers at once, each on one thread, so that a caller with
// independent calls (attention heads) spreads them over the workers. When
// false the backend may thread each call itself: calls from two goroutines
// would then queue behind each other's helper threads, which spin meanwhile
// (a decode step measured 6-8x the CPU time of a single-threaded BLAS split
// by the caller), so the caller makes them one after another.
func (p *Products) ParallelCalls() bool { return p.parallel }

// Prepare gives the weights a caller multiplies by (all of them together: a
// model's every matrix, each fused matrix instead of its parts) the layouts
// their products run fastest in, in place. Where the processor runs
// Transposed products fast (TransposedFast), a set of float32 weights of at
// most 64 MiB in all gets transposed copies for its few-row products: on
// weights that sit in the caches such products are bound by arithmetic and
// cache bandwidth, not memory, and the transposed kernels need no horizontal
// sums and share each weight load among four or eight rows, so a decode step
// gets faster and a speculative verification of several rows costs less than
// as many steps. Larger sets are bound by memory bandwidth at these row
// counts and would pay the copy for nothing; 16-bit weights stay in their
// checkpoint's bytes, which a float32 copy would double. The results are the
// same either way up to float32 rounding, and a row's result still does not
// depend on the rows beside it. The weights must not change afterwards.
func (p *Products) Prepare(ws ...*tensor.Weight) {
	if !TransposedFast() {
		return
	}
	total := 0
	for _, w := range ws {
		if w.Matrix().DType != tensor.F32 {
			return
		}
		total += w.Matrix().Len()
	}
	if total > transposeMaxWeights {
		return
	}
	for _, w := range ws {
		if !w.Matrix().Empty() && w.Layout() == nil {
			w.SetLayout(NewTransposed(w.Matrix().F32, w.Matrix().Rows, w.Matrix().Cols))
		}
	}
}

// MulT computes out[rows, n] = x[rows, k]·Wᵀ for the weight W [n, k], or adds
// it to out when acc is true; out has row stride n and x row stride k. Each
// row's result is the same whatever the other rows, up to FewRows rows.
func (p *Products) MulT(out, x []float32, w *tensor.Weight, rows int, acc bool) {
	n, k := w.Matrix().Rows, w.Matrix().Cols
	if rows == 0 || n == 0 {
		return
	}
	var beta float32
	if acc {
		beta = 1
	}
	if w.Matrix().DType == tensor.MXFP4 {
		p.mulMXFP4(out, x, w.Matrix(), rows, beta)
		return
	}
	if t, ok := w.Layout().(*Transposed); ok && rows <= tensor.FewRows {
		p.mulTransposed(out, x, t, rows, n, k, beta)
		return
	}
	if w.Matrix().DType != tensor.F32 && rows > tensor.FewRows {
		// The 16-bit GEMMs split themselves over the workers (GemmBF16
		// rounding the activations where RoundsBF16Activations).
		MatrixMulT(w.Matrix(), p.be, out, n, x, k, rows, beta)
		return
	}
	p.job = productJob{out: out, x: x, w: w.Matrix(), rows: rows, n: n, k: k, ldo: n, beta: beta}
	tensor.ParallelChunks((n+mmBlock-1)/mmBlock, p.chunks(rows, n, k), p.fn)
	p.job = productJob{}
}

// chunks returns the number of chunks a product of rows rows by a weight
// [n, k] (or a panel of one) is split into over its blocks of mmBlock
// output features: the split rule of MulT, see there.
func (p *Products) chunks(rows, n, k int) int {
	chunks := tensor.Workers()
	if rows <= tensor.FewRows {
		// The few-row kernels run in Go on the calling goroutine: always
		// safe to split, and a row's result does not depend on the split. A
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
		case rows*n*k < fewMinWork:
			chunks = 1
		}
	} else if !p.parallel || p.selfSplit || rows*n*k < mmMinWork {
		// Small, or a backend that threads its calls itself.
		chunks = 1
	}
	return chunks
}

// mulTransposed computes a product of at most FewRows rows through the
// transposed weight t: on the calling goroutine, or for a large product of
// several rows split over the workers by column blocks, which computes every
// element as the unsplit product does.
func (p *Products) mulTransposed(out, x []float32, t *Transposed, rows, n, k int, beta float32) {
	p.job = productJob{out: out, x: x, t: t, rows: rows, n: n, k: k, ldo: n, beta: beta}
	units := (n + MulTPad - 1) / MulTPad
	chunks := 1
	if rows >= 2 && rows*n*k >= mulTSplitWork {
		chunks = tensor.Workers()
	}
	tensor.ParallelChunks(units, chunks, p.fn)
	p.job = productJob{}
}

// chunk computes the output features of blocks [lo, hi) of p.job (blocks of
// MulTPad features through a transposed weight, else of mmBlock).
func (p *Products) chunk(_, lo, hi int) {
	if p.job.w.DType == tensor.MXFP4 {
		p.chunkMXFP4(lo, hi)
		return
	}
	j := &p.job
	if j.t != nil {
		j.t.MulCols(j.out, j.n, j.x, j.k, j.rows, lo*MulTPad, min(hi*MulTPad, j.n), j.beta != 0)
		return
	}
	lo *= mmBlock
	hi = min(hi*mmBlock, j.n)
	w := j.w.RowRange(lo, hi)
	if j.rows <= tensor.FewRows {
		MatrixDotRows(w, j.out[lo:], j.ldo, j.x[:j.rows*j.k], j.k, j.rows, j.beta != 0)
		return
	}
	MatrixMulT(w, p.be, j.out[lo:], j.ldo, j.x[:j.rows*j.k], j.k, j.rows, j.beta)
}
