package model

import "github.com/drafter-ai/drafter/pkg/tensor"

// A pass on a device that runs graphs (tensor.Grapher: the CUDA device)
// goes to it as one function, passOps over the pass Forward laid out,
// under a key of the pass's shape: the device captures the first pass of a
// key and replays it for the next ones, each step's values (token ids,
// positions, the sequences' lengths, tree masks, the rows that get logits)
// reaching the kernels through device memory. Decode steps, chain and
// tree verification of the dense families go this way (graphable).

// graphPass holds the pass in flight for the function the device runs, so
// that a step allocates no closure.
type graphPass struct {
	batch []Input
	p     *pass
	run   func()
}

// fn returns the function that runs the pass in flight (made once).
func (g *graphPass) fn(m *Model) func() {
	if g.run == nil {
		g.run = func() { m.passOps(g.batch, g.p) }
	}
	return g.run
}

// graphChainRows is the longest chain input a graphed pass holds: decode
// steps and chain verification (a draft's depth plus one) repeat their
// shapes step after step, a prompt's prefill rarely does, and capturing it
// would cost more than the one pass it serves.
const graphChainRows = 16

// graphable reports whether the pass may run as a graph: not in the
// mixture-of-experts families, whose routing reads each token's experts to
// the host in the middle of the pass (moe.go), and not a pass holding a
// chain longer than graphChainRows (a prefill). Draft trees of any size are.
func (m *Model) graphable(batch []Input) bool {
	if m.Config.Experts > 0 {
		return false
	}
	for b := range batch {
		if batch[b].Parents == nil && len(batch[b].Tokens) > graphChainRows {
			return false
		}
	}
	return true
}

// graphKey is the shape of a pass: what decides which ops it issues and
// their launch shapes (each input's rows, tree or chain, logits mode and
// cache capacity, the taps), not the values that change per step.
func (m *Model) graphKey(batch []Input, rows, taps int) tensor.GraphKey {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	mix := func(v int) { h = (h ^ uint64(v)) * prime }
	mix(len(batch))
	for b := range batch {
		in := &batch[b]
		mix(len(in.Tokens))
		if in.Parents != nil {
			mix(-1)
		}
		mix(int(in.logitMode()))
		mix(in.Seq.kv.Cap())
	}
	return tensor.GraphKey{Rows: rows, LogitRows: len(m.s.lidx), Taps: taps, Layout: h}
}
