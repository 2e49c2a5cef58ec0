package tensor

// StateCopier is implemented by a device whose memory is not the host's and
// that can copy tensors to the host behind its computation (on a second
// stream): decoding hands it a pass's captured states and reads them on the
// host while the device runs the next pass. The CPU device does not
// implement it: its tensors are host memory already (HostF32).
type StateCopier interface {
	// NewStateCopy returns a double-buffered copier of parts float32
	// tensors of cols columns each (and any number of rows).
	NewStateCopy(parts, cols int) (StateCopy, error)
}

// StateCopy copies a pass's tensors to host memory in one of two buffers,
// so that one buffer is read on the host while the other fills. It belongs
// to one caller (a decoding loop) and the device value that made it.
type StateCopy interface {
	// Start queues the copy of srcs (parts tensors of the same rows and
	// cols columns) into buffer b (0 or 1), ordered after the work queued
	// on the device so far. The device's later work may overwrite srcs at
	// once (the copier stages them in device memory of its own). Buffer b
	// must not be in flight: Wait for it before starting it again.
	Start(b int, srcs []Tensor)
	// Wait blocks until buffer b's copy has completed and returns its
	// parts as host slices [rows·cols], valid until the next Start of b.
	Wait(b int) [][]float32
	// Close waits for the copies in flight and frees the buffers.
	Close() error
}
