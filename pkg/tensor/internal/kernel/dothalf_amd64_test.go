//go:build !purego

package kernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"
)

// halfBodies returns the assembly bodies of DotRowsBF16 (f16: of
// DotRowsF16) this processor can run, whichever the exported function picks.
func halfBodies(h Half) map[string]halfDotFunc {
	bodies := map[string]halfDotFunc{}
	add := func(name string, kern halfDotKernel, rt, ct int) {
		bodies[name] = func(_ Half, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
			dotRowsHalfTiles(kern, rt, ct, out, ldo, x, ldx, w, ldw, m, n, k, acc)
		}
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL {
		add("avx512", map[Half]halfDotKernel{BF16: dotBF16x4AVX512, F16: dotF16x4AVX512}[h], 6, 4)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA && (h == BF16 || cpu.X86.HasF16C) {
		add("avx2", map[Half]halfDotKernel{BF16: dotBF16x2AVX2, F16: dotF16x2AVX2}[h], 3, 2)
	}
	return bodies
}

// halfBodiesAll returns the bodies of halfBodies.
func halfBodiesAll(h Half) []halfDotFunc {
	var all []halfDotFunc
	for _, f := range halfBodies(h) {
		all = append(all, f)
	}
	return all
}

// TestDotRowsHalfBodies runs every assembly body the processor has (not
// only the one DotRowsBF16 picks) against the fused multiply-add model of
// the contract, bit for bit, and its rows alone against its batches.
func TestDotRowsHalfBodies(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	for _, h := range []Half{BF16, F16} {
		bodies := halfBodies(h)
		if len(bodies) == 0 {
			t.Skipf("no assembly body for %v here", h)
		}
		for name, f := range bodies {
			for _, s := range halfShapes(r) {
				if s[2] == 0 {
					continue // k = 0 never reaches the assembly
				}
				c := newHalfCase(r, h, s[0], s[1], s[2], s[0]%3 == 1)
				got, want := c.run(f), c.run(dotHalfFMA)
				if i, ok := sameBits(got, want); !ok {
					t.Fatalf("%s %v: out[%d] = %v, the fused multiply-add model gives %v", name, c, i, got[i], want[i])
				}
				c.check(t, name, got)
				// The last row alone.
				i := c.m - 1
				one := append([]float32(nil), c.out0[i*c.ldo:(i+1)*c.ldo]...)
				f(h, one, c.ldo, c.x[i*c.ldx:], c.ldx, c.w, c.ldw, 1, c.n, c.k, c.acc)
				if j, ok := sameBits(one, got[i*c.ldo:(i+1)*c.ldo]); !ok {
					t.Fatalf("%s %v: row %d alone gives out[%d] = %v, in the batch %v", name, c, i, j, one[j], got[i*c.ldo+j])
				}
			}
		}
	}
}

// TestHalfConversionBodies runs every conversion body the processor has
// over all 16-bit patterns and the float32 samples.
func TestHalfConversionBodies(t *testing.T) {
	type body struct {
		name  string
		ok    bool
		width int
	}
	src16 := make([]uint16, 1<<16)
	for i := range src16 {
		src16[i] = uint16(i)
	}
	dst32 := make([]float32, len(src16))
	for _, b := range []struct {
		body
		f   func(*float32, *uint16, int)
		ref func(uint16) uint32
	}{
		{body{"bf16ToF32AVX512", cpu.X86.HasAVX512F, 16}, bf16ToF32AVX512, refBF16ToF32Bits},
		{body{"bf16ToF32AVX2", cpu.X86.HasAVX2, 8}, bf16ToF32AVX2, refBF16ToF32Bits},
		{body{"f16ToF32AVX512", cpu.X86.HasAVX512F, 16}, f16ToF32AVX512, refF16ToF32Bits},
		{body{"f16ToF32F16C", cpu.X86.HasF16C && cpu.X86.HasAVX, 8}, f16ToF32F16C, refF16ToF32Bits},
	} {
		if !b.ok {
			continue
		}
		clear(dst32)
		b.f(&dst32[0], &src16[0], len(src16))
		for i, h := range src16 {
			if got, want := math.Float32bits(dst32[i]), b.ref(h); got != want {
				t.Fatalf("%s(%#04x) = %#08x, want %#08x", b.name, h, got, want)
			}
		}
	}
	bits := f32Samples()
	bits = bits[:len(bits)&^15]
	src32 := make([]float32, len(bits))
	for i, v := range bits {
		src32[i] = math.Float32frombits(v)
	}
	dst16 := make([]uint16, len(src32))
	for _, b := range []struct {
		body
		f   func(*uint16, *float32, int)
		ref func(float32) uint16
	}{
		{body{"f32ToBF16AVX512", cpu.X86.HasAVX512F, 16}, f32ToBF16AVX512, refF32ToBF16},
		{body{"f32ToBF16AVX2", cpu.X86.HasAVX2, 8}, f32ToBF16AVX2, refF32ToBF16},
		{body{"f32ToF16AVX512", cpu.X86.HasAVX512F, 16}, f32ToF16AVX512, refF32ToF16},
		{body{"f32ToF16F16C", cpu.X86.HasF16C && cpu.X86.HasAVX, 8}, f32ToF16F16C, refF32ToF16},
	} {
		if !b.ok {
			continue
		}
		clear(dst16)
		b.f(&dst16[0], &src32[0], len(src32))
		for i, f := range src32 {
			if want := b.ref(f); dst16[i] != want {
				t.Fatalf("%s(%#08x) = %#04x, want %#04x", b.name, bits[i], dst16[i], want)
			}
		}
	}
}
