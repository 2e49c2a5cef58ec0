//go:build !unix

package safetensors

import (
	"io"
	"os"
)

// mapFile reads the file into memory on systems without mmap.
func mapFile(f *os.File, size int64) ([]byte, error) {
	b := make([]byte, size)
	_, err := io.ReadFull(f, b)
	return b, err
}

// unmapFile is a no-op for memory read by mapFile.
func unmapFile(b []byte) error { return nil }
