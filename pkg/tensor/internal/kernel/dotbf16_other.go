//go:build !amd64 || purego

package kernel

// HasGemmBF16 reports whether GemmBF16 runs here: never on this platform
// (it needs amd64's AVX512_BF16).
func HasGemmBF16() bool { return false }

// dotKernel is never called here: GemmBF16 refuses to run first.
func dotKernel(kp int, a, b *uint32, c *float32, ldc int, load int) {
	panic("kernel: no bfloat16 dot-product kernel on this platform")
}
