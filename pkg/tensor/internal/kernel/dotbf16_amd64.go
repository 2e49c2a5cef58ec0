//go:build !purego

package kernel

import "golang.org/x/sys/cpu"

// dotBF16x14x32 computes the 14 x 32 tile C = A·B, or C += A·B when load is
// 1, from a packed A panel (kp groups of 14 bfloat16 pairs) and a packed,
// 64-byte-aligned B panel (kp groups of 32 pairs) with VDPBF16PS.
//
//go:noescape
func dotBF16x14x32(kp int, a, b *uint32, c *float32, ldc int, load int)

// HasGemmBF16 reports whether GemmBF16 runs here: the processor has
// AVX-512 with AVX512_BF16 (and the OS keeps the AVX-512 state, which
// golang.org/x/sys/cpu checks).
func HasGemmBF16() bool { return cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16 }

// dotKernel runs the bfloat16 micro-kernel on one tile.
func dotKernel(kp int, a, b *uint32, c *float32, ldc int, load int) {
	dotBF16x14x32(kp, a, b, c, ldc, load)
}
