//go:build !amd64 || purego

package kernel

// halfBodiesAll returns the assembly bodies of DotRowsBF16 (f16: of
// DotRowsF16): none on this platform.
func halfBodiesAll(h Half) []halfDotFunc { return nil }
