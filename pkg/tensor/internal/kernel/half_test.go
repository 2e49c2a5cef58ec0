package kernel

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// refToF32Bits decodes a 16-bit float with mant mantissa bits (and 15-mant
// exponent bits) from its fields, in float64, independently of the
// conversions under test, and returns the float32 bits; a NaN gives nan(h),
// the bits the conversions must produce. refBF16ToF32Bits and
// refF16ToF32Bits are the two formats: a bfloat16 NaN widened as it is, a
// binary16 NaN's payload kept and made quiet.
func refToF32Bits(h uint16, mant int, nan func(uint16) uint32) uint32 {
	emax := 1<<(15-mant) - 1
	bias := emax >> 1
	sign, e, m := float64(1), int(h>>mant)&emax, float64(int(h)&(1<<mant-1))/float64(int(1)<<mant)
	if h&0x8000 != 0 {
		sign = -1
	}
	switch {
	case e == emax && m != 0:
		return nan(h)
	case e == emax:
		return math.Float32bits(float32(math.Inf(int(sign))))
	case e == 0:
		return math.Float32bits(float32(sign * math.Ldexp(m, 1-bias)))
	}
	return math.Float32bits(float32(sign * math.Ldexp(1+m, e-bias)))
}

func refBF16ToF32Bits(h uint16) uint32 {
	return refToF32Bits(h, 7, func(h uint16) uint32 { return uint32(h) << 16 })
}

func refF16ToF32Bits(h uint16) uint32 {
	return refToF32Bits(h, 10, func(h uint16) uint32 { return uint32(h&0x8000)<<16 | 0x7fc00000 | uint32(h&0x3ff)<<13 })
}

// refFromF32 rounds a float32 to the nearest 16-bit float with mant
// mantissa bits (and 15-mant exponent bits), ties to even, in float64
// arithmetic from the format's definition: the nearest multiple of the
// quantum at the value's exponent (never below the least normal one), past
// the largest finite value an infinity; a NaN gives nan(bits of f).
// refF32ToBF16 and refF32ToF16 are the two formats.
func refFromF32(f float32, mant int, nan func(uint32) uint16) uint16 {
	b := math.Float32bits(f)
	emax := 1<<(15-mant) - 1
	bias := emax >> 1
	sign, inf := uint16(b>>16)&0x8000, uint16(emax<<mant)
	a := math.Abs(float64(f))
	switch {
	case f != f:
		return nan(b)
	case math.IsInf(a, 0):
		return sign | inf
	case a == 0:
		return sign
	}
	e := max(math.Ilogb(a), 1-bias)
	r := math.RoundToEven(a/math.Ldexp(1, e-mant)) * math.Ldexp(1, e-mant)
	switch {
	case r >= math.Ldexp(1, emax-bias):
		return sign | inf
	case r < math.Ldexp(1, 1-bias):
		return sign | uint16(r/math.Ldexp(1, 1-bias-mant))
	}
	e = math.Ilogb(r)
	return sign | uint16(e+bias)<<mant | uint16(r/math.Ldexp(1, e-mant)-math.Ldexp(1, mant))
}

func refF32ToBF16(f float32) uint16 {
	return refFromF32(f, 7, func(b uint32) uint16 { return uint16(b>>16) | 0x40 })
}

func refF32ToF16(f float32) uint16 {
	return refFromF32(f, 10, func(b uint32) uint16 { return uint16(b>>16)&0x8000 | 0x7e00 | uint16(b>>13)&0x3ff })
}

// TestHalfToF32AllValues converts every 16-bit pattern, in slices whose
// lengths and offsets leave vector tails, and compares the bits with the
// definitions.
func TestHalfToF32AllValues(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	dst := make([]float32, len(src))
	for _, c := range []struct {
		name string
		conv func([]float32, []uint16)
		ref  func(uint16) uint32
	}{{"BF16ToF32", BF16ToF32, refBF16ToF32Bits}, {"F16ToF32", F16ToF32, refF16ToF32Bits}} {
		for _, span := range [][2]int{{0, 1 << 16}, {3, 1<<16 - 5}, {7, 22}, {1, 1}} {
			clear(dst)
			s, d := src[span[0]:span[0]+span[1]], dst[span[0]:span[0]+span[1]]
			c.conv(d, s)
			for i, h := range s {
				if got, want := math.Float32bits(d[i]), c.ref(h); got != want {
					t.Fatalf("%s(%#04x) = %#08x, want %#08x", c.name, h, got, want)
				}
			}
		}
	}
}

// f32Samples returns float32 bit patterns covering every exponent and the
// rounding boundaries of both 16-bit formats: each of the 2^16 upper halves
// with the low halves around a bfloat16 tie, each of the 2^19 upper parts of
// a binary16 mantissa with the low 13 bits around a tie, and a stride over
// all 2^32 patterns.
func f32Samples() []uint32 {
	var s []uint32
	for hi := uint32(0); hi < 1<<16; hi++ {
		for _, lo := range []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xffff} {
			s = append(s, hi<<16|lo)
		}
	}
	for hi := uint32(0); hi < 1<<19; hi++ {
		for _, lo := range []uint32{0, 0xfff, 0x1000, 0x1001, 0x1fff} {
			s = append(s, hi<<13|lo)
		}
	}
	for b := uint64(0); b < 1<<32; b += 4093 {
		s = append(s, uint32(b))
	}
	return s
}

// forF32Cases calls check on f32Samples, or with DRAFTER_EXHAUSTIVE_HALF=1
// on every float32 bit pattern, in chunks of 2^24.
func forF32Cases(check func(bits []uint32)) {
	if os.Getenv("DRAFTER_EXHAUSTIVE_HALF") != "1" {
		check(f32Samples())
		return
	}
	const chunk = 1 << 24
	bits := make([]uint32, chunk)
	for b0 := uint64(0); b0 < 1<<32; b0 += chunk {
		for i := range bits {
			bits[i] = uint32(b0) + uint32(i)
		}
		check(bits)
	}
}

// TestF32ToHalf rounds f32Samples (every float32 with
// DRAFTER_EXHAUSTIVE_HALF=1, which passes) to both formats, with the
// exported conversions and the one-value ones, and compares the bits with
// the definitions.
func TestF32ToHalf(t *testing.T) {
	forF32Cases(func(bits []uint32) {
		src := make([]float32, len(bits))
		for i, b := range bits {
			src[i] = math.Float32frombits(b)
		}
		dst := make([]uint16, len(src))
		for _, c := range []struct {
			name   string
			conv   func([]uint16, []float32)
			scalar func(float32) uint16
			ref    func(float32) uint16
		}{{"F32ToBF16", F32ToBF16, f32ToBF16, refF32ToBF16}, {"F32ToF16", F32ToF16, f32ToF16, refF32ToF16}} {
			// An odd offset and length leave a scalar head and tail.
			c.conv(dst[1:len(dst)-3], src[1:len(src)-3])
			c.conv(dst[:1], src[:1])
			c.conv(dst[len(dst)-3:], src[len(src)-3:])
			for i, f := range src {
				want := c.ref(f)
				if dst[i] != want {
					t.Fatalf("%s(%#08x) = %#04x, want %#04x", c.name, math.Float32bits(f), dst[i], want)
				}
				if got := c.scalar(f); got != want {
					t.Fatalf("the one-value %s(%#08x) = %#04x, want %#04x", c.name, math.Float32bits(f), got, want)
				}
			}
		}
	})
}

// TestHalfScalarsMatchVectors checks the one-value conversions (the Go
// fallback and the vector bodies' tails) against the definitions on the
// same samples, whatever the processor.
func TestHalfScalarsMatchVectors(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		if got, want := math.Float32bits(f16ToF32(uint16(h))), refF16ToF32Bits(uint16(h)); got != want {
			t.Fatalf("f16ToF32(%#04x) = %#08x, want %#08x", h, got, want)
		}
		if got, want := math.Float32bits(bf16ToF32(uint16(h))), refBF16ToF32Bits(uint16(h)); got != want {
			t.Fatalf("bf16ToF32(%#04x) = %#08x, want %#08x", h, got, want)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 1 << 20 {
		b := r.Uint32()
		f := math.Float32frombits(b)
		if got, want := f32ToBF16(f), refF32ToBF16(f); got != want {
			t.Fatalf("f32ToBF16(%#08x) = %#04x, want %#04x", b, got, want)
		}
		if got, want := f32ToF16(f), refF32ToF16(f); got != want {
			t.Fatalf("f32ToF16(%#08x) = %#04x, want %#04x", b, got, want)
		}
	}
}
