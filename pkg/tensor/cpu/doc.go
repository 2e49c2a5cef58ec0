// Package cpu is drafter's CPU device: the tensor.Device whose memory is the
// host's (New). It holds the Backend interface through which its large
// float32 products run (OpenBLAS loaded at run time through cgo, or pure Go:
// drafter's assembly kernels), Products, which runs the weight products and
// alone decides how (kernel, weight layout, threading), and the Go side of
// the element-wise ops, losses, attention and training-time-test kernels,
// split over the host's workers (tensor.Parallel). With pkg/tensor's other
// devices it is the only code that reaches the assembly kernels
// (pkg/tensor/internal/kernel), cgo or OpenBLAS (internal/deps checks it).
//
// All matrices are row-major float32 slices. A backend never allocates on the
// hot path; callers own every buffer.
package cpu
