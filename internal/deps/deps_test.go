package deps

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// listPackages runs `go list -json ./...` at the module root, under the build
// settings of the test run (CGO_ENABLED, tags), so that each compute path's
// files are checked by its own run.
func listPackages(t *testing.T) []devicePkg {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []devicePkg
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		var p devicePkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages in %s", len(pkgs), root)
	}
	return pkgs
}

// The rule holds for the whole module, its tests included.
func TestDependencyRule(t *testing.T) {
	var pkgs []pkg
	for _, p := range listPackages(t) {
		pkgs = append(pkgs, p.pkg)
	}
	if v := violations(pkgs); len(v) > 0 {
		t.Fatalf("%d imports break the dependency rule (docs/architecture.md):\n  %s", len(v), strings.Join(v, "\n  "))
	}
}

// The checker finds each kind of violation, in code and in tests, and allows
// what the rule allows: the rule test above cannot pass by checking nothing.
func TestViolationsFound(t *testing.T) {
	p := func(path string, imports ...string) pkg {
		ip := []string{"fmt"}
		for _, i := range imports {
			ip = append(ip, module+"/"+i)
		}
		return pkg{ImportPath: module + "/" + path, Imports: ip}
	}
	tp := func(path string, imports ...string) pkg {
		x := p(path, imports...)
		x.Imports, x.TestImports = nil, x.Imports
		return x
	}
	xp := func(path string, imports ...string) pkg {
		x := p(path, imports...)
		x.Imports, x.XTestImports = nil, x.Imports
		return x
	}
	cases := []struct {
		p    pkg
		want []string // each violation found, in order
	}{
		{p("eval", "train/medusa"), []string{"eval imports train/medusa: the stages never import each other"}},
		{p("train", "capture/distill"), []string{"the stages never import each other"}},
		{p("capture/distill", "eval"), []string{"the stages never import each other"}},
		{p("pkg/generate", "data"), []string{"nothing under pkg/ imports a stage, capture or data"}},
		{p("pkg/eval"), []string{"pkg/eval: in no layer"}},
		{p("pkg/drafters/medusa", "train/medusa"), []string{"nothing under pkg/ imports a stage"}},
		{p("pkg/drafters/medusa", "capture"), []string{"nothing under pkg/ imports a stage, capture or data"}},
		{p("pkg/target", "cmd/drafter"), []string{"commands and scripts are never imported"}},
		{p("data", "capture"), []string{"data and capture import only pkg/"}},
		{p("data/prompts/genstories", "capture"), []string{"data and capture import only pkg/"}},
		{p("capture", "data"), []string{"data and capture import only pkg/"}},
		{p("capture", "capture/distill"), []string{"data and capture import only pkg/"}},
		{p("eval", "cmd/drafter"), []string{"commands and scripts are never imported"}},
		{p("train", "scripts/gguf"), []string{"commands and scripts are never imported"}},
		{p("pkg/model", "pkg/target"), []string{"layer 2 imports layer 3 above it"}},
		{p("pkg/tensor", "pkg/drafters/eagle3"), []string{"layer 0 imports layer 3 above it"}},
		{p("pkg/tensor/cpu", "pkg/nn"), []string{"layer 0 imports layer 2 above it"}},
		{p("pkg/tensor", "pkg/tensor/cpu"), []string{"pkg/tensor imports pkg/tensor/cpu: the device interface and its conformance suite"}},
		{p("pkg/tensor/tensortest", "pkg/tensor/cuda"), []string{"pkg/tensor/tensortest imports pkg/tensor/cuda: the device interface"}},
		{p("pkg/tensor/cpu", "pkg/tensor/tensortest", "pkg/tensor"), nil},
		{tp("pkg/tensor", "pkg/tensor/cpu"), nil},
		{p("pkg/checkpoint", "pkg/model"), []string{"layer 1 imports layer 2 above it"}},
		{p("capture/distill", "internal/testmodel"), []string{"internal/ holds test helpers, imported only by tests"}},
		{p("pkg/model", "pkg/unplaced"), []string{"the imported package is in no layer"}},
		{p("tools/x", "pkg/model"), []string{"tools/x: in no layer"}},
		{p("pkg/eval", "train/eagle3"), []string{"pkg/eval imports train/eagle3: nothing under pkg/ imports a stage", "pkg/eval: in no layer"}},
		{p("train", "bench"), []string{"layer 4 imports layer 5 above it"}},
		{p("bench", "cmd/drafter"), []string{"commands and scripts are never imported"}},
		// Tests: the same rules, but for the helpers and other stages.
		{tp("pkg/spec", "eval"), []string{"pkg/spec test imports eval: nothing under pkg/ imports a stage"}},
		{xp("pkg/chat", "data"), []string{"pkg/chat test imports data: nothing under pkg/"}},
		{tp("data", "capture/distill"), []string{"data and capture import only pkg/"}},
		{tp("pkg/sample", "cmd/drafter"), []string{"commands and scripts are never imported"}},
	}
	for _, c := range cases {
		v := violations([]pkg{c.p})
		ok := len(v) == len(c.want)
		for i := 0; ok && i < len(v); i++ {
			ok = strings.Contains(v[i], c.want[i])
		}
		if !ok {
			t.Errorf("%s importing %v %v %v: violations %q, want %q", c.p.ImportPath, c.p.Imports, c.p.TestImports, c.p.XTestImports, v, c.want)
		}
	}
	allowed := []pkg{
		p("train", "capture", "pkg/drafters/medusa", "pkg/target", "train/optim"),
		p("train/loop", "capture", "pkg/drafters", "pkg/atomicfile"),
		p("eval", "pkg/drafters", "pkg/drafters/methods", "pkg/target", "data"),
		p("capture/distill", "capture", "data", "pkg/target", "capture/distill/internal"),
		p("data", "pkg/chat", "pkg/tokenizer"),
		p("data/prompts/genstories", "data", "pkg/atomicfile"),
		p("capture", "pkg/tensor", "pkg/finite", "pkg/filecache"),
		p("pkg/model", "pkg/nn", "pkg/tensor", "pkg/checkpoint", "pkg/arch", "pkg/safetensors"),
		p("pkg/drafters/methods", "pkg/drafters", "pkg/drafters/eagle3", "pkg/drafters/medusa"),
		p("pkg/tensor", "pkg/tensor/internal/kernel"),
		p("pkg/target", "pkg/model", "pkg/fingerprint", "pkg/tokenizer", "pkg/chat"),
		p("cmd/drafter", "eval", "train", "capture/distill", "pkg/inspect"),
		p("scripts/compare", "eval"),
		p("bench", "capture/distill", "train/medusa", "train/eagle3", "pkg/model"),
		p("cmd/drafter", "bench"),
		p("internal/testmodel", "pkg/safetensors"),
		tp("eval", "train/medusa", "train/eagle3", "internal/testutil"),
		tp("train", "capture/distill", "internal/testmodel"),
		xp("pkg/tensor", "internal/testutil"),
		xp("pkg/nn", "pkg/model"),
		tp("pkg/checkpoint", "internal/testmodel", "pkg/safetensors"),
		{ImportPath: "github.com/other/module", Imports: []string{module + "/cmd/drafter"}},
	}
	if v := violations(allowed); len(v) > 0 {
		t.Errorf("allowed imports reported: %q", v)
	}
}
