// Package dataset defines what the drafter trainers read: samples of token ids,
// a loss mask and the frozen target's hidden states, behind a small interface
// that the capture reader (Arrow shards) and in-memory test data both implement.
package dataset

import "fmt"

// Sample is one training sequence of T tokens.
type Sample struct {
	// Tokens are the T token ids of the sequence (prompt and response).
	Tokens []int32
	// LossMask[t] is true when token t is a response token the drafter should
	// learn to predict.
	LossMask []bool
	// Final is the target's last hidden state after its final norm, T rows of
	// Hidden() values (row-major [T, H]); nil when states were not requested.
	Final []float32
}

// Dataset is a random-access collection of samples.
type Dataset interface {
	// NumSamples returns the number of samples.
	NumSamples() int
	// Hidden returns the width H of the hidden states.
	Hidden() int
	// Sample fills dst with sample i, reusing dst's slices when they have room.
	// When withStates is false only Tokens and LossMask need be filled (Final may
	// be left nil), which lets a trainer count tokens without reading states.
	Sample(i int, dst *Sample, withStates bool) error
}

// Memory is a Dataset held in memory, for tests and small runs.
type Memory struct {
	H       int
	Samples []Sample
}

// NumSamples returns len(m.Samples).
func (m *Memory) NumSamples() int { return len(m.Samples) }

// Hidden returns m.H.
func (m *Memory) Hidden() int { return m.H }

// Sample copies sample i into dst.
func (m *Memory) Sample(i int, dst *Sample, withStates bool) error {
	if i < 0 || i >= len(m.Samples) {
		return fmt.Errorf("dataset: sample %d out of range [0,%d)", i, len(m.Samples))
	}
	s := &m.Samples[i]
	if len(s.LossMask) != len(s.Tokens) {
		return fmt.Errorf("dataset: sample %d has %d tokens but %d loss-mask entries", i, len(s.Tokens), len(s.LossMask))
	}
	dst.Tokens = append(dst.Tokens[:0], s.Tokens...)
	dst.LossMask = append(dst.LossMask[:0], s.LossMask...)
	if withStates {
		if len(s.Final) != len(s.Tokens)*m.H {
			return fmt.Errorf("dataset: sample %d has %d state values, want %d tokens x hidden %d", i, len(s.Final), len(s.Tokens), m.H)
		}
		dst.Final = append(dst.Final[:0], s.Final...)
	}
	return nil
}

// Check validates one filled sample against the hidden width h (states are
// checked only when present); trainers call it on every sample they read.
func Check(i int, s *Sample, h int, vocab int) error {
	if len(s.LossMask) != len(s.Tokens) {
		return fmt.Errorf("dataset: sample %d has %d tokens but %d loss-mask entries", i, len(s.Tokens), len(s.LossMask))
	}
	if s.Final != nil && len(s.Final) != len(s.Tokens)*h {
		return fmt.Errorf("dataset: sample %d has %d state values, want %d tokens x hidden %d", i, len(s.Final), len(s.Tokens), h)
	}
	for t, id := range s.Tokens {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("dataset: sample %d token %d has id %d outside the vocabulary [0,%d)", i, t, id, vocab)
		}
	}
	return nil
}
