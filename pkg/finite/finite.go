// Package finite finds NaN and infinite values in stored IEEE 754 floats
// without decoding them: a value is not finite exactly when its exponent bits
// are all ones, so the scans test raw little-endian bytes, eight at a time.
package finite

import "encoding/binary"

// Lane masks for testing four float16 or two float32 values held in one
// uint64: adding one unit of the lowest exponent bit to a lane whose exponent
// bits are all ones (and nothing else kept) carries into the lane's sign
// bit, and into it only: an exponent below all ones stays below it, and no
// carry crosses into the next lane.
const (
	expMask16 = 0x7c007c007c007c00
	expUnit16 = 0x0400040004000400
	signs16   = 0x8000800080008000
	expMaskBF = 0x7f807f807f807f80
	expUnitBF = 0x0080008000800080
	expMask32 = 0x7f8000007f800000
	expUnit32 = 0x0080000000800000
	signs32   = 0x8000000080000000
)

// blockBytes is how much one step of the wide loop tests.
const blockBytes = 32

// F16 returns the index of the first float16 value in b (little-endian,
// len(b)/2 values; a trailing odd byte is ignored) that is NaN or infinite,
// or -1 when all are finite.
func F16(b []byte) int { return first16(b, expMask16, expUnit16, 0x7c00) }

// BF16 is F16 for bfloat16 values (8 exponent bits, as float32's).
func BF16(b []byte) int { return first16(b, expMaskBF, expUnitBF, 0x7f80) }

// first16 scans 2-byte floats whose exponent bits are mask (one lane of
// mask64; unit64 is one unit of the lowest exponent bit in each lane).
func first16(b []byte, mask64, unit64 uint64, mask uint16) int {
	n := len(b) &^ 1
	i := 0
	for ; i+blockBytes <= n; i += blockBytes {
		c := b[i : i+blockBytes : i+blockBytes]
		x := (binary.LittleEndian.Uint64(c[0:])&mask64 + unit64) |
			(binary.LittleEndian.Uint64(c[8:])&mask64 + unit64) |
			(binary.LittleEndian.Uint64(c[16:])&mask64 + unit64) |
			(binary.LittleEndian.Uint64(c[24:])&mask64 + unit64)
		if x&signs16 != 0 {
			break // one of this block's values: the loop below finds it
		}
	}
	for ; i+2 <= n; i += 2 {
		if binary.LittleEndian.Uint16(b[i:])&mask == mask {
			return i / 2
		}
	}
	return -1
}

// F32 returns the index of the first float32 value in b (little-endian,
// len(b)/4 values; trailing bytes are ignored) that is NaN or infinite, or -1
// when all are finite.
func F32(b []byte) int {
	n := len(b) &^ 3
	i := 0
	for ; i+blockBytes <= n; i += blockBytes {
		c := b[i : i+blockBytes : i+blockBytes]
		x := (binary.LittleEndian.Uint64(c[0:])&expMask32 + expUnit32) |
			(binary.LittleEndian.Uint64(c[8:])&expMask32 + expUnit32) |
			(binary.LittleEndian.Uint64(c[16:])&expMask32 + expUnit32) |
			(binary.LittleEndian.Uint64(c[24:])&expMask32 + expUnit32)
		if x&signs32 != 0 {
			break
		}
	}
	for ; i+4 <= n; i += 4 {
		if binary.LittleEndian.Uint32(b[i:])&0x7f800000 == 0x7f800000 {
			return i / 4
		}
	}
	return -1
}

// Kind16 names a non-finite float16 value by its bits: "NaN", "+Inf" or
// "-Inf" ("" when the value is finite).
func Kind16(h uint16) string {
	return kind(h&0x7c00 == 0x7c00, h&0x3ff != 0, h&0x8000 != 0)
}

// Kind32 names a non-finite float32 value by its bits: "NaN", "+Inf" or
// "-Inf" ("" when the value is finite).
func Kind32(u uint32) string {
	return kind(u&0x7f800000 == 0x7f800000, u&0x7fffff != 0, u&0x80000000 != 0)
}

func kind(special, nan, neg bool) string {
	switch {
	case !special:
		return ""
	case nan:
		return "NaN"
	case neg:
		return "-Inf"
	}
	return "+Inf"
}
