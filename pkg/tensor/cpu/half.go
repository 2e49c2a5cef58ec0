package cpu

import (
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/internal/kernel"
)

// Products over weights kept in a checkpoint's 16-bit
// format: bfloat16 or IEEE binary16 values as uint16 bit patterns in the
// host's byte order (a little-endian safetensors payload viewed in place on
// amd64 and arm64). Activations stay float32 in DotRowsBF16/F16 and
// SgemmBF16/F16: the weights are widened exactly in registers and every
// product and sum is a float32 operation, so a product equals the float32
// product with the 16-bit weights' values (within float32 rounding). The
// one exception is GemmBF16 on processors with AVX512_BF16, which rounds the
// activations to bfloat16 (see RoundsBF16Activations). The conversions
// between the formats are pkg/tensor's (tensor.BF16ToF32, ...).

// DotRowsBF16 is DotRows over bfloat16 weights w: out[i*ldo+j] =
// x[i*ldx:i*ldx+k]·w[j*ldw:j*ldw+k] for i < m and j < n, or that added to
// out[i*ldo+j] when acc is true. It runs on the calling goroutine and
// allocates nothing. It reads half the bytes of DotRows, which a one-row
// product over a matrix larger than the caches waits on.
//
// Each element is the same sequence of operations whatever m, its row or
// column, and however a caller splits the rows or columns (sixteen lanes of
// fused multiply-adds over k, k ≡ l mod 16 in lane l, reduced in a fixed
// pairwise order; see kernel.DotRowsBF16), so a row's product does not
// depend on the batch it is computed in: a verified draft row scores exactly
// as a one-row decode step. The AVX-512 and AVX2 bodies give the same bits.
func DotRowsBF16(out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
	kernel.DotRowsBF16(out, ldo, x, ldx, w, ldw, m, n, k, acc)
}

// DotRowsF16 is DotRowsBF16 over IEEE binary16 weights.
func DotRowsF16(out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
	kernel.DotRowsF16(out, ldo, x, ldx, w, ldw, m, n, k, acc)
}

// SgemmBF16 is the backend's Sgemm with B in bfloat16: C =
// alpha*op(A)*op(B) + beta*C, op(B) k x n, B held [n, ldb] when transB (a
// Hugging Face Linear weight [out, in]: the prefill product x·Wᵀ) and [k,
// ldb] otherwise. B's panels are widened to float32 as they are packed and
// the product runs drafter's float32 GEMM kernels, split over the workers:
// the result is, bit for bit, the pure-Go backend's Sgemm with B widened
// first, at its speed. When beta is 0, C is not read.
func SgemmBF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	sgemmHalf(kernel.BF16, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmF16 is SgemmBF16 with B in IEEE binary16.
func SgemmF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	sgemmHalf(kernel.F16, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmHalf is SgemmBF16 and SgemmF16, on a Gemm from the pure-Go backend's
// free list.
func sgemmHalf(h kernel.Half, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	checkGemm(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	g := takeGemm()
	g.SgemmHalf(tensor.ParallelChunks, tensor.Workers(), transA, transB, m, n, k, alpha, a, lda, h, b, ldb, beta, c, ldc)
	putGemm(g)
}

// RoundsBF16Activations reports whether GemmBF16 rounds its activations to
// bfloat16 here: the processor has AVX512_BF16 (and the build is not
// purego). Then the products of more than FewRows rows over bfloat16
// weights (a prefill, a teacher-forced capture: Products.MulT,
// Matrix.MulT) round their inputs to bfloat16, as llama.cpp's CPU backend
// and the GPU serving engines (bf16 activations throughout) do, at twice
// the float32 GEMM's rate; products of at most FewRows rows (decode steps,
// drafts, their verification) keep float32 activations everywhere.
func RoundsBF16Activations() bool { return kernel.HasGemmBF16() }

// GemmBF16 computes C = A·Bᵀ, or C += A·Bᵀ when acc is true, for A [m, k]
// float32 (row stride lda), B [n, k] bfloat16 (row stride ldb: a Hugging
// Face Linear weight [out, in]) and C [m, n] (row stride ldc), split over
// the workers. Where RoundsBF16Activations is true, A's values are rounded
// to the nearest bfloat16 (ties to even) and the product runs AVX512_BF16's
// VDPBF16PS: each product of two bfloat16 values is exact and accumulated
// in float32, so the result is the product of the rounded A within float32
// rounding (bfloat16 subnormals count as zero). Elsewhere it is SgemmBF16
// (A not rounded). When acc is false, C is not read.
func GemmBF16(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int, acc bool) {
	if !kernel.HasGemmBF16() {
		var beta float32
		if acc {
			beta = 1
		}
		SgemmBF16(false, true, m, n, k, 1, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if m == 0 || n == 0 {
		return
	}
	checkGemm(false, true, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	g := takeGemm()
	g.GemmBF16(tensor.ParallelChunks, tensor.Workers(), m, n, k, a, lda, b, ldb, c, ldc, acc)
	putGemm(g)
}
