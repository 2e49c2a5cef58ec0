package cuda

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

var _ tensor.MixedPrecision = (*Device)(nil)

// The cuBLAS compute type of bf16 products (cublasComputeType_t; gemm uses
// CUBLAS_COMPUTE_32F, 68).
const (
	computeF32FastBF = 75 // CUBLAS_COMPUTE_32F_FAST_16BF
)

// WithProducts returns a sibling of d whose MatMul over float32 tensors
// computes with p: for BF16Products, cublasGemmEx with
// CUBLAS_COMPUTE_32F_FAST_16BF (float32 A, B and C; each value of A and B
// rounded to bf16 for the tensor cores, the products accumulated in
// float32), so that a trainer keeps its weights, gradients and AdamW state
// in float32 and pays no cast kernels. The few-row path of MatMul (a·bᵀ of
// at most FewRows rows, MulT's kernel) and every inference product (MulT,
// HeadMatMul) stay float32: a model's forward on the sibling is
// bit-identical to d's.
func (d *Device) WithProducts(p tensor.Products) (tensor.Device, error) {
	switch p {
	case tensor.F32Products, tensor.BF16Products:
	default:
		return nil, fmt.Errorf("cuda: no products %s", p)
	}
	s := d.Sibling().(*Device)
	s.products = p
	return s, nil
}

// mulBF16Products is the driver's gemm for float32 operands with
// CUBLAS_COMPUTE_32F_FAST_16BF (see WithProducts).
func (d *Device) mulBF16Products(ta, tb bool, m, n, k int, alpha float32, a uint64, lda int, b uint64, ldb int, beta float32, c uint64, ldc int) error {
	return d.sh.drv.gemmCompute(ta, tb, m, n, k, alpha, a, cudaR32F, lda, b, cudaR32F, ldb, beta, c, ldc, computeF32FastBF)
}
