package tensor

// Grapher is a device that can run the ops of a pass as one captured graph
// and replay it for later passes of the same shape (the CUDA device, with
// CUDA graphs): the host's per-step work is then one copy of the step's
// values and one launch instead of a launch per op. A caller that has such
// a device hands it the pass as a function of device ops.
type Grapher interface {
	// RunGraph runs pass's ops once, returning whether they ran as a graph
	// (captured now, or replayed) or, false, as plain ops. pass may be
	// called more than once (the device records what it does before
	// capturing it, and runs it plainly when it cannot be graphed), so it
	// must only issue device ops, the same ones for the same values: every
	// value that changes from one pass of a key to the next must reach the
	// device through the device's ops (Write, WriteI32, Gather, Attend's
	// sequences, KVWrite), never in the shape of an op. It must read
	// nothing back to the host: a pass that does runs plainly.
	RunGraph(key GraphKey, pass func()) bool
}

// GraphKey names the shape of a pass (its rows, the rows that get logits,
// the hidden states it records and a hash of its inputs' layout: each
// input's tokens, whether it is a tree, its logits mode and its cache's
// capacity): passes of one key issue the same ops with the same launch
// shapes, so one graph serves them all. The device checks that each replay
// issues exactly the ops it captured, and runs a pass that does not plainly.
type GraphKey struct {
	Rows, LogitRows, Taps int
	Layout                uint64
}
