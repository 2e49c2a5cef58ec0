package finite

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// Every float16 bit pattern, at every position of a block and in the tail,
// is found exactly when its exponent bits are all ones.
func TestF16AllPatterns(t *testing.T) {
	const n = 37 // one 32-byte block of 16 values, then a tail of 21
	buf := make([]byte, 2*n)
	for h := 0; h < 1<<16; h++ {
		want := h&0x7c00 == 0x7c00
		for _, at := range []int{0, 3, 15, 16, 36} {
			clear(buf)
			binary.LittleEndian.PutUint16(buf[2*at:], uint16(h))
			got := F16(buf)
			if want && got != at || !want && got != -1 {
				t.Fatalf("bits %#04x at %d: F16 = %d", h, at, got)
			}
			if (Kind16(uint16(h)) != "") != want {
				t.Fatalf("Kind16(%#04x) = %q", h, Kind16(uint16(h)))
			}
		}
	}
}

// Every bfloat16 bit pattern: not finite exactly when it is the upper half
// of a float32 that is not.
func TestBF16AllPatterns(t *testing.T) {
	const n = 37
	buf := make([]byte, 2*n)
	for h := 0; h < 1<<16; h++ {
		f := float64(math.Float32frombits(uint32(h) << 16))
		want := math.IsNaN(f) || math.IsInf(f, 0)
		for _, at := range []int{0, 3, 15, 16, 36} {
			clear(buf)
			binary.LittleEndian.PutUint16(buf[2*at:], uint16(h))
			got := BF16(buf)
			if want && got != at || !want && got != -1 {
				t.Fatalf("bits %#04x at %d: BF16 = %d", h, at, got)
			}
		}
	}
}

func TestF32Patterns(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pats := []uint32{0, 0x80000000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff, 0x00800000, 1}
	for i := 0; i < 1<<16; i++ {
		pats = append(pats, r.Uint32())
	}
	const n = 19 // two 32-byte blocks of 8 values, then a tail of 3
	buf := make([]byte, 4*n)
	for _, u := range pats {
		f := float64(math.Float32frombits(u))
		want := math.IsNaN(f) || math.IsInf(f, 0)
		for _, at := range []int{0, 7, 8, 15, 18} {
			clear(buf)
			binary.LittleEndian.PutUint32(buf[4*at:], u)
			got := F32(buf)
			if want && got != at || !want && got != -1 {
				t.Fatalf("bits %#08x at %d: F32 = %d", u, at, got)
			}
		}
		if k := Kind32(u); (k != "") != want || math.IsNaN(f) != (k == "NaN") || math.IsInf(f, 1) != (k == "+Inf") {
			t.Fatalf("Kind32(%#08x) = %q", u, k)
		}
	}
}

// The first of several non-finite values is reported; trailing partial
// values are ignored.
func TestFirstAndPartial(t *testing.T) {
	b := make([]byte, 2*100+1)
	binary.LittleEndian.PutUint16(b[2*70:], 0x7e00)
	binary.LittleEndian.PutUint16(b[2*40:], 0xfc00)
	b[200] = 0xff
	if got := F16(b); got != 40 {
		t.Fatalf("F16 = %d, want 40", got)
	}
	if Kind16(0xfc00) != "-Inf" || Kind16(0x7e00) != "NaN" || Kind16(0x7c00) != "+Inf" {
		t.Fatal("Kind16 names")
	}
	c := make([]byte, 4*50+3)
	c[200], c[201], c[202] = 0xff, 0xff, 0xff
	if got := F32(c); got != -1 {
		t.Fatalf("F32 over finite values and a partial one = %d", got)
	}
}

func BenchmarkF16(b *testing.B) {
	buf := make([]byte, 8<<20)
	for i := 0; i < len(buf); i += 2 {
		binary.LittleEndian.PutUint16(buf[i:], uint16(i*2654435761)&0xbbff)
	}
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if F16(buf) != -1 {
			b.Fatal("found one")
		}
	}
}

func BenchmarkF32(b *testing.B) {
	buf := make([]byte, 8<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if F32(buf) != -1 {
			b.Fatal("found one")
		}
	}
}
