//go:build !unix

package capture

import (
	"fmt"
	"os"
)

// mapFile reads path into memory (no mmap on this platform) and returns its bytes.
func mapFile(path string) ([]byte, func() error, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("capture: read shard: %w", err)
	}
	if len(data) == 0 {
		return nil, nil, fmt.Errorf("capture: %s is empty, expected an Arrow IPC file", path)
	}
	return data, func() error { return nil }, nil
}
