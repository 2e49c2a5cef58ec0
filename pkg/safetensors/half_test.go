package safetensors_test

import (
	"encoding/binary"
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
