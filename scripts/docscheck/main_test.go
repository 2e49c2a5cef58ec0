package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes files (path -> content) under a new folder and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// repo is a small repository: two packages, a script, a Makefile with a
// few targets and a command with two subcommands.
var repo = map[string]string{
	"Makefile":                  "GO ?= go\nBIN := bin/x\n.PHONY: test vet\n\ntest: vet\n\t$(GO) test ./...\n\nvet:\n\t$(GO) vet ./...\n\ncuda-check ptx: FORCE\n\t@true\n",
	"pkg/tensor/device.go":      "package tensor\n\n// Device is one.\ntype Device interface{}\n\nfunc New() {}\n\nvar Pool, Other int\n\nfunc (Device2) Method() {}\n\ntype Device2 struct{}\n",
	"pkg/tensor/cpu/cpu.go":     "package cpu\n",
	"pkg/tensor/cpu/backend.go": "package cpu\n",
	"pkg/model/forward.go":      "package model\n",
	"eval/eval.go":              "package eval\n",
	"scripts/setup.sh":          "#!/bin/sh\n",
	"cmd/drafter/main.go":       "package main\n\nvar root = cobra.Command{\n\tUse: \"drafter\",\n}\nvar a = cobra.Command{Use:   \"distill --model DIR\"}\nvar b = cobra.Command{Use: \"train --method M\"}\n",
	"docs/other.md":             "# Other\n",
}

// TestCheckFindsEveryKind checks one document that names, for each kind of
// name, one that exists and one that does not: only the missing ones are
// reported, each with its file and line, so that the check cannot pass by
// checking nothing.
func TestCheckFindsEveryKind(t *testing.T) {
	files := map[string]string{}
	for k, v := range repo {
		files[k] = v
	}
	// The document: its paragraphs (each line below one, blank lines
	// between them) and its code block.
	paras := []string{
		"# Layout", // line 1
		"`pkg/tensor` and `pkg/tensor/cpu` exist; `pkg/tensor/gpu` does not.",                                                                          // 3
		"The interface is in pkg/tensor/device.go, not pkg/tensor/devices.go.",                                                                         // 5
		"See docs/other.md and docs/gone.md's design; `eval` is here, `train` is not.",                                                                 // 7
		"- `pkg/model`: `forward.go` is here, `attention.go` is not.",                                                                                  // 9
		"- `pkg/tensor/cpu/cpu.go`, then `backend.go` (same folder) and `forward.go`.",                                                                 // 11
		"`pkg/tensor.Device`, `pkg/tensor.New`, `pkg/tensor.Pool` exist; `pkg/tensor.Method` does not.",                                                // 13
		"Wildcards and placeholders: `scripts/*`, `pkg/...`, `pkg/<name>/x.go`, `pkg/tensor/*.go`; `cmd/*.sh` matches nothing, `nope/<m>` is no root.", // 15
		"`make test`, `make vet cuda-check`, `make -j4 ptx`; `make bench` is missing.",                                                                 // 17
		"`drafter distill`, `drafter train <m>`, `drafter --help`; `drafter serve` is missing.",                                                        // 19
		"| `pkg/model` | `forward.go` |",  // 21
		"| `pkg/tensor` | `forward.go` |", // 23
		"A URL http://host/pkg/x and an absolute /data/x are not names; a sentence ends at pkg/model.", // 25
		"`config.json` and `model.safetensors` are drafter's files, not the repository's.",             // 27
		"Trailing slash: `pkg/tensor/device.go/` is a file, `internal/` is missing.",                   // 29
	}
	code := []string{
		"```sh", // 31
		"make test",
		"make demo   # missing", // 33
		"drafter train --method medusa",
		"drafter export --out x", // 35
		"scripts/setup.sh && scripts/teardown.sh",
		"```",
	}
	files["docs/arch.md"] = strings.Join(paras, "\n\n") + "\n\n" + strings.Join(code, "\n") + "\n"
	got, err := Check(writeTree(t, files))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"docs/arch.md:3: pkg/tensor/gpu: no such file or folder",
		"docs/arch.md:5: pkg/tensor/devices.go: no such file or folder",
		"docs/arch.md:7: docs/gone.md: no such file or folder",
		"docs/arch.md:7: train: no such package or folder",
		"docs/arch.md:9: attention.go: not in pkg/model (the folders its paragraph names)",
		"docs/arch.md:11: forward.go: not in pkg/tensor/cpu (the folders its paragraph names)",
		"docs/arch.md:13: pkg/tensor.Method: package pkg/tensor declares no Method",
		"docs/arch.md:15: cmd/*.sh: matches nothing",
		"docs/arch.md:17: make bench: no such target in the Makefile",
		"docs/arch.md:19: drafter serve: no such command in cmd/drafter",
		"docs/arch.md:23: forward.go: not in pkg/tensor (the folders its paragraph names)",
		"docs/arch.md:29: pkg/tensor/device.go/: a file, not a folder",
		"docs/arch.md:29: internal/: no such file or folder",
		"docs/arch.md:33: make demo: no such target in the Makefile",
		"docs/arch.md:35: drafter export: no such command in cmd/drafter",
		"docs/arch.md:36: scripts/teardown.sh: no such file or folder",
	}
	var lines []string
	for _, p := range got {
		lines = append(lines, p.String())
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n\t%s\nwant\n\t%s", strings.Join(lines, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// TestCheckReadsReadme checks that README.md is read as well as docs/*.md,
// and that a repository whose docs name only what exists passes.
func TestCheckReadsReadme(t *testing.T) {
	files := map[string]string{}
	for k, v := range repo {
		files[k] = v
	}
	files["README.md"] = "`make test` runs pkg/tensor's tests (`device.go`).\n"
	root := writeTree(t, files)
	if got, err := Check(root); err != nil || len(got) != 0 {
		t.Fatalf("Check = %v, %v; want nothing", got, err)
	}
	if err := os.WriteFile(filepath.Join(root, "README.md"), []byte("\n`make all`\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Check(root)
	if err != nil || len(got) != 1 || got[0].String() != "README.md:2: make all: no such target in the Makefile" {
		t.Fatalf("Check = %v, %v; want README.md:2's make all", got, err)
	}
}
