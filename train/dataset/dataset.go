// Package dataset defines what the drafter trainers read: samples of token ids,
// a loss mask and the frozen target's hidden states, behind one small interface
// that the capture reader (Arrow shards, train's adapter) and in-memory data
// (Memory) both implement. A trainer asks for the fields it needs, so a pass
// that only counts tokens reads no states.
package dataset

import "fmt"

// Fields says which state fields of a Sample a read fills; tokens and the loss
// mask are always filled.
type Fields uint8

const (
	// Final asks for Sample.Final, the last hidden state after the final norm.
	Final Fields = 1 << iota
	// Features asks for Sample.Features, the feature layers the method
	// asked the data for.
	Features
)

// TokensOnly asks for tokens and the loss mask alone.
const TokensOnly Fields = 0

// Has reports whether f includes every field of g.
func (f Fields) Has(g Fields) bool { return f&g == g }

// Sample is one training sequence of T tokens. Its slices belong to the caller,
// which passes the same Sample again to reuse them.
type Sample struct {
	// Tokens are the T token ids of the sequence (prompt and response).
	Tokens []int32
	// LossMask[t] is true when token t is a response token the drafter should
	// learn to predict.
	LossMask []bool
	// Final is the target's last hidden state after its final norm, T rows of
	// Hidden() values (row-major [T, H]); empty when Final was not requested.
	Final []float32
	// Features[c] is the target's residual stream (before the final norm) at
	// the c-th feature layer the method reads (loop.Columns.FeatureLayers:
	// EAGLE-3's low, mid and high layers; one per DFlash target layer), [T, H]
	// each. When Features was not requested its entries are empty.
	Features [][]float32
}

// Dataset is a random-access collection of samples.
type Dataset interface {
	// NumSamples returns the number of samples.
	NumSamples() int
	// Hidden returns the width H of the hidden states.
	Hidden() int
	// Sample fills dst with sample i: tokens, loss mask and the state fields in
	// what, each resliced to length 0 when not asked for. It reuses dst's
	// slices when they have room and never makes two of them share memory.
	// Implementations keep no per-call state, so concurrent calls with
	// different dst are safe. A field the dataset does not hold is an error.
	Sample(i int, dst *Sample, what Fields) error
}

// Memory is a Dataset held in memory, for tests and small runs. Final and
// Features of its samples may be nil when no caller asks for them.
type Memory struct {
	// H is the hidden width of the states.
	H int
	// Samples are the samples, in order.
	Samples []Sample
}

// NumSamples returns len(m.Samples).
func (m *Memory) NumSamples() int { return len(m.Samples) }

// Hidden returns m.H.
func (m *Memory) Hidden() int { return m.H }

// Sample copies sample i into dst.
func (m *Memory) Sample(i int, dst *Sample, what Fields) error {
	if i < 0 || i >= len(m.Samples) {
		return fmt.Errorf("dataset: sample %d out of range [0,%d)", i, len(m.Samples))
	}
	s := &m.Samples[i]
	if len(s.LossMask) != len(s.Tokens) {
		return fmt.Errorf("dataset: sample %d has %d tokens but %d loss-mask entries", i, len(s.Tokens), len(s.LossMask))
	}
	dst.Tokens = append(dst.Tokens[:0], s.Tokens...)
	dst.LossMask = append(dst.LossMask[:0], s.LossMask...)
	want := len(s.Tokens) * m.H
	dst.Final = dst.Final[:0]
	if what.Has(Final) {
		if len(s.Final) != want {
			return fmt.Errorf("dataset: sample %d has %d final-state values, want %d tokens x hidden %d", i, len(s.Final), len(s.Tokens), m.H)
		}
		dst.Final = append(dst.Final, s.Final...)
	}
	if !what.Has(Features) {
		dst.ClearFeatures()
		return nil
	}
	if len(s.Features) == 0 {
		return fmt.Errorf("dataset: sample %d holds no feature layer, and features were requested", i)
	}
	dst.ResizeFeatures(len(s.Features))
	for c := range dst.Features {
		if len(s.Features[c]) != want {
			return fmt.Errorf("dataset: sample %d has %d values of feature layer %d, want %d tokens x hidden %d", i, len(s.Features[c]), c, len(s.Tokens), m.H)
		}
		dst.Features[c] = append(dst.Features[c][:0], s.Features[c]...)
	}
	return nil
}

// ResizeFeatures makes s.Features n entries long, keeping the buffers it
// had (a reader fills them in place), each resliced to length 0.
func (s *Sample) ResizeFeatures(n int) {
	if cap(s.Features) < n {
		s.Features = append(s.Features[:cap(s.Features)], make([][]float32, n-cap(s.Features))...)
	}
	s.Features = s.Features[:n]
	s.ClearFeatures()
}

// ClearFeatures reslices every feature buffer to length 0, keeping them.
func (s *Sample) ClearFeatures() {
	for c := range s.Features {
		s.Features[c] = s.Features[c][:0]
	}
}

// Check validates one filled sample: the loss mask's length, the requested
// state fields' lengths against the hidden width h, and every token id against
// the vocabulary size. Trainers call it on every sample they read.
func Check(i int, s *Sample, what Fields, h, vocab int) error {
	T := len(s.Tokens)
	if len(s.LossMask) != T {
		return fmt.Errorf("dataset: sample %d has %d tokens but %d loss-mask entries", i, T, len(s.LossMask))
	}
	if what.Has(Final) && len(s.Final) != T*h {
		return fmt.Errorf("dataset: sample %d has %d final-state values, want %d tokens x hidden %d", i, len(s.Final), T, h)
	}
	if what.Has(Features) {
		for c, f := range s.Features {
			if len(f) != T*h {
				return fmt.Errorf("dataset: sample %d has %d values of feature layer %d, want %d tokens x hidden %d", i, len(f), c, T, h)
			}
		}
	}
	for t, id := range s.Tokens {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("dataset: sample %d token %d has id %d outside the vocabulary [0,%d)", i, t, id, vocab)
		}
	}
	return nil
}
