package model

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"

	"github.com/drafter-ai/drafter/pkg/kvcache"
)

// Sequence is one sequence's KV cache: for every layer, K and V rows for
// positions [0, Cap) in one contiguous preallocated block (a kvcache.Cache,
// the type the EAGLE-3 draft keeps its cache in too).
//
// A forward pass writes the K/V rows of its new tokens after the committed
// prefix. A chain (Input.Parents == nil) is committed at once; a tree stays
// pending until Commit keeps the accepted path.
type Sequence struct {
	m     *Model
	kv    *kvcache.Cache
	epoch uint64 // last forward pass that included the sequence
}

// NewSequence allocates a sequence whose cache holds capacity positions. The
// capacity may not exceed MaxPositions.
func (m *Model) NewSequence(capacity int) (*Sequence, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("model: sequence capacity %d must be positive", capacity)
	}
	if capacity > m.maxPos {
		return nil, fmt.Errorf("model: sequence capacity %d exceeds the model's context length %d (max_position_embeddings in config.json)", capacity, m.maxPos)
	}
	kv, err := kvcache.New(m.dev, len(m.Layers), m.kvDim, capacity)
	if err != nil {
		return nil, fmt.Errorf("model: sequence: %w", err)
	}
	return &Sequence{m: m, kv: kv}, nil
}

// SequenceBytes returns the device memory a sequence of capacity positions
// takes (its KV cache, as the device lays it out), and false when the
// device's memory is the host's (it does not report its memory: see
// tensor.MemoryReporter).
func (m *Model) SequenceBytes(capacity int) (int64, bool) {
	mr, ok := m.dev.(tensor.MemoryReporter)
	if !ok {
		return 0, false
	}
	return mr.KVBytes(len(m.Layers), m.kvDim, capacity), true
}

// Len returns the number of committed positions.
func (s *Sequence) Len() int { return s.kv.Len() }

// Cap returns the cache capacity in positions.
func (s *Sequence) Cap() int { return s.kv.Cap() }

// Pending returns how many tree nodes from the last forward pass await Commit.
func (s *Sequence) Pending() int { return s.kv.Pending() }

// Reset empties the sequence for reuse, keeping its memory.
func (s *Sequence) Reset() { s.kv.Reset() }

// Truncate drops committed positions from n on (n <= Len), for example draft
// tokens a verifier rejected after a chain forward. Pending nodes are dropped.
func (s *Sequence) Truncate(n int) error {
	if err := s.kv.Truncate(n); err != nil {
		return fmt.Errorf("model: sequence: %w", err)
	}
	return nil
}

// Commit keeps the accepted path of the pending tree: accepted lists node
// indices (into the tokens of the last tree forward) forming a chain from a
// root: accepted[0] has parent -1 and accepted[j] has parent accepted[j-1]. Their
// K/V rows are compacted into place after the prefix and the sequence grows by
// len(accepted); every other pending node is dropped. An empty accepted drops
// all pending nodes.
func (s *Sequence) Commit(accepted []int) error {
	if err := s.kv.Commit(accepted); err != nil {
		return fmt.Errorf("model: sequence: %w", err)
	}
	return nil
}
