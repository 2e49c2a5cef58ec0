package model

import "fmt"

// Sequence is one sequence's KV cache: for every layer, K and V rows for
// positions [0, Cap) in one contiguous preallocated block.
//
// A forward pass writes the K/V rows of its new tokens after the committed
// prefix. A chain (Input.Parents == nil) is committed at once; a tree stays
// pending until Commit keeps the accepted path.
type Sequence struct {
	m       *Model
	k, v    [][]float32 // per layer [cap, kvDim]
	kt      [][]float32 // per layer [kvDim, cap]: k transposed, for the scores of short passes
	n       int         // committed length
	cap     int
	pending []int32 // parents of the uncommitted tree nodes written at rows n..n+len(pending)
	epoch   uint64  // last forward pass that included the sequence
}

// NewSequence allocates a sequence whose cache holds capacity positions. The
// capacity may not exceed MaxPositions.
func (m *Model) NewSequence(capacity int) (*Sequence, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("model: sequence capacity %d must be positive", capacity)
	}
	if capacity > m.maxPos {
		return nil, fmt.Errorf("model: sequence capacity %d exceeds the model's context length %d (max_position_embeddings or sliding_window in config.json)", capacity, m.maxPos)
	}
	L := len(m.Layers)
	block := make([]float32, 3*L*capacity*m.kvDim)
	s := &Sequence{m: m, k: make([][]float32, L), v: make([][]float32, L), kt: make([][]float32, L), cap: capacity}
	per := capacity * m.kvDim
	for l := 0; l < L; l++ {
		s.k[l] = block[3*l*per : (3*l+1)*per : (3*l+1)*per]
		s.v[l] = block[(3*l+1)*per : (3*l+2)*per : (3*l+2)*per]
		s.kt[l] = block[(3*l+2)*per : (3*l+3)*per : (3*l+3)*per]
	}
	return s, nil
}

// Len returns the number of committed positions.
func (s *Sequence) Len() int { return s.n }

// Cap returns the cache capacity in positions.
func (s *Sequence) Cap() int { return s.cap }

// Pending returns how many tree nodes from the last forward pass await Commit.
func (s *Sequence) Pending() int { return len(s.pending) }

// Reset empties the sequence for reuse, keeping its memory.
func (s *Sequence) Reset() {
	s.n = 0
	s.pending = s.pending[:0]
}

// Truncate drops committed positions from n on (n <= Len), for example draft
// tokens a verifier rejected after a chain forward. Pending nodes are dropped.
func (s *Sequence) Truncate(n int) error {
	if n < 0 || n > s.n {
		return fmt.Errorf("model: cannot truncate a sequence of length %d to %d", s.n, n)
	}
	s.n = n
	s.pending = s.pending[:0]
	return nil
}

// Commit keeps the accepted path of the pending tree: accepted lists node
// indices (into the tokens of the last tree forward) forming a chain from a
// root: accepted[0] has parent -1 and accepted[j] has parent accepted[j-1]. Their
// K/V rows are compacted into place after the prefix and the sequence grows by
// len(accepted); every other pending node is dropped. An empty accepted drops
// all pending nodes.
func (s *Sequence) Commit(accepted []int) error {
	np := len(s.pending)
	prev := -1
	for j, a := range accepted {
		if a < 0 || a >= np {
			return fmt.Errorf("model: commit: accepted node %d (position %d in the list) is not one of the %d pending tree nodes", a, j, np)
		}
		if int(s.pending[a]) != prev {
			return fmt.Errorf("model: commit: accepted nodes are not a path from the root: node %d has parent %d, want %d", a, s.pending[a], prev)
		}
		prev = a
	}
	kv := s.m.kvDim
	for j, a := range accepted {
		if a == j {
			continue // already in place (always so for a chain)
		}
		src, dst := (s.n+a)*kv, (s.n+j)*kv
		for l := range s.k {
			copy(s.k[l][dst:dst+kv], s.k[l][src:src+kv])
			copy(s.v[l][dst:dst+kv], s.v[l][src:src+kv])
			kt := s.kt[l]
			for c := 0; c < kv; c++ {
				kt[c*s.cap+s.n+j] = kt[c*s.cap+s.n+a]
			}
		}
	}
	s.n += len(accepted)
	s.pending = s.pending[:0]
	return nil
}
