package sample

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// rngMagic starts every serialised RNG; the digit is the format version.
const rngMagic = "drafter-rng/1\x00"

// rngDomain separates drafter's sampling streams from any other use of the
// same (seed, stream) pair: it fills the last 16 bytes of the ChaCha8 key.
const rngDomain = "drafter/sample\x00\x00"

// RNG is a reproducible random stream for one sequence. It is ChaCha8 keyed
// with (seed, stream): streams with different keys are independent, so a
// sequence's draws depend only on its own (seed, stream) and on how many
// numbers it has already drawn, never on which other sequences share a batch.
// The distill command uses the sample's global index as the stream.
//
// An RNG is a value that owns its state; it is not safe for concurrent use.
// Its state round-trips through MarshalBinary/UnmarshalBinary, which is how
// distillation and training resume mid-stream.
type RNG struct {
	seed, stream uint64
	c            rand.ChaCha8
}

// NewRNG returns the random stream number stream of the generator seeded with
// seed.
func NewRNG(seed, stream uint64) *RNG {
	r := &RNG{}
	r.Reset(seed, stream)
	return r
}

// Reset rewinds r to the start of stream number stream of seed, reusing r's
// memory.
func (r *RNG) Reset(seed, stream uint64) {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:8], seed)
	binary.LittleEndian.PutUint64(key[8:16], stream)
	copy(key[16:], rngDomain)
	r.seed, r.stream = seed, stream
	r.c.Seed(key)
}

// Seed reports the seed r was created with.
func (r *RNG) Seed() uint64 { return r.seed }

// Stream reports the stream number r was created with.
func (r *RNG) Stream() uint64 { return r.stream }

// Uint64 returns a uniformly distributed 64-bit value.
func (r *RNG) Uint64() uint64 { return r.c.Uint64() }

// Float64 returns a uniformly distributed value in [0, 1) with 53 random bits.
func (r *RNG) Float64() float64 { return float64(r.c.Uint64()>>11) * 0x1p-53 }

// MarshalBinary encodes the seed, the stream and the exact position in the
// stream, so that UnmarshalBinary continues with the very next draw.
func (r *RNG) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, len(rngMagic)+16+64)
	b = append(b, rngMagic...)
	b = binary.LittleEndian.AppendUint64(b, r.seed)
	b = binary.LittleEndian.AppendUint64(b, r.stream)
	b, err := r.c.AppendBinary(b)
	if err != nil {
		return nil, fmt.Errorf("sample: encoding RNG state: %w", err)
	}
	return b, nil
}

// UnmarshalBinary restores a state written by MarshalBinary.
func (r *RNG) UnmarshalBinary(data []byte) error {
	if !bytes.HasPrefix(data, []byte(rngMagic)) {
		return fmt.Errorf("sample: RNG state does not start with %q (not a drafter RNG state, or a newer format)", rngMagic[:len(rngMagic)-1])
	}
	data = data[len(rngMagic):]
	if len(data) < 16 {
		return fmt.Errorf("sample: RNG state truncated: %d bytes after the header, want at least 16", len(data))
	}
	seed := binary.LittleEndian.Uint64(data[0:8])
	stream := binary.LittleEndian.Uint64(data[8:16])
	var c rand.ChaCha8
	if err := c.UnmarshalBinary(data[16:]); err != nil {
		return fmt.Errorf("sample: RNG state of seed %d stream %d: ChaCha8 state: %w", seed, stream, err)
	}
	r.seed, r.stream, r.c = seed, stream, c
	return nil
}
