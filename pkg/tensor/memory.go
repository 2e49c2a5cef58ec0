package tensor

// MemoryReporter is implemented by a Device whose memory is its own (a GPU),
// whose size therefore bounds what a run keeps there: a distillation sizes
// its batch's KV caches from the free memory left after the weights. The CPU
// device does not implement it: its caches live in host memory, which the
// operating system pages and a batch's size is the user's choice.
type MemoryReporter interface {
	// MemInfo returns the device's free and total memory in bytes.
	MemInfo() (free, total int64, err error)
	// KVBytes returns the bytes NewKV(layers, kvDim, capacity) allocates
	// on the device (its layout's, not a formula of the caller's).
	KVBytes(layers, kvDim, capacity int) int64
}
