//go:build unix

package model

import "syscall"

// processCPU returns the CPU time the process has used, in seconds, threads
// the Go runtime does not know about (a BLAS library's) included.
func processCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
