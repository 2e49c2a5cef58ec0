package tensor_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestHalfConversionsShortDestination checks that a destination shorter
// than the source panics, naming the conversion.
func TestHalfConversionsShortDestination(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || fmt.Sprint(r) != "tensor: BF16ToF32: a destination of 2 values for 3" {
			t.Fatalf("recovered %v", r)
		}
	}()
	tensor.BF16ToF32(make([]float32, 2), make([]uint16, 3))
}

// TestHalfRoundTrip widens every one of the 65536 patterns of each format
// and narrows it back, through the slice conversions (long enough for the
// vector bodies and a scalar tail) and the scalar ones: a pattern that is
// not a NaN comes back as itself, a NaN with its quiet bit set (the rule in
// half.go), and the widened value is a NaN exactly when the pattern is one.
func TestHalfRoundTrip(t *testing.T) {
	for _, f := range []struct {
		name     string
		quiet    uint16 // the format's quiet bit
		isNaN    func(uint16) bool
		widen    func([]float32, []uint16)
		narrow   func([]uint16, []float32)
		widen1   func(uint16) float32
		narrow1  func(float32) uint16
		expShift uint
	}{
		{"bf16", 0x0040, func(h uint16) bool { return h&0x7f80 == 0x7f80 && h&0x7f != 0 },
			tensor.BF16ToF32, tensor.F32ToBF16, tensor.BF16Float, tensor.BF16Bits, 7},
		{"f16", 0x0200, func(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 },
			tensor.F16ToF32, tensor.F32ToF16, tensor.F16Float, tensor.F16Bits, 10},
	} {
		src := make([]uint16, 1<<16+3) // 3 more: the last values go through the scalar tail
		for i := range src {
			src[i] = uint16(i)
		}
		wide := make([]float32, len(src))
		back := make([]uint16, len(src))
		f.widen(wide, src)
		f.narrow(back, wide)
		for i, h := range src {
			want := h
			if f.isNaN(h) {
				want |= f.quiet
			}
			if back[i] != want || f.narrow1(f.widen1(h)) != want {
				t.Fatalf("%s %#04x: round trip gives %#04x (scalar %#04x), want %#04x", f.name, h, back[i], f.narrow1(f.widen1(h)), want)
			}
			if w := f.widen1(h); math.Float32bits(w) != math.Float32bits(wide[i]) {
				t.Fatalf("%s %#04x: scalar widening %#08x, slice %#08x", f.name, h, math.Float32bits(w), math.Float32bits(wide[i]))
			}
			if math.IsNaN(float64(wide[i])) != f.isNaN(h) {
				t.Fatalf("%s %#04x widened to %v", f.name, h, wide[i])
			}
		}
	}
}

// TestHalfConversionClasses checks every class of the rule in half.go on
// chosen bit patterns, through the slice conversions (67 copies: the vector
// bodies and a scalar tail) and the scalar ones: signed zeros, infinities,
// NaNs (quiet, signalling, payloads in the kept and the dropped bits,
// negative), the largest finite values and the overflow boundary, ties to
// even in the normal and the subnormal range, and subnormals both ways.
func TestHalfConversionClasses(t *testing.T) {
	narrow := []struct {
		what     string
		f32      uint32
		bf16, f6 uint16
	}{
		{"+0", 0x00000000, 0x0000, 0x0000},
		{"-0", 0x80000000, 0x8000, 0x8000},
		{"+Inf", 0x7f800000, 0x7f80, 0x7c00},
		{"-Inf", 0xff800000, 0xff80, 0xfc00},
		{"quiet NaN", 0x7fc00000, 0x7fc0, 0x7e00},
		{"signalling NaN, payload in dropped bits only", 0x7f800001, 0x7fc0, 0x7e00},
		{"signalling NaN, payload in kept bits", 0x7fa00000, 0x7fe0, 0x7f00},
		{"negative NaN with payload", 0xffc12345, 0xffc1, 0xfe09},
		{"1", 0x3f800000, 0x3f80, 0x3c00},
		{"largest finite bf16", 0x7f7f0000, 0x7f7f, 0x7c00},
		{"bf16 overflow boundary less one ulp", 0x7f7f7fff, 0x7f7f, 0x7c00},
		{"bf16 overflow boundary (a tie, to even: infinity)", 0x7f7f8000, 0x7f80, 0x7c00},
		{"-65504, largest finite f16", 0xc77fe000, 0xc780, 0xfbff},
		{"f16 overflow boundary less one ulp", 0x477fefff, 0x4780, 0x7bff},
		{"65520, f16 overflow boundary", 0x477ff000, 0x4780, 0x7c00},
		{"1+2^-8: bf16 tie to even (down)", 0x3f808000, 0x3f80, 0x3c04},
		{"1+3·2^-8: bf16 tie to even (up)", 0x3f818000, 0x3f82, 0x3c0c},
		{"1+2^-11: f16 tie to even (down)", 0x3f801000, 0x3f80, 0x3c00},
		{"1+3·2^-11: f16 tie to even (up)", 0x3f803000, 0x3f80, 0x3c02},
		{"smallest f32 subnormal", 0x00000001, 0x0000, 0x0000},
		{"-smallest f32 subnormal", 0x80000001, 0x8000, 0x8000},
		{"f32 subnormal, a bf16 tie to even (down)", 0x00008000, 0x0000, 0x0000},
		{"f32 subnormal, a bf16 tie to even (up)", 0x00018000, 0x0002, 0x0000},
		{"bf16 subnormal, exact", 0x00010000, 0x0001, 0x0000},
		{"2^-24, smallest f16 subnormal", 0x33800000, 0x3380, 0x0001},
		{"-2^-24", 0xb3800000, 0xb380, 0x8001},
		{"2^-25: f16 subnormal tie to even (zero)", 0x33000000, 0x3300, 0x0000},
		{"3·2^-25: f16 subnormal tie to even (up)", 0x33c00000, 0x33c0, 0x0002},
		{"2^-14-2^-25: tie between the largest f16 subnormal and 2^-14", 0x387fe000, 0x3880, 0x0400},
		{"just below 2^-25: f16 rounds to zero", 0x32ffffff, 0x3300, 0x0000},
	}
	const n = 67
	src := make([]float32, n)
	b16, h16 := make([]uint16, n), make([]uint16, n)
	for _, c := range narrow {
		v := math.Float32frombits(c.f32)
		for i := range src {
			src[i] = v
		}
		tensor.F32ToBF16(b16, src)
		tensor.F32ToF16(h16, src)
		for i := range src {
			if b16[i] != c.bf16 || h16[i] != c.f6 {
				t.Fatalf("%s (%#08x), value %d of %d: bf16 %#04x f16 %#04x, want %#04x and %#04x", c.what, c.f32, i, n, b16[i], h16[i], c.bf16, c.f6)
			}
		}
		if b, h := tensor.BF16Bits(v), tensor.F16Bits(v); b != c.bf16 || h != c.f6 {
			t.Fatalf("%s (%#08x), scalar: bf16 %#04x f16 %#04x, want %#04x and %#04x", c.what, c.f32, b, h, c.bf16, c.f6)
		}
	}

	widen := []struct {
		what string
		h    uint16
		bf16 uint32 // h read as bfloat16
		f16  uint32 // h read as binary16
	}{
		{"+0", 0x0000, 0x00000000, 0x00000000},
		{"-0", 0x8000, 0x80000000, 0x80000000},
		{"smallest subnormal", 0x0001, 0x00010000, 0x33800000},
		{"largest subnormal", 0x03ff, 0x03ff0000, 0x387fc000},
		{"-largest f16 finite", 0xfbff, 0xfbff0000, 0xc77fe000},
		{"f16 +Inf", 0x7c00, 0x7c000000, 0x7f800000},
		{"f16 -Inf", 0xfc00, 0xfc000000, 0xff800000},
		{"f16 signalling NaN: made quiet", 0x7c01, 0x7c010000, 0x7fc02000},
		{"f16 negative quiet NaN with payload", 0xfe3f, 0xfe3f0000, 0xffc7e000},
		{"bf16 +Inf", 0x7f80, 0x7f800000, 0x7ff00000},
		{"bf16 -Inf", 0xff80, 0xff800000, 0xfff00000},
		{"bf16 signalling NaN: bits kept", 0x7f81, 0x7f810000, 0x7ff02000},
		{"bf16 negative quiet NaN with payload", 0xffc5, 0xffc50000, 0xfff8a000},
	}
	h := make([]uint16, n)
	wb, wf := make([]float32, n), make([]float32, n)
	for _, c := range widen {
		for i := range h {
			h[i] = c.h
		}
		tensor.BF16ToF32(wb, h)
		tensor.F16ToF32(wf, h)
		for i := range h {
			if b, f := math.Float32bits(wb[i]), math.Float32bits(wf[i]); b != c.bf16 || f != c.f16 {
				t.Fatalf("%s (%#04x), value %d of %d: as bf16 %#08x, as f16 %#08x, want %#08x and %#08x", c.what, c.h, i, n, b, f, c.bf16, c.f16)
			}
		}
		if b, f := math.Float32bits(tensor.BF16Float(c.h)), math.Float32bits(tensor.F16Float(c.h)); b != c.bf16 || f != c.f16 {
			t.Fatalf("%s (%#04x), scalar: as bf16 %#08x, as f16 %#08x, want %#08x and %#08x", c.what, c.h, b, f, c.bf16, c.f16)
		}
	}
}
