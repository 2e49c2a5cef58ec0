package tensor

// Weight is a weight matrix W [n, k] (a Hugging Face Linear's layout, in its
// checkpoint's dtype) as products by it run: the Matrix, plus whatever other
// layout the device keeps beside it for speed (the CPU device: a transposed
// float32 copy for few-row products). A caller builds it once with WeightOf,
// lets Device.PrepareWeights choose the layouts, and multiplies with
// Device.MulT; it never looks at the layouts, so that a device can change
// them without touching the caller. The zero Weight is empty.
type Weight struct {
	m      Matrix
	layout Layout // the device's other layout, or nil
	// The weight in a device's memory, in m's dtype, where the device's
	// memory is not the host's (SetResident); empty until then.
	res Tensor
}

// Layout is a device's own layout of a weight beside its matrix (the CPU
// device's transposed copy), which only that device reads.
type Layout interface {
	// Bytes returns the memory the layout occupies.
	Bytes() int64
}

// Resident returns the copy of the weight that a device keeps in its own
// memory (SetResident), and whether there is one.
func (w *Weight) Resident() (Tensor, bool) { return w.res, !w.res.Empty() }

// SetResident records t as the weight's copy in a device's memory, in the
// matrix's dtype and shape: a device whose memory is not the host's uploads
// the weight once (PrepareWeights, or its first product) and multiplies by
// that copy afterwards.
func (w *Weight) SetResident(t Tensor) { w.res = t }

// WeightOf returns m as a Weight with no other layout: products read m where
// it is until Device.PrepareWeights adds one. The Weight shares m's values.
func WeightOf(m Matrix) Weight { return Weight{m: m} }

// Matrix returns the matrix the weight multiplies by.
func (w *Weight) Matrix() Matrix { return w.m }

// Empty reports whether the weight has no matrix (the zero Weight).
func (w *Weight) Empty() bool { return w.m.Empty() }

// ExtraBytes returns the memory the device's other layouts of the weight
// occupy beside the matrix (a transposed copy), which Matrix.Bytes does not
// count: 0 when products read the matrix alone.
func (w *Weight) ExtraBytes() int64 {
	if w.layout == nil {
		return 0
	}
	return w.layout.Bytes()
}

// Layout returns the layout a device set with SetLayout, or nil: for a
// device's own layouts only.
func (w *Weight) Layout() Layout { return w.layout }

// SetLayout records l as the weight's other layout, which the device that
// set it reads in its products: for a device's own layouts only.
func (w *Weight) SetLayout(l Layout) { w.layout = l }
