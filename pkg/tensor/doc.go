// Package tensor is drafter's device interface: the Device every compute
// device implements (device-owned tensors with a dtype, and the ops a model,
// a drafter and a trainer run on them), its value types, the weight matrices
// a checkpoint holds (Matrix, Weight), the 16-bit conversions, and the host
// helpers every layer shares (the worker pool, RoPE's angles), and what a
// device's implementation alone may call (host.go). The devices themselves
// live beside it, and it imports none of them: the CPU device in
// pkg/tensor/cpu, the CUDA device in pkg/tensor/cuda; the conformance suite
// every device runs is pkg/tensor/tensortest.
package tensor

// FewRows is the most rows of a product (Device.MulT, and Device.MatMul's
// a·bᵀ of alpha 1) that the Device contract computes row by row: each row's
// result is the same whatever the other rows, so that a draft tree's
// verification scores each node exactly as a decode step would. The CPU
// device runs its few-row kernels up to it and a GEMM above (the models'
// products, a few hundred features, stay cheaper there than in a BLAS call up
// to a few dozen rows: BenchmarkSmall, 33 rows faster, 64 rows slower).
const FewRows = 48
