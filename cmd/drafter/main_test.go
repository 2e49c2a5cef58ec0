package main

import (
	"fmt"
	"os"

	"bytes"
	"context"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"testing"
)

// cliResult is what one drafter command line did.
type cliResult struct {
	code        int    // the exit code main would use
	msg         string // the error main would print, "" on success
	out, stderr string
}

// runCLI runs the command line args through the whole command tree, as main
// does. With stub set, every command hands its options to stub instead of
// running (see newRootCmd).
func runCLI(t *testing.T, stub func(any) error, args ...string) cliResult {
	t.Helper()
	root := newRootCmd(stub)
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := execute(context.Background(), root, args)
	r := cliResult{code: exitCode(err), out: out.String(), stderr: errOut.String()}
	if err != nil {
		r.msg = err.Error()
	}
	return r
}

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
