//go:build !unix

package testutil

// ProcessCPU is not measured on this platform: it returns 0.
func ProcessCPU() float64 { return 0 }
