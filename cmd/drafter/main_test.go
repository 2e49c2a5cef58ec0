package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
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

// DRAFTER_BLAS is the command's to read: it names the backend the command
// passes down, and a value it does not know is a command-line mistake (exit
// 2) naming the variable, found before any model is read.
func TestBackendFromEnvironment(t *testing.T) {
	wantOpenBLAS, openErr := cpu.OpenBLAS()
	for _, c := range []struct {
		v, want, err string
	}{
		{"", cpu.DefaultBackend().Name(), ""},
		{"go", "go", ""},
		{"openblas", "openblas", ""},
		{"OpenBLAS", "", `DRAFTER_BLAS="OpenBLAS": want go (pure Go), openblas (OpenBLAS, which must be installed), or unset`},
		{"cuda", "", `DRAFTER_BLAS="cuda": want go`},
	} {
		if c.v == "openblas" && openErr != nil {
			c.want, c.err = "", "DRAFTER_BLAS=openblas: tensor: OpenBLAS"
		}
		be, err := backendFor(c.v)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("DRAFTER_BLAS=%q: error %v, want one saying %q", c.v, err, c.err)
		case c.err == "" && (err != nil || be.Name() != c.want):
			t.Errorf("DRAFTER_BLAS=%q: backend %v, error %v; want %s", c.v, be, err, c.want)
		}
	}
	if openErr == nil && wantOpenBLAS.Name() != "openblas" {
		t.Errorf("cpu.OpenBLAS() is %q", wantOpenBLAS.Name())
	}

	t.Setenv(envBLAS, "gpu")
	model := t.TempDir() + "/no-such-model"
	for _, args := range [][]string{
		{"generate", "--model", model, "--prompt", "p"},
		{"train", "medusa", "--model", model, "--data", model, "--out", t.TempDir()},
		{"eval", "--model", model, "--drafter", model, "--prompts", model},
	} {
		r := runCLI(t, nil, args...)
		if r.code != exitUsage || !strings.Contains(r.msg, `DRAFTER_BLAS="gpu"`) {
			t.Errorf("%s with DRAFTER_BLAS=gpu: exit %d, %q; want exit %d naming DRAFTER_BLAS", args[0], r.code, r.msg, exitUsage)
		}
	}
}

// main sets OPENBLAS_CORETYPE from the CPU's features unless the user set it.
func TestSetOpenBLASCoreType(t *testing.T) {
	t.Setenv(envCoreType, "")
	setOpenBLASCoreType()
	if got, want := os.Getenv(envCoreType), cpu.OpenBLASCoreType(); got != want {
		t.Errorf("unset: OPENBLAS_CORETYPE=%q, want %q", got, want)
	}
	t.Setenv(envCoreType, "Zen")
	setOpenBLASCoreType()
	if got := os.Getenv(envCoreType); got != "Zen" {
		t.Errorf("set by the user: OPENBLAS_CORETYPE=%q, want Zen kept", got)
	}
}
