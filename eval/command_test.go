package eval

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteErrorNamesTheFileOnce: a report that cannot be written is named
// once ("writing X: writing X:" before).
func TestWriteErrorNamesTheFileOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-dir", "r.json")
	err := (&Report{Version: ReportVersion}).WriteJSON(path)
	if err == nil || strings.Count(err.Error(), "writing") != 1 || strings.Count(err.Error(), path) != 1 {
		t.Fatalf("got %v, want the file named once", err)
	}
}
