package capture

import (
	"encoding/binary"
	"math"
	"math/rand"
	"os"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/x448/float16"
)

// refRoundF16 rounds v to the nearest IEEE binary16 value, ties to even, computed in float64
// from the definition (spacing 2^(e-10) in binade [2^e, 2^(e+1)), 2^-24 below 2^-14). It is
// written independently of any float16 library. ok is false when the result is not finite.
func refRoundF16(v float32) (r float64, ok bool) {
	x := float64(v)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, false
	}
	if x == 0 {
		return x, true
	}
	a := math.Abs(x)
	var spacing float64
	if a < math.Ldexp(1, -14) {
		spacing = math.Ldexp(1, -24)
	} else {
		_, e := math.Frexp(a) // a = f * 2^e, f in [0.5, 1): binade [2^(e-1), 2^e)
		spacing = math.Ldexp(1, e-1-10)
	}
	r = math.RoundToEven(x/spacing) * spacing // x/spacing is exact: a power-of-two scale
	if math.Abs(r) > 65504 {
		return 0, false
	}
	if r == 0 {
		r = math.Copysign(0, x)
	}
	return r, true
}

// f16Cases returns random float32 values spread over the whole float16 range, subnormals,
// exact ties and the overflow boundary.
func f16Cases(n int, seed int64) []float32 {
	rng := rand.New(rand.NewSource(seed))
	out := make([]float32, 0, n+64)
	special := []float32{0, float32(math.Copysign(0, -1)), 65504, -65504, 65519.996, 65520, -65520, 65536,
		float32(math.Ldexp(1, -24)), float32(math.Ldexp(1, -25)), float32(math.Ldexp(1.5, -25)), float32(math.Ldexp(1, -26)),
		float32(math.Ldexp(1, -14)), float32(math.Ldexp(1023, -24)), float32(math.Ldexp(2047, -25)),
		1 + float32(math.Ldexp(1, -11)), 1 + float32(math.Ldexp(3, -11)), 2049, 2051, -2049, 4097,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, math.SmallestNonzeroFloat32}
	out = append(out, special...)
	for len(out) < n {
		switch rng.Intn(4) {
		case 0: // any float32 bit pattern in a wide exponent window
			e := rng.Intn(60) - 34
			out = append(out, float32(math.Ldexp(rng.Float64()+0.5, e))*sign(rng))
		case 1: // subnormal float16 range
			out = append(out, float32(rng.Float64()*math.Ldexp(1, -14))*sign(rng))
		case 2: // exact ties: a float16 value plus half its spacing
			h := float16.Frombits(uint16(rng.Intn(0x7bff)))
			v := h.Float32()
			next := float16.Frombits(h.Bits() + 1).Float32()
			out = append(out, (v+next)/2*sign(rng))
		default: // typical activations
			out = append(out, float32(rng.NormFloat64()*math.Pow(10, float64(rng.Intn(5)-1))))
		}
	}
	return out
}

func sign(r *rand.Rand) float32 {
	if r.Intn(2) == 0 {
		return -1
	}
	return 1
}

func TestF16RoundingMatchesDefinition(t *testing.T) {
	vals := f16Cases(200000, 1)
	dst := make([]byte, 2*len(vals))
	encodeF16(dst, vals)
	back := make([]float32, len(vals))
	decodeF16(back, dst)
	var subnormals, ties, bad int
	for i, v := range vals {
		want, ok := refRoundF16(v)
		h := uint16(dst[2*i]) | uint16(dst[2*i+1])<<8
		if !ok {
			if h&0x7c00 != 0x7c00 {
				t.Fatalf("value %g (bits %08x): expected an unstorable (inf/NaN) result, got bits %04x", v, math.Float32bits(v), h)
			}
			bad++
			continue
		}
		if float64(back[i]) != want || math.Signbit(float64(back[i])) != math.Signbit(want) {
			t.Fatalf("value %g (bits %08x): stored %g (bits %04x), round-to-nearest-even gives %g", v, math.Float32bits(v), back[i], h, want)
		}
		if xh := float16.Fromfloat32(v).Bits(); xh != h {
			t.Fatalf("value %g: stored bits %04x, x448/float16 gives %04x", v, h, xh)
		}
		if h&0x7c00 == 0 && h&0x3ff != 0 {
			subnormals++
		}
		if h2 := float16.Fromfloat32(v); float64(h2.Float32()) != float64(v) {
			// not exactly representable: count the exact midpoints between two float16 values
			lo := float16.Frombits(h2.Bits() - 1).Float32()
			hi := float16.Frombits(h2.Bits() + 1).Float32()
			if (lo+h2.Float32())/2 == v || (hi+h2.Float32())/2 == v {
				ties++
			}
		}
	}
	if subnormals < 1000 || ties < 1000 || bad < 5 {
		t.Fatalf("test coverage too thin: %d subnormal results, %d exact ties, %d unstorable values", subnormals, ties, bad)
	}
}

func TestEncodeStatesFlagsUnstorable(t *testing.T) {
	for _, dt := range []DType{Float16, Float32} {
		for _, v := range []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
			src := make([]float32, 100000)
			src[77777] = v
			dst := make([]byte, len(src)*dt.Size())
			if encodeStates(dst, src, dt) {
				t.Errorf("%s: %g not flagged", dt, v)
			}
			if i := firstUnstorable(src, dt); i != 77777 {
				t.Errorf("%s: firstUnstorable = %d, want 77777", dt, i)
			}
		}
	}
	src := []float32{65520}
	if encodeStates(make([]byte, 2), src, Float16) {
		t.Error("65520 rounds to inf in float16 but was not flagged")
	}
	if !encodeStates(make([]byte, 4), src, Float32) {
		t.Error("65520 is a fine float32 but was flagged")
	}
	if !encodeStates(make([]byte, 2), []float32{65519.996}, Float16) {
		t.Error("65519.996 rounds to 65504 but was flagged")
	}
}

// TestF32ToF16MatchesX448 compares the conversion with github.com/x448/float16 (itself
// checked by its author on all 2^32 inputs) over float32 bit patterns: every 61st pattern,
// plus every pattern whose mantissa's high bits are zero or one (all rounding cases of every
// exponent), or all 2^32 patterns when DRAFTER_EXHAUSTIVE_F16=1.
func TestF32ToF16MatchesX448(t *testing.T) {
	src := make([]float32, 0, 1<<14)
	dst := make([]byte, 2<<14)
	flush := func() { // through encodeF16 and tensor.F16Bits
		encodeF16(dst, src)
		for i, v := range src {
			u := math.Float32bits(v)
			want := float16.Fromfloat32(v).Bits()
			for _, got := range []uint16{binary.LittleEndian.Uint16(dst[2*i:]), tensor.F16Bits(v)} {
				if got == want {
					continue
				}
				if math.IsNaN(float64(v)) && got&0x7c00 == 0x7c00 && got&0x3ff != 0 {
					continue // any NaN is fine: NaN is rejected before storage anyway
				}
				t.Fatalf("float32 bits %08x (%g): got float16 bits %04x, x448/float16 gives %04x", u, v, got, want)
			}
		}
		src = src[:0]
	}
	check := func(u uint32) {
		src = append(src, math.Float32frombits(u))
		if len(src) == cap(src) {
			flush()
		}
	}
	stride := uint64(61)
	if os.Getenv("DRAFTER_EXHAUSTIVE_F16") == "1" {
		stride = 1
	} else if testing.Short() {
		stride = 997
	}
	for u := uint64(0); u < 1<<32; u += stride {
		check(uint32(u))
	}
	// Every exponent and sign with all 2^14 combinations of the low mantissa bits, and the
	// high mantissa bits all zero or all one.
	for se := uint32(0); se < 512; se++ {
		for low := uint32(0); low < 1<<14; low++ {
			check(se<<23 | low)
			check(se<<23 | 0x7fc000 | low)
		}
	}
	flush()
}

func TestF16ToF32AllBitPatterns(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got, want := tensor.F16Float(uint16(h)), float16.Frombits(uint16(h)).Float32()
		nan := math.IsNaN(float64(got)) && math.IsNaN(float64(want)) // payload quieting may differ
		if math.Float32bits(got) != math.Float32bits(want) && !nan {
			t.Fatalf("float16 bits %04x: got %g (%08x), x448/float16 gives %g (%08x)", h, got, math.Float32bits(got), want, math.Float32bits(want))
		}
		if h&0x7c00 != 0x7c00 && tensor.F16Bits(got) != uint16(h) {
			t.Fatalf("float16 bits %04x do not survive a round trip through float32", h)
		}
	}
}
