//go:build !unix

package outlock

import "os"

// processAlive reports whether a process with id pid may run on this host:
// where the system cannot be asked, it is assumed to run.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	p.Release()
	return true
}
