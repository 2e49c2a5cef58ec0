package kernel

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"
)

// guarded returns n bytes that end where an inaccessible page begins, so
// that reading one byte past them faults; free unmaps them.
func guarded(t *testing.T, n int) (b []byte, free func()) {
	t.Helper()
	page := syscall.Getpagesize()
	size := (n+page-1)/page*page + page
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	if err := syscall.Mprotect(mem[size-page:], syscall.PROT_NONE); err != nil {
		syscall.Munmap(mem)
		t.Skipf("mprotect: %v", err)
	}
	return mem[size-page-n : size-page], func() { syscall.Munmap(mem) }
}

func guardedF32(t *testing.T, n int) ([]float32, func()) {
	b, free := guarded(t, 4*n)
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), free
}

func guardedU16(t *testing.T, n int) ([]uint16, func()) {
	b, free := guarded(t, 2*n)
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n), free
}

// TestHalfKernelsStayInBounds runs the products and conversions on operands
// that end at an inaccessible page: a kernel that reads past the last row
// of the inputs or weights (a k%16 tail loaded whole) faults.
func TestHalfKernelsStayInBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 15))
	for _, k := range []int{1, 7, 15, 17, 31, 33} {
		for _, m := range []int{1, 2, 3, 5, 7} {
			n := 5
			x, freeX := guardedF32(t, m*k)
			w, freeW := guardedU16(t, n*k)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			for i := range w {
				w[i] = 0x3f80 // 1 as a bfloat16, 1.875 as a binary16
			}
			out := make([]float32, m*n)
			DotRowsBF16(out, n, x, k, w, k, m, n, k, false)
			DotRowsF16(out, n, x, k, w, k, m, n, k, true)
			for _, h := range []Half{BF16, F16} {
				for _, f := range halfBodiesAll(h) {
					f(h, out, n, x, k, w, k, m, n, k, false)
				}
			}
			freeX()
			freeW()
		}
	}
	for _, n := range []int{1, 15, 16, 17, 40} {
		s16, free16 := guardedU16(t, n)
		s32, free32 := guardedF32(t, n)
		d32, d16 := make([]float32, n), make([]uint16, n)
		BF16ToF32(d32, s16)
		F16ToF32(d32, s16)
		F32ToBF16(d16, s32)
		F32ToF16(d16, s32)
		free16()
		free32()
	}
}

// TestGemmBF16StaysInBounds runs GemmBF16 on A and B that end at an
// inaccessible page: a packing that read past the last row (a pair of an
// odd k loaded whole, a conversion's vector tail) faults.
func TestGemmBF16StaysInBounds(t *testing.T) {
	if !HasGemmBF16() {
		t.Skip("no AVX512_BF16 here")
	}
	g := NewGemm()
	for _, k := range []int{1, 2, 7, 17, 33, 64} {
		for _, m := range []int{1, 15} {
			for _, n := range []int{1, 33} {
				a, freeA := guardedF32(t, m*k)
				b, freeB := guardedU16(t, n*k)
				for i := range a {
					a[i] = 1
				}
				for i := range b {
					b[i] = 0x3f80 // 1
				}
				c := make([]float32, m*n)
				g.GemmBF16(nil, 1, m, n, k, a, k, b, k, c, n, false)
				for i, v := range c {
					if v != float32(k) {
						t.Fatalf("m=%d n=%d k=%d: c[%d] = %v, want %d", m, n, k, i, v, k)
					}
				}
				freeA()
				freeB()
			}
		}
	}
}
