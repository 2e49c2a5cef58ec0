//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package outlock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// acquire takes the kernel lock on path, or falls back to the record when
// the filesystem refuses locks.
func acquire(path string, me Owner) (*Lock, error) {
	for attempt := 0; attempt < 100; attempt++ {
		f, created, err := openLockFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			// The folder was removed by a Release that had created it.
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return nil, fmt.Errorf("outlock: %w", err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("outlock: %w", err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			// The holder before may have deleted the file (Release) between
			// our open and our lock: then this lock guards nothing, start over.
			if !samePath(f, path) {
				f.Close()
				continue
			}
			if err := writeOwner(f, me); err != nil {
				f.Close()
				return nil, fmt.Errorf("outlock: writing %s: %w", path, err)
			}
			return &Lock{path: path, owner: me, f: f}, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			f.Close()
			if err := busy(path, false); err != nil {
				return nil, err
			}
		case errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOTSUP):
			if created { // exclusively created: the record protocol's lock is ours
				werr := writeOwner(f, me)
				f.Close()
				if werr != nil {
					os.Remove(path)
					return nil, fmt.Errorf("outlock: writing %s: %w", path, werr)
				}
				return &Lock{path: path, owner: me}, nil
			}
			f.Close()
			return acquireByRecord(path, me)
		default:
			f.Close()
			return nil, fmt.Errorf("outlock: locking %s: %w", path, err)
		}
	}
	return nil, fmt.Errorf("outlock: %s keeps being replaced while it is locked; try again", path)
}

// openLockFile opens path for writing, creating it, and reports whether this
// call created it.
func openLockFile(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, false, err
	}
	f, err = os.OpenFile(path, os.O_RDWR, 0o644)
	return f, false, err
}
