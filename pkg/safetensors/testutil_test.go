package safetensors

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// rawFile writes an 8-byte length prefix, hdr and data to a new file and returns its path.
func rawFile(t *testing.T, hdr string, data []byte) string {
	t.Helper()
	b := make([]byte, 8, 8+len(hdr)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(hdr)))
	b = append(b, hdr...)
	b = append(b, data...)
	p := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
