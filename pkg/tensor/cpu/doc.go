// Package cpu is drafter's CPU device: the tensor.Device whose memory is the
// host's (New). It holds the Backend interface through which its large
// float32 products run (OpenBLAS loaded at run time through cgo, or pure Go:
// drafter's assembly kernels), Products, which runs the weight products and
// alone decides how (kernel, weight layout, threading), and the Go side of
// the element-wise ops, losses, attention and training-time-test kernels,
// split over the host's workers (tensor.Parallel). Only pkg/tensor and the
// devices under it reach the assembly kernels (pkg/tensor/internal/kernel),
// cgo, OpenBLAS or CUDA (internal/deps checks it); of them, this package
// alone loads OpenBLAS, and it and pkg/tensor's 16-bit conversions alone run
// the kernels.
//
// All matrices are row-major float32 slices. A backend never allocates on the
// hot path; callers own every buffer.
package cpu
