package safetensors

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"

	"github.com/x448/float16"
)

// halfValue computes the value of binary16 (expBits 5, bias 15, 10 mantissa bits) or
// bfloat16 (8, 127, 7) bits from the definition, in float64.
func halfValue(h uint16, expBits, bias, mantBits uint) float64 {
	sign := 1.0
	if h>>15 != 0 {
		sign = -1
	}
	exp := int(h>>mantBits) & (1<<expBits - 1)
	mant := float64(h & (1<<mantBits - 1))
	switch {
	case exp == 1<<expBits-1:
		if mant != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case exp == 0:
		return sign * math.Ldexp(mant, 1-int(bias)-int(mantBits))
	}
	return sign * math.Ldexp(1+mant/float64(uint(1)<<mantBits), exp-int(bias))
}

func TestDecodeHalfExhaustive(t *testing.T) {
	src := make([]byte, 2*65536)
	for i := 0; i < 65536; i++ {
		binary.LittleEndian.PutUint16(src[2*i:], uint16(i))
	}
	f16 := make([]float32, 65536)
	bf := make([]float32, 65536)
	DecodeF16(f16, src)
	DecodeBF16(bf, src)
	// The same values from an odd address take the byte-by-byte path.
	odd := make([]byte, len(src)+1)[1:]
	copy(odd, src)
	f16b := make([]float32, 65536)
	bfb := make([]float32, 65536)
	DecodeF16(f16b, odd)
	DecodeBF16(bfb, odd)
	for i := range f16 {
		if math.Float32bits(f16[i]) != math.Float32bits(f16b[i]) || math.Float32bits(bf[i]) != math.Float32bits(bfb[i]) {
			t.Fatalf("%#04x: aligned and unaligned decoding differ", i)
		}
	}
	for i := 0; i < 65536; i++ {
		h := uint16(i)
		for _, c := range []struct {
			name string
			got  float32
			want float64
		}{{"f16", f16[i], halfValue(h, 5, 15, 10)}, {"bf16", bf[i], halfValue(h, 8, 127, 7)}} {
			if math.IsNaN(c.want) {
				if !math.IsNaN(float64(c.got)) {
					t.Fatalf("%s %#04x: got %v, want NaN", c.name, h, c.got)
				}
				continue
			}
			if float64(c.got) != c.want || math.Signbit(float64(c.got)) != math.Signbit(c.want) {
				t.Fatalf("%s %#04x: got %v, want %v", c.name, h, c.got, c.want)
			}
		}
		// The f16 bits, NaN payloads included, must equal the x448 reference.
		if got, want := math.Float32bits(f16[i]), math.Float32bits(float16.Frombits(h).Float32()); got != want {
			t.Fatalf("f16 %#04x: bits %#08x, x448 %#08x", h, got, want)
		}
	}
}

// refBF16 rounds x to bfloat16 by comparing distances in float64, ties to even.
func refBF16(x float32) uint16 {
	b := math.Float32bits(x)
	lo := uint16(b >> 16)
	if b&0xffff == 0 {
		return lo
	}
	hi := lo + 1
	v := func(h uint16) float64 {
		if h&0x7fff == 0x7f80 { // one past the largest finite: 2^128 for rounding purposes
			return math.Copysign(math.Ldexp(1, 128), float64(x))
		}
		return halfValue(h, 8, 127, 7)
	}
	dl, dh := math.Abs(float64(x)-v(lo)), math.Abs(float64(x)-v(hi))
	if dl < dh || (dl == dh && lo&1 == 0) {
		return lo
	}
	return hi
}

func TestBF16RoundToNearestEven(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	check := func(x float32) {
		t.Helper()
		if got, want := BF16Bits(x), refBF16(x); got != want {
			t.Fatalf("BF16Bits(%v = %#08x) = %#04x, want %#04x", x, math.Float32bits(x), got, want)
		}
	}
	for i := 0; i < 200000; i++ {
		b := r.Uint32()
		if b&0x7f800000 == 0x7f800000 {
			continue // inf/NaN checked below
		}
		check(math.Float32frombits(b))
		check(math.Float32frombits(b&0xffff0000 | 0x8000)) // exact ties
	}
	for _, b := range []uint32{0, 0x80000000, 0x3f808000, 0x3f818000, 0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x00008000, 0x00018000, 0x7f800000} {
		check(math.Float32frombits(b))
	}
	for _, nan := range []uint32{0x7f800001, 0xff800001, 0x7fc00000, 0x7fffffff} {
		got := BF16Bits(math.Float32frombits(nan))
		if got&0x7f80 != 0x7f80 || got&0x7f == 0 || got>>15 != uint16(nan>>31) {
			t.Fatalf("NaN %#08x became %#04x", nan, got)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	x := make([]float32, 1000)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	b := make([]byte, 2*len(x))
	y := make([]float32, len(x))
	EncodeF16(b, x)
	DecodeF16(y, b)
	for i := range x {
		if want := float16.Fromfloat32(x[i]).Float32(); y[i] != want {
			t.Fatalf("f16 %d: %v -> %v, want %v", i, x[i], y[i], want)
		}
	}
	EncodeBF16(b, x)
	DecodeBF16(y, b)
	for i := range x {
		if want := math.Float32frombits(uint32(refBF16(x[i])) << 16); y[i] != want {
			t.Fatalf("bf16 %d: %v -> %v, want %v", i, x[i], y[i], want)
		}
	}
}

// benchHalf returns n weight-like values (normal, std 0.02) encoded by enc.
func benchHalf(n int, enc func([]byte, []float32)) []byte {
	r := rand.New(rand.NewSource(3))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(0.02 * r.NormFloat64())
	}
	b := make([]byte, 2*n)
	enc(b, x)
	return b
}

func BenchmarkDecodeBF16(b *testing.B) {
	const n = 1 << 22
	src := benchHalf(n, EncodeBF16)
	dst := make([]float32, n)
	b.SetBytes(2 * n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		DecodeBF16(dst, src)
	}
}

func BenchmarkDecodeF16(b *testing.B) {
	const n = 1 << 22
	src := benchHalf(n, EncodeF16)
	dst := make([]float32, n)
	b.SetBytes(2 * n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		DecodeF16(dst, src)
	}
}
