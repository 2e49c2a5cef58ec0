//go:build unix

package outlock

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process with id pid runs on this host (a
// process of another user counts).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
