//go:build !amd64 || purego

package kernel

// bestKind returns the only micro-kernel this platform has: plain Go.
func bestKind() int { return kindGo }

// kindSupported reports whether kernels of a kind run on this platform.
func kindSupported(kind int) bool { return kind == kindGo }

// microKernel runs the Go micro-kernel on one tile.
func microKernel(kind, k int, a, b, c *float32, ldc int, alpha, beta float32, load int) {
	microKernelGo(k, a, b, c, ldc, alpha, beta, load)
}

// packT8 has no vector body on this platform: it packs nothing.
func packT8(dst, x []float32, ld, r0, c0, rows, kc, w int) int { return 0 }
