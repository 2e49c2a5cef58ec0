//go:build unix

package capture

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps path read-only into memory and returns its bytes and a function that unmaps it.
func mapFile(path string) ([]byte, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("capture: open shard: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("capture: stat shard: %w", err)
	}
	size := st.Size()
	if size == 0 {
		return nil, nil, fmt.Errorf("capture: %s is empty, expected an Arrow IPC file", path)
	}
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("capture: %s is too large (%d bytes) to map on this platform", path, size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("capture: mmap %s: %w", path, err)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
