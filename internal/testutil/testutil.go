// Package testutil holds the helpers tests across the module share: where the
// bundled model and the shared reference data are, copies of model folders
// and edits of their JSON files, the process's CPU time, the float64
// references products and losses are checked against (GemmRef, LogSoftmax)
// and their random inputs, Pearson's chi-square test, random trees and error
// checks.
//
// It imports nothing of the module, so that the tests of every package,
// pkg/tensor's own included, can use it. Helpers that need the module's
// packages (model folders, runs of the model) are in internal/testmodel.
package testutil

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Root returns the module's root folder, the nearest folder holding go.mod
// above the working directory (a test runs in its package's folder). It
// panics outside the module: a test cannot run there.
func Root() string {
	dir, err := os.Getwd()
	if err != nil {
		panic("testutil: " + err.Error())
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			panic("testutil: no go.mod above " + dir)
		}
	}
}

// Stories260k returns the folder of the bundled model, models/stories260k: a
// 260K-parameter Llama (5 layers, hidden size 64, vocabulary 512, tied
// embeddings) committed in the repository.
func Stories260k() string { return filepath.Join(Root(), "models", "stories260k") }

// SharedPath returns the path of rel in the shared reference data, the
// folder shared/ beside the checkout that CI provides: tokenizers, models and
// outputs recorded with Hugging Face transformers. It may be absent.
func SharedPath(rel string) string { return filepath.Join(Root(), "..", "shared", rel) }

// Shared returns SharedPath(rel), skipping the test when it does not exist.
func Shared(tb testing.TB, rel string) string {
	tb.Helper()
	p := SharedPath(rel)
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("shared reference data not found at %s (it sits beside the checkout in CI): %v", p, err)
	}
	return p
}

// WantErr fails the test unless err is an error whose message contains every
// one of subs.
func WantErr(tb testing.TB, err error, subs ...string) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("got no error, want one containing %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			tb.Fatalf("error %q does not contain %q", err, s)
		}
	}
}

// CopyDir copies the files of the folder from (a model folder: not its
// subfolders) into a new temporary folder and returns its path.
func CopyDir(tb testing.TB, from string) string {
	tb.Helper()
	dir := tb.TempDir()
	entries, err := os.ReadDir(from)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			CopyFile(tb, filepath.Join(from, e.Name()), filepath.Join(dir, e.Name()))
		}
	}
	return dir
}

// CopyFile copies the file from to the path to.
func CopyFile(tb testing.TB, from, to string) {
	tb.Helper()
	in, err := os.Open(from)
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		tb.Fatal(err)
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
}

// ReadJSON decodes the JSON object in the file path.
func ReadJSON(tb testing.TB, path string) map[string]any {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return m
}

// EditJSON rewrites the JSON object in the file path through edit, compactly.
func EditJSON(tb testing.TB, path string, edit func(map[string]any)) {
	tb.Helper()
	m := ReadJSON(tb, path)
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// NeedCUDA skips the test unless a CUDA driver is configured
// (DRAFTER_LIBCUDA: make cuda-check points it at the stand-in driver, which
// runs drafter's kernels on CPU threads); with DRAFTER_REQUIRE_CUDA set (CI)
// it fails instead.
func NeedCUDA(t testing.TB) {
	t.Helper()
	if os.Getenv("DRAFTER_LIBCUDA") != "" {
		return
	}
	if os.Getenv("DRAFTER_REQUIRE_CUDA") != "" {
		t.Fatal("DRAFTER_REQUIRE_CUDA is set but DRAFTER_LIBCUDA is not: run through make cuda-check")
	}
	t.Skip("no CUDA driver configured: make cuda-check runs this test against the stand-in driver and cuBLAS")
}

// EnginePython returns the repository's engine-check Python (build/pyenv,
// made by scripts/setup.sh) and the folder of its scripts
// (scripts/enginecheck), which the drafters' engine-style forward
// comparisons run. The test skips without it, unless
// DRAFTER_REQUIRE_PYTHON=1 makes that a failure (so that a machine set up
// for the comparisons cannot pass them by skipping).
func EnginePython(tb testing.TB) (python, scripts string) {
	tb.Helper()
	dir := Root()
	python = filepath.Join(dir, "build", "pyenv", "bin", "python")
	scripts = filepath.Join(dir, "scripts", "enginecheck")
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("DRAFTER_REQUIRE_PYTHON") == "1" {
			tb.Fatalf("DRAFTER_REQUIRE_PYTHON=1 but %s is missing (run scripts/setup.sh): %v", python, err)
		}
		tb.Skipf("%s is missing (scripts/setup.sh makes it); skipping the engine-style forward comparison", python)
	}
	return python, scripts
}
