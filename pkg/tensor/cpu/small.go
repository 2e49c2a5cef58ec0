package cpu

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor/internal/kernel"
)

// DotRows computes out[i*ldo+j] = x[i*ldx:i*ldx+k]·w[j*ldw:j*ldw+k] for
// i < m and j < n, or adds the product to out[i*ldo+j] when acc is true: the
// product x·wᵀ of a Hugging Face Linear weight w [n, k] with m rows x [m, k]
// (ldx = ldw = k), written into the first n columns of an m-row matrix with
// row stride ldo; or, with larger strides, one attention head's scores
// against a cache of several heads' keys. It runs on the calling goroutine
// and allocates nothing.
//
// Each element is the same sequence of operations whatever m, the element's
// row or column, and however a caller splits the columns: eight interleaved
// partial sums over k (k ≡ l mod 8 in lane l, fused multiply-adds where the
// processor has them), added pairwise. So a row's product does not depend on
// the batch it is computed in. On amd64 with AVX2 and FMA it runs in assembly,
// four weight rows by three rows at a time, reading each weight row from
// memory once for all m rows.
func DotRows(out []float32, ldo int, x []float32, ldx int, w []float32, ldw int, m, n, k int, acc bool) {
	kernel.DotRows(out, ldo, x, ldx, w, ldw, m, n, k, acc)
}

// WeightedSum computes out[d] = Σ_{j<n} p[j]·v[j*ldv+d] for d < k, or adds it
// to out[d] when acc is true: the row vector p times the [n, k] matrix v with
// row stride ldv, the P·V of attention over a cache of several heads' values.
// It runs on the calling goroutine and allocates nothing. Key j goes into
// partial sum j%4 and the four are added as (s0+s1)+(s2+s3), whatever n, so
// keys past the end with p[j] = 0 leave the result unchanged.
func WeightedSum(out, p, v []float32, ldv, n, k int, acc bool) {
	kernel.WeightedSum(out, p, v, ldv, n, k, acc)
}

// ExpShift replaces each x[i] by e^(x[i]-shift) and returns their sum: the
// numerators of a softmax whose shift is the row's maximum, so that every
// argument is <= 0 (an argument below float32's underflow, or NaN, gives 0).
// It computes in float32, within a few ulp of math.Exp, eight at a time where
// the processor has AVX2, allocating nothing.
func ExpShift(x []float32, shift float32) float32 { return kernel.ExpShift(x, shift) }

// Expf returns e^x in float32, within about 2 ulp (see kernel.Expf).
func Expf(x float32) float32 { return kernel.Expf(x) }

// SoftmaxUnscaled replaces x by e^(x - max x), with ExpShift's exponentials,
// and returns their sum: softmax(x) times that sum. x must not be empty.
func SoftmaxUnscaled(x []float32) float32 { return kernel.SoftmaxUnscaled(x) }

// Softmax turns x into softmax(x) in place, with ExpShift's exponentials;
// -Inf entries become 0.
func Softmax(x []float32) { kernel.Softmax(x) }

// Scale multiplies x by s in place, eight at a time where the processor
// allows.
func Scale(x []float32, s float32) { kernel.Scale(x, s) }

// SwiGLU computes out = silu(gate)*up element-wise (out may alias gate), with
// Expf's arithmetic, eight at a time where the processor allows.
func SwiGLU(out, gate, up []float32) { kernel.SwiGLU(out, gate, up) }

// MulTPad is the column block of Transposed: a product split over columns
// must split at multiples of it.
const MulTPad = kernel.MulTPad

// Transposed is a weight matrix W [N, K] (a Hugging Face Linear's layout)
// held transposed, [K, LD] with LD = N rounded up to MulTPad, for products
// with a few rows (decode steps, drafts and their verification). Its kernels
// share every weight load among four or eight rows and need no horizontal
// sums, so on a model whose weights sit in cache several rows cost much less
// than as many one-row products. It has a fast body only where
// Bytes returns the memory the transposed copy occupies (its Layout's size
// in Weight.ExtraBytes).
func (t *Transposed) Bytes() int64 { return 4 * int64(len(t.T)) }

// TransposedFast reports true; a model keeps both layouts only then.
type Transposed struct {
	// T holds W transposed: T[p*LD+j] = W[j, p], zero past column N.
	T []float32
	// LD is the row stride of T, N rounded up to MulTPad.
	LD int
	// N and K are W's output and input features.
	N, K int
}

// TransposedFast reports whether Transposed products run in assembly on this
// processor (AVX-512).
func TransposedFast() bool { return kernel.MulTAvailable() }

// NewTransposed copies w [n, k] into a Transposed.
func NewTransposed(w []float32, n, k int) *Transposed {
	t, ld := kernel.TransposeForMulT(w, n, k)
	return &Transposed{T: t, LD: ld, N: n, K: k}
}

// MulCols computes columns [j0, j1) of out[i*ldo+j] = x[i*ldx:i*ldx+K]·W[j]
// for i < m, or adds them to out when acc is true. j0 must be a multiple of
// MulTPad. Each element is computed the same way whatever m and however the
// columns are split (see kernel.MulT), so a row's product does not depend on
// the batch it is computed in. It runs on the calling goroutine and
// allocates nothing.
func (t *Transposed) MulCols(out []float32, ldo int, x []float32, ldx, m, j0, j1 int, acc bool) {
	if j0%MulTPad != 0 || j0 < 0 || j1 > t.N || j1 < j0 {
		panic(fmt.Sprintf("tensor: Transposed.MulCols columns [%d, %d) of %d (the start must be a multiple of %d)", j0, j1, t.N, MulTPad))
	}
	if m <= 0 || j1 == j0 {
		return
	}
	kernel.MulT(out[j0:], ldo, x, ldx, t.T[j0:], t.LD, m, j1-j0, t.K, acc)
}
