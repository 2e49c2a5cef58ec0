package model

// The model's weight products run through tensor.Products (m.mm), which
// decides how: the few-row kernels for decode steps and draft verification
// (each row computed as a one-token step computes it), the backend's GEMM or
// the 16-bit kernels above, the split over tensor's workers, and the
// weights' layouts (transposed copies of a small float32 model's matrices,
// given once at load by prepare). The model chooses only what the products
// are: q/k/v and gate/up as one fused product where the weights lie back to
// back (fuse), and the bias added after.

// linear runs l on rows of x into out (acc adds to out).
func (m *Model) linear(l *Linear, out, x []float32, rows int, acc bool) {
	m.mm.MulT(out, x, &l.w, rows, acc)
	if l.B != nil {
		addBias(out[:rows*l.Out], l.B)
	}
}
