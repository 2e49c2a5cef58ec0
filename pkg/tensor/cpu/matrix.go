package cpu

import "github.com/drafter-ai/drafter/pkg/tensor"

// MatrixDotRows computes out[i*ldo+j] = x[i*ldx:i*ldx+Cols]·row j of a for i < m
// and every row j, or adds it to out when acc is true: the product x·aᵀ of a
// few rows, on the calling goroutine, through DotRows, DotRowsBF16 or
// DotRowsF16 (each row's result independent of m; see those).
func MatrixDotRows(a tensor.Matrix, out []float32, ldo int, x []float32, ldx, m int, acc bool) {
	switch a.DType {
	case tensor.F32:
		DotRows(out, ldo, x, ldx, a.F32, a.Cols, m, a.Rows, a.Cols, acc)
	case tensor.BF16:
		DotRowsBF16(out, ldo, x, ldx, a.U16, a.Cols, m, a.Rows, a.Cols, acc)
	case tensor.F16:
		DotRowsF16(out, ldo, x, ldx, a.U16, a.Cols, m, a.Rows, a.Cols, acc)
	}
}

// MatrixMulT computes out[i*ldo+j] = x[i*ldx:i*ldx+Cols]·row j of a for i < m,
// plus beta·out (beta 0: out is not read): the product x·aᵀ of many rows. A
// float32 matrix runs be's Sgemm (be's threading); a 16-bit one runs
// SgemmBF16 or SgemmF16, split over the workers, except that a bfloat16
// one with beta 0 or 1 runs GemmBF16, which rounds x to bfloat16 where
// RoundsBF16Activations is true, whatever m (Products sends it only
// products of more than FewRows rows).
func MatrixMulT(a tensor.Matrix, be Backend, out []float32, ldo int, x []float32, ldx, m int, beta float32) {
	n, k := a.Rows, a.Cols
	if m == 0 || n == 0 {
		return
	}
	c := out[:(m-1)*ldo+n]
	switch a.DType {
	case tensor.F32:
		be.Sgemm(false, true, m, n, k, 1, x[:(m-1)*ldx+k], ldx, a.F32, k, beta, c, ldo)
	case tensor.BF16:
		if beta == 0 || beta == 1 {
			GemmBF16(m, n, k, x[:(m-1)*ldx+k], ldx, a.U16, k, c, ldo, beta == 1)
			return
		}
		SgemmBF16(false, true, m, n, k, 1, x[:(m-1)*ldx+k], ldx, a.U16, k, beta, c, ldo)
	case tensor.F16:
		SgemmF16(false, true, m, n, k, 1, x[:(m-1)*ldx+k], ldx, a.U16, k, beta, c, ldo)
	}
}
