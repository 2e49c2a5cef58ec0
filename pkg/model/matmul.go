package model

import "github.com/drafter-ai/drafter/pkg/tensor"

// The model's weight products run on its device (m.dev), which decides how:
// on the CPU device, tensor.Products chooses the few-row kernels for decode
// steps and draft verification (each row computed as a one-token step
// computes it), the backend's GEMM or the 16-bit kernels, the split over the
// workers, and the weights' layouts. The model chooses only what the
// products are: q/k/v and gate/up as one fused product where the weights lie
// back to back (fuse), and the bias added after.

// linear computes out = x·Wᵀ (+ b) for l.
func (m *Model) linear(l *Linear, out, x tensor.Tensor) {
	m.dev.MulT(out, x, &l.w, false)
	if !l.b.Empty() {
		m.dev.AddBias(out, l.b)
	}
}

// linearAcc computes out += x·Wᵀ (+ b) for l.
func (m *Model) linearAcc(l *Linear, out, x tensor.Tensor) {
	m.dev.MulT(out, x, &l.w, true)
	if !l.b.Empty() {
		m.dev.AddBias(out, l.b)
	}
}
