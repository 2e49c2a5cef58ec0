package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/drafter-ai/drafter/pkg/filecache"
)

// TestMain points the commands' file cache at a temporary folder, so that
// tests never read or write the user's cache.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "drafter-test-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(filecache.EnvDir, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
