//go:build unix

package testutil

import "syscall"

// ProcessCPU returns the CPU time the process has used, user and system, in
// seconds: threads the Go runtime does not know about (a BLAS library's)
// included. On a shared machine it measures a kernel better than the wall
// clock.
func ProcessCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
