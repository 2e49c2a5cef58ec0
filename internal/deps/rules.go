// Package deps holds the tests that keep the module's layering
// (docs/architecture.md). Every package belongs to a layer, and imports only
// its own layer or the ones below:
//
//	6  cmd, scripts                       the binary and the tools
//	5  bench                              the whole pipeline measured (drafter bench)
//	4  capture/distill, train, eval       the three stages
//	3  pkg/drafters, pkg/target, pkg/generate, pkg/inspect, pkg/exportcheck,
//	   capture, data
//	2  pkg/model, pkg/nn, pkg/kvcache, pkg/spec, pkg/sample
//	1  the file formats and configurations under pkg/ (safetensors,
//	   checkpoint, arch, tokenizer, chat, fingerprint, ...)
//	0  pkg/tensor (the device interface) and the devices under it,
//	   pkg/tensor/cpu and pkg/tensor/cuda
//
// and, besides: pkg/tensor (the device interface) and its conformance suite
// import no device (pkg/tensor/cpu, pkg/tensor/cuda); the stages never import
// each other (train reads shards through capture's reader, never
// capture/distill); nothing under pkg/ imports a stage, capture, data or a
// command; data and capture import only pkg/; nothing imports a command or a
// script; internal/ holds test helpers, imported only by tests.
//
// Besides the layering, the device rule (device.go): only the devices,
// pkg/tensor and the packages under it, import the kernel package, use cgo,
// hold native sources, load native code or call pkg/tensor's functions for
// a device's implementation (its host storage).
//
// Tests follow the same rules with two exceptions: any test may import the
// helpers under internal/, and a stage's tests may import another stage to
// make real inputs (train's tests distil captures, eval's tests train
// drafters). A test under pkg/, capture or data still never imports a stage.
package deps

import (
	"fmt"
	"sort"
	"strings"
)

// module is this repository's module path.
const module = "github.com/drafter-ai/drafter"

// pkg is what the rules need of one package of `go list -json`.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// layer is a group of packages, named by the module-relative folders that
// hold them; a package belongs to the group of the longest folder holding it.
type layer struct {
	rank  int
	roots []string
}

// layers lists every package of the module. A new top-level folder or a new
// package directly under pkg/ must be placed here (and in
// docs/architecture.md); the rule test names a package that is in no layer.
var layers = []layer{
	{0, []string{"pkg/tensor", "pkg/tensor/cpu"}},
	{1, []string{"pkg/devices", "pkg/finite", "pkg/atomicfile", "pkg/filecache", "pkg/outlock", "pkg/safetensors",
		"pkg/arch", "pkg/checkpoint", "pkg/tokenizer", "pkg/chat", "pkg/fingerprint", "pkg/completions"}},
	{2, []string{"pkg/nn", "pkg/kvcache", "pkg/sample", "pkg/spec", "pkg/model"}},
	{3, []string{"pkg/drafters", "pkg/target", "pkg/generate", "pkg/inspect", "pkg/exportcheck", "capture", "data"}},
	{4, stages},
	{5, []string{"bench"}},
	{6, []string{"cmd", "scripts"}},
	{7, []string{"internal"}},
}

// devices are the compute devices beside the device interface (pkg/tensor),
// which imports none of them: each device imports it.
var devices = []string{"pkg/tensor/cpu", "pkg/tensor/cuda"}

// isDevice reports whether p is a device or lies in one.
func isDevice(p string) bool {
	for _, d := range devices {
		if under(p, d) {
			return true
		}
	}
	return false
}

// stages are the three pipeline stages.
var stages = []string{"capture/distill", "train", "eval"}

// under reports whether the module-relative path p is root or lies below it.
func under(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }

// place returns the folder of layers that holds p (the longest) and its
// layer's rank; ok is false when no layer holds p.
func place(p string) (root string, rank int, ok bool) {
	for _, l := range layers {
		for _, r := range l.roots {
			if under(p, r) && len(r) > len(root) {
				root, rank, ok = r, l.rank, true
			}
		}
	}
	return root, rank, ok
}

// rel returns the module-relative path of an import path, and false for
// imports from outside the module (the standard library, dependencies).
func rel(importPath string) (string, bool) {
	if importPath == module {
		return "", true
	}
	return strings.CutPrefix(importPath, module+"/")
}

// isStage reports whether p is a stage or lies in one.
func isStage(p string) bool {
	for _, s := range stages {
		if under(p, s) {
			return true
		}
	}
	return false
}

// violations returns one line per import that breaks a rule, sorted.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		from, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		if _, _, ok := place(from); !ok {
			out = append(out, fmt.Sprintf("%s: in no layer (add it to internal/deps and docs/architecture.md)", from))
		}
		seen := map[string]bool{} // an import found in the code is not checked again for its tests
		check := func(imports []string, test bool) {
			for _, imp := range imports {
				to, ok := rel(imp)
				if !ok || seen[to] {
					continue
				}
				seen[to] = true
				if why := rule(from, to, test); why != "" {
					kind := "imports"
					if test {
						kind = "test imports"
					}
					out = append(out, fmt.Sprintf("%s %s %s: %s", from, kind, to, why))
				}
			}
		}
		check(p.Imports, false)
		check(p.TestImports, true)
		check(p.XTestImports, true)
	}
	sort.Strings(out)
	return out
}

// rule returns why the package from may not import to (in its tests when
// test is set), or "" when it may.
func rule(from, to string, test bool) string {
	fromRoot, fromRank, fromKnown := place(from)
	toRoot, toRank, toKnown := place(to)
	switch {
	case !test && isDevice(to) && fromRoot == "pkg/tensor" && !isDevice(from):
		return "the device interface and its conformance suite (pkg/tensor, pkg/tensor/tensortest) import no device: the devices import them"
	case fromKnown && fromRoot == toRoot:
		return "" // within one package's own folder
	case under(to, "cmd") || under(to, "scripts"):
		return "commands and scripts are never imported"
	case under(to, "internal"):
		if test {
			return ""
		}
		return "internal/ holds test helpers, imported only by tests"
	case isStage(from) && isStage(to):
		if test {
			return ""
		}
		return "the stages never import each other (train reads shards through capture, never capture/distill)"
	case under(from, "pkg") && (isStage(to) || toRoot == "capture" || toRoot == "data"):
		return "nothing under pkg/ imports a stage, capture or data"
	case (fromRoot == "data" || fromRoot == "capture") && !under(to, "pkg"):
		return "data and capture import only pkg/"
	case !toKnown:
		return "the imported package is in no layer"
	case fromKnown && toRank > fromRank:
		return fmt.Sprintf("layer %d imports layer %d above it", fromRank, toRank)
	}
	return ""
}
