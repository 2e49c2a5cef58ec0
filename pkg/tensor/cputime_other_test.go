//go:build !unix

package tensor

// cpuTime is not measured on this platform.
func cpuTime() float64 { return 0 }
