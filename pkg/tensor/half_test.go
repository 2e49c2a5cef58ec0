package tensor_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestHalfConversionsMatchSafetensors checks the vectorised conversions
// against the safetensors codecs, bit for bit: every 16-bit pattern
// widened, and a few million float32 patterns (every exponent, the rounding
// ties of both formats, NaNs and infinities) rounded, in slices long enough
// to be split over the workers.
func TestHalfConversionsMatchSafetensors(t *testing.T) {
	src := make([]uint16, 1<<16)
	raw := make([]byte, 2*len(src))
	for i := range src {
		src[i] = uint16(i)
		binary.LittleEndian.PutUint16(raw[2*i:], uint16(i))
	}
	got, want := make([]float32, len(src)), make([]float32, len(src))
	for _, c := range []struct {
		name string
		conv func([]float32, []uint16)
		ref  func([]float32, []byte)
	}{{"BF16ToF32", tensor.BF16ToF32, safetensors.DecodeBF16}, {"F16ToF32", tensor.F16ToF32, safetensors.DecodeF16}} {
		c.conv(got, src)
		c.ref(want, raw)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s(%#04x) = %#08x, safetensors gives %#08x", c.name, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
			}
		}
	}

	r := rand.New(rand.NewPCG(1, 2))
	var f []float32
	for hi := uint32(0); hi < 1<<16; hi++ {
		for _, lo := range []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0x1000, 0x0fff, 0x3000} {
			f = append(f, math.Float32frombits(hi<<16|lo))
		}
	}
	for len(f) < 3<<20 {
		f = append(f, math.Float32frombits(r.Uint32()))
	}
	h := make([]uint16, len(f))
	enc := make([]byte, 2*len(f))
	for _, c := range []struct {
		name string
		conv func([]uint16, []float32)
		ref  func([]byte, []float32)
	}{{"F32ToBF16", tensor.F32ToBF16, safetensors.EncodeBF16}, {"F32ToF16", tensor.F32ToF16, safetensors.EncodeF16}} {
		c.conv(h, f)
		c.ref(enc, f)
		for i, v := range h {
			if w := binary.LittleEndian.Uint16(enc[2*i:]); v != w {
				t.Fatalf("%s(%#08x) = %#04x, safetensors gives %#04x", c.name, math.Float32bits(f[i]), v, w)
			}
		}
	}
}

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

// benchWeights returns random float32 weights [n, k] and their bfloat16 and
// binary16 roundings.
func benchWeights(r *rand.Rand, n, k int) ([]float32, []uint16, []uint16) {
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.02)
	}
	bf, hf := make([]uint16, len(w)), make([]uint16, len(w))
	tensor.F32ToBF16(bf, w)
	tensor.F32ToF16(hf, w)
	return w, bf, hf
}

// BenchmarkDecodeHalf measures products of one and eight rows split over
// the workers in 64-row blocks of the weight, as the model splits a decode
// step's products, over float32, bfloat16 and binary16 weights: GB/s of
// weight bytes (the weights of the large shapes do not fit in the caches).
func BenchmarkDecodeHalf(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range []struct{ n, k int }{{4096, 4096}, {14336, 4096}, {32000, 512}, {1536, 512}} {
		w32, bf, hf := benchWeights(r, s.n, s.k)
		for _, m := range []int{1, 8} {
			x := make([]float32, m*s.k)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			out := make([]float32, m*s.n)
			for _, f := range []string{"f32", "bf16", "f16"} {
				bytes := 2
				if f == "f32" {
					bytes = 4
				}
				chunk := func(_, lo, hi int) {
					lo, hi = lo*64, min(hi*64, s.n)
					switch f {
					case "f32":
						tensor.DotRows(out[lo:], s.n, x, s.k, w32[lo*s.k:], s.k, m, hi-lo, s.k, false)
					case "bf16":
						tensor.DotRowsBF16(out[lo:], s.n, x, s.k, bf[lo*s.k:], s.k, m, hi-lo, s.k, false)
					case "f16":
						tensor.DotRowsF16(out[lo:], s.n, x, s.k, hf[lo*s.k:], s.k, m, hi-lo, s.k, false)
					}
				}
				b.Run(fmt.Sprintf("%dx%d/m%d/%s", s.n, s.k, m, f), func(b *testing.B) {
					for b.Loop() {
						tensor.ParallelChunks((s.n+63)/64, 4*tensor.Workers(), chunk)
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(bytes*s.n*s.k)/sec/1e9, "GB/s")
					b.ReportMetric(sec*1e6, "us/op")
				})
			}
		}
	}
}

// BenchmarkPrefillHalf measures the prefill product x·Wᵀ of 512 rows over
// float32 weights (the CPU backend's Sgemm: OpenBLAS where it is installed)
// and bfloat16 and binary16 weights (SgemmBF16, SgemmF16), split over the
// workers.
func BenchmarkPrefillHalf(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	be := tensor.CPU()
	for _, s := range [][3]int{{512, 1536, 512}, {512, 512, 1536}, {512, 4096, 4096}} {
		m, n, k := s[0], s[1], s[2]
		w32, bf, hf := benchWeights(r, n, k)
		x, c := make([]float32, m*k), make([]float32, m*n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for _, f := range []string{"f32", "bf16", "f16"} {
			name := f
			if f == "f32" {
				name += "-" + be.Name()
			}
			b.Run(fmt.Sprintf("%dx%dx%d/%s", m, n, k, name), func(b *testing.B) {
				for b.Loop() {
					switch f {
					case "f32":
						be.Sgemm(false, true, m, n, k, 1, x, k, w32, k, 0, c, n)
					case "bf16":
						tensor.SgemmBF16(false, true, m, n, k, 1, x, k, bf, k, 0, c, n)
					case "f16":
						tensor.SgemmF16(false, true, m, n, k, 1, x, k, hf, k, 0, c, n)
					}
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkConvertHalf compares the conversions with the safetensors codecs
// (both split over the workers) on 16M values: Gval/s.
func BenchmarkConvertHalf(b *testing.B) {
	const n = 1 << 24
	r := rand.New(rand.NewPCG(7, 8))
	f := make([]float32, n)
	for i := range f {
		f[i] = float32(r.NormFloat64())
	}
	h := make([]uint16, n)
	raw := make([]byte, 2*n)
	tensor.F32ToBF16(h, f)
	safetensors.EncodeBF16(raw, f)
	for _, c := range []struct {
		name string
		run  func()
	}{
		{"BF16ToF32", func() { tensor.BF16ToF32(f, h) }},
		{"safetensors.DecodeBF16", func() { safetensors.DecodeBF16(f, raw) }},
		{"F16ToF32", func() { tensor.F16ToF32(f, h) }},
		{"safetensors.DecodeF16", func() { safetensors.DecodeF16(f, raw) }},
		{"F32ToBF16", func() { tensor.F32ToBF16(h, f) }},
		{"safetensors.EncodeBF16", func() { safetensors.EncodeBF16(raw, f) }},
		{"F32ToF16", func() { tensor.F32ToF16(h, f) }},
		{"safetensors.EncodeF16", func() { safetensors.EncodeF16(raw, f) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.run()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gval/s")
		})
	}
}
