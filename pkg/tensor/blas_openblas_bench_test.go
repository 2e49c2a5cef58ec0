//go:build cgo

package tensor

// openBLAS returns the OpenBLAS backend when it is installed, for benchmarks.
func openBLAS() Backend {
	if o := loadOpenBLAS(); o != nil {
		return o
	}
	return nil
}
