//go:build !cgo

package tensor

// CPU returns the CPU backend; a build without cgo always uses pure Go.
func CPU() Backend { return goBLAS{} }
