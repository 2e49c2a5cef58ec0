//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package outlock

// acquire takes the lock by creating the file exclusively: this system
// offers no flock.
func acquire(path string, me Owner) (*Lock, error) {
	return acquireByRecord(path, me)
}
