//go:build !cgo

package tensor

// openBLAS returns nil: a build without cgo has no OpenBLAS.
func openBLAS() Backend { return nil }
