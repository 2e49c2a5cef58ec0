package safetensors_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestHalfCodecsAreTensorConversions checks that the codecs are
// pkg/tensor's conversions over little-endian bytes, bit for bit, on both of
// their paths: bytes viewed in place (aligned) and bytes assembled through
// the buffer (at an odd address), over lengths that end in a partial
// buffer. Every 16-bit pattern is widened, and a few million float32
// patterns (every exponent, the rounding ties of both formats, NaNs and
// infinities) are rounded, in slices long enough to be split over the
// workers. The codecs' own values are checked against the float64
// definition and x448/float16 in convert_test.go.
func TestHalfCodecsAreTensorConversions(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	got, want := make([]float32, len(src)), make([]float32, len(src))
	for _, c := range []struct {
		name string
		conv func([]float32, []uint16)
		dec  func([]float32, []byte)
	}{{"DecodeBF16", tensor.BF16ToF32, safetensors.DecodeBF16}, {"DecodeF16", tensor.F16ToF32, safetensors.DecodeF16}} {
		c.conv(want, src)
		for _, n := range []int{len(src), 1, 255, 257, 1000} {
			for _, off := range []int{0, 1} {
				raw := make([]byte, 2*n+1)[off:]
				for i := 0; i < n; i++ {
					binary.LittleEndian.PutUint16(raw[2*i:], src[len(src)-n+i])
				}
				c.dec(got[:n], raw)
				for i := 0; i < n; i++ {
					if w := want[len(src)-n+i]; math.Float32bits(got[i]) != math.Float32bits(w) {
						t.Fatalf("%s (n=%d, offset %d) of %#04x = %#08x, tensor gives %#08x", c.name, n, off, src[len(src)-n+i], math.Float32bits(got[i]), math.Float32bits(w))
					}
				}
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
	for _, c := range []struct {
		name string
		conv func([]uint16, []float32)
		enc  func([]byte, []float32)
	}{{"EncodeBF16", tensor.F32ToBF16, safetensors.EncodeBF16}, {"EncodeF16", tensor.F32ToF16, safetensors.EncodeF16}} {
		c.conv(h, f)
		for _, n := range []int{len(f), 1, 255, 257, 1000} {
			for _, off := range []int{0, 1} {
				enc := make([]byte, 2*n+1)[off:]
				x := f[len(f)-n:]
				c.enc(enc, x)
				for i := range x {
					if v, w := h[len(f)-n+i], binary.LittleEndian.Uint16(enc[2*i:]); v != w {
						t.Fatalf("%s (n=%d, offset %d) of %#08x = %#04x, tensor gives %#04x", c.name, n, off, math.Float32bits(x[i]), w, v)
					}
				}
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
