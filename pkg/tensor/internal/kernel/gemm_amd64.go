//go:build !purego

package kernel

import "golang.org/x/sys/cpu"

// sgemm14x32AVX512 computes the 14 x 32 tile C = alpha*A·B + beta*C (C read
// only when load is 1) from a packed A panel (k groups of 14 floats) and a
// packed, 64-byte-aligned B panel (k groups of 32 floats).
//
//go:noescape
func sgemm14x32AVX512(k int, a, b, c *float32, ldc int, alpha, beta float32, load int)

// sgemm6x16AVX2 is sgemm14x32AVX512 for 6 x 16 tiles with AVX2 and FMA.
//
//go:noescape
func sgemm6x16AVX2(k int, a, b, c *float32, ldc int, alpha, beta float32, load int)

// packT8AVX2 transposes 8 rows of src (row stride ld) over 8*n columns into
// dst: dst[p*w+r] = src[r*ld+p] for r < 8 and p < 8n.
//
//go:noescape
func packT8AVX2(dst, src *float32, ld, w, n int)

// packT8 transposes rows [r0, r0+rows) of x (stride ld), columns [c0,
// c0+kc&^7), into dst[p*w+r] with AVX2, eight rows at a time, when the
// processor has it, and returns how many rows (a multiple of 8) it packed.
func packT8(dst, x []float32, ld, r0, c0, rows, kc, w int) int {
	n, r8 := kc/8, rows&^7
	if n == 0 || r8 == 0 || !cpu.X86.HasAVX2 {
		return 0
	}
	_ = x[(r0+r8-1)*ld+c0+8*n-1]
	_ = dst[(8*n-1)*w+r8-1]
	for r := 0; r < r8; r += 8 {
		packT8AVX2(&dst[r], &x[(r0+r)*ld+c0], ld, w, n)
	}
	return r8
}

// bestKind returns the fastest micro-kernel the processor supports.
func bestKind() int {
	switch {
	case cpu.X86.HasAVX512F:
		return kindAVX512
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return kindAVX2
	}
	return kindGo
}

// kindSupported reports whether the processor can run kernels of a kind.
func kindSupported(kind int) bool {
	switch kind {
	case kindAVX512:
		return cpu.X86.HasAVX512F
	case kindAVX2:
		return cpu.X86.HasAVX2 && cpu.X86.HasFMA
	}
	return true
}

// microKernel runs the micro-kernel of the given kind on one tile.
func microKernel(kind, k int, a, b, c *float32, ldc int, alpha, beta float32, load int) {
	switch kind {
	case kindAVX512:
		sgemm14x32AVX512(k, a, b, c, ldc, alpha, beta, load)
	case kindAVX2:
		sgemm6x16AVX2(k, a, b, c, ldc, alpha, beta, load)
	default:
		microKernelGo(k, a, b, c, ldc, alpha, beta, load)
	}
}
