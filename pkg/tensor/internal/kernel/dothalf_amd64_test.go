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
	add := func(name string, b halfBody) {
		bodies[name] = func(_ Half, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
			dotRowsHalfTiles(b, out, ldo, x, ldx, w, ldw, m, n, k, acc)
		}
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL {
		b := map[Half]halfBody{BF16: bf16x4AVX512, F16: f16x4AVX512}[h]
		add("avx512-6x4", b)
		// The eight-row body over whole groups of eight, the rest as
		// dotRowsHalfVec runs them.
		bodies["avx512-8x3"] = func(_ Half, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
			m8 := m &^ 7
			if m8 > 0 {
				dotRowsHalfTiles(b.eightRows(), out, ldo, x, ldx, w, ldw, m8, n, k, acc)
			}
			if m8 < m {
				dotRowsHalfTiles(b, out[m8*ldo:], ldo, x[m8*ldx:], ldx, w, ldw, m-m8, n, k, acc)
			}
		}
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA && (h == BF16 || cpu.X86.HasF16C) {
		add("avx2", map[Half]halfBody{BF16: bf16x2AVX2, F16: f16x2AVX2}[h])
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

// convBody is one conversion body: its name, whether the processor runs
// it, its vector width, the reference bits of each value.
type convBody[S, D any] struct {
	name  string
	ok    bool
	width int
	f     func(*D, *S, int)
	ref   func(S) uint32
}

// checkConvBodies runs each body over src (a multiple of sixteen values)
// and compares the bits of the results with its reference.
func checkConvBodies[S, D any](t *testing.T, src []S, bits func(D) uint32, bodies ...convBody[S, D]) {
	t.Helper()
	dst := make([]D, len(src))
	for _, b := range bodies {
		if !b.ok {
			continue
		}
		clear(dst)
		b.f(&dst[0], &src[0], len(src)/b.width)
		for i, v := range src {
			if got, want := bits(dst[i]), b.ref(v); got != want {
				t.Fatalf("%s(%v) gives bits %#x, want %#x", b.name, v, got, want)
			}
		}
	}
}

// TestHalfConversionBodies runs every conversion body the processor has
// over all 16-bit patterns and the float32 samples (every float32 with
// DRAFTER_EXHAUSTIVE_HALF=1).
func TestHalfConversionBodies(t *testing.T) {
	src16 := make([]uint16, 1<<16)
	for i := range src16 {
		src16[i] = uint16(i)
	}
	avx512, avx2, f16c := cpu.X86.HasAVX512F, cpu.X86.HasAVX2, cpu.X86.HasF16C && cpu.X86.HasAVX
	checkConvBodies(t, src16, math.Float32bits,
		convBody[uint16, float32]{"bf16ToF32AVX512", avx512, 16, bf16ToF32AVX512, refBF16ToF32Bits},
		convBody[uint16, float32]{"bf16ToF32AVX2", avx2, 8, bf16ToF32AVX2, refBF16ToF32Bits},
		convBody[uint16, float32]{"f16ToF32AVX512", avx512, 16, f16ToF32AVX512, refF16ToF32Bits},
		convBody[uint16, float32]{"f16ToF32F16C", f16c, 8, f16ToF32F16C, refF16ToF32Bits})

	toBF16 := func(f float32) uint32 { return uint32(refF32ToBF16(f)) }
	toF16 := func(f float32) uint32 { return uint32(refF32ToF16(f)) }
	forF32Cases(func(bits []uint32) {
		src32 := make([]float32, len(bits)&^15)
		for i := range src32 {
			src32[i] = math.Float32frombits(bits[i])
		}
		checkConvBodies(t, src32, func(h uint16) uint32 { return uint32(h) },
			convBody[float32, uint16]{"f32ToBF16AVX512", avx512, 16, f32ToBF16AVX512, toBF16},
			convBody[float32, uint16]{"f32ToBF16AVX2", avx2, 8, f32ToBF16AVX2, toBF16},
			convBody[float32, uint16]{"f32ToF16AVX512", avx512, 16, f32ToF16AVX512, toF16},
			convBody[float32, uint16]{"f32ToF16F16C", f16c, 8, f32ToF16F16C, toF16})
	})
}

// TestDotRowsHalfSignedZero checks the sign of zero results, which the
// accumulation of old outputs must keep: products that all underflow to -0
// (fused: +0 + a tiny negative product rounds to -0) give -0, -0 plus an
// old -0 stays -0, plus an old +0 is +0.
func TestDotRowsHalfSignedZero(t *testing.T) {
	for _, h := range []Half{BF16, F16} {
		for name, f := range halfBodies(h) {
			for _, k := range []int{16, 32} {
				const m, n = 5, 3
				x := make([]float32, m*k)
				for i := range x {
					x[i] = 1e-42
				}
				w := make([]uint16, n*k)
				wv := []float32{-1e-20}
				if h == F16 {
					wv[0] = -1e-4
				}
				conv := F32ToBF16
				if h == F16 {
					conv = F32ToF16
				}
				for i := range w {
					conv(w[i:i+1], wv)
				}
				negZero := float32(math.Copysign(0, -1))
				for _, c := range []struct {
					acc       bool
					old, want float32
				}{{false, 7, negZero}, {true, negZero, negZero}, {true, 0, 0}} {
					out := make([]float32, m*n)
					for i := range out {
						out[i] = c.old
					}
					f(h, out, n, x, k, w, k, m, n, k, c.acc)
					for i, v := range out {
						if math.Float32bits(v) != math.Float32bits(c.want) {
							t.Fatalf("%s %v k=%d acc=%v old=%v: out[%d] = %v (bits %#x), want %v", name, h, k, c.acc, c.old, i, v, math.Float32bits(v), c.want)
						}
					}
				}
			}
		}
	}
}
