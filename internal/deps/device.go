package deps

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
)

// The device rule: the devices, pkg/tensor and the packages under it (the
// CPU device in pkg/tensor/cpu, a GPU device beside it), are the only code
// that reaches below Go for compute. No other package imports their kernels
// (pkg/tensor/internal/kernel), uses cgo, holds C, C++, assembly or prebuilt
// object files, or imports a way to load native code at run time (as the CPU
// device loads OpenBLAS with dlopen), so that threading, kernel and layout
// choices stay the devices', and a device can be added beside the others
// without another package knowing. Nor does another package call the
// functions pkg/tensor exports for a device's implementation (a tensor's
// host storage: hostOnly), so that the layers above reach values only
// through a Device and run on any device.

// device is the module-relative folder of the devices.
const device = "pkg/tensor"

// hostOnly are the functions of pkg/tensor for a device's implementation
// only (pkg/tensor/host.go); TestDeviceRule checks that the list is that
// file's.
var hostOnly = map[string]bool{
	"HostTensorF32": true, "HostTensorU16": true, "HostTensorI32": true,
	"HostValuesF32": true, "HostValuesU16": true, "HostValuesI32": true,
	"HostKV": true, "HostKVLayers": true,
	"OnDevice": true, "DeviceAddr": true, "NewDeviceKV": true,
}

// kernels is the module-relative path of the device's kernel package.
const kernels = "pkg/tensor/internal/kernel"

// nativeImports are imports that run or load native code.
var nativeImports = map[string]string{
	"C":                            "uses cgo",
	"plugin":                       "loads native code at run time (plugin)",
	"github.com/ebitengine/purego": "loads native code at run time (dlopen without cgo)",
}

// devicePkg adds to pkg what the device rule reads of `go list -json`.
type devicePkg struct {
	pkg
	Dir string
	// Go files of every kind: a cgo file a CGO_ENABLED=0 build leaves out
	// is among IgnoredGoFiles, and is still read.
	GoFiles, CgoFiles, IgnoredGoFiles, TestGoFiles, XTestGoFiles []string
	// Non-Go sources and objects the go command builds or links.
	CFiles, CXXFiles, MFiles, HFiles, FFiles, SFiles, SwigFiles, SwigCXXFiles, SysoFiles []string
}

// deviceViolations returns one line per break of the device rule, sorted, or
// an error when a Go file cannot be read.
func deviceViolations(pkgs []devicePkg) ([]string, error) {
	var out []string
	for _, p := range pkgs {
		from, ok := rel(p.ImportPath)
		if !ok || under(from, device) {
			continue
		}
		for _, imps := range [][]string{p.Imports, p.TestImports, p.XTestImports} {
			for _, imp := range imps {
				if to, ok := rel(imp); ok && under(to, kernels) {
					out = append(out, fmt.Sprintf("%s imports %s: only the CPU device (%s) runs its kernels", from, to, device))
				}
			}
		}
		if len(p.CgoFiles) > 0 {
			out = append(out, fmt.Sprintf("%s uses cgo (%s): only the CPU device (%s) does", from, p.CgoFiles[0], device))
		}
		for _, fs := range [][]string{p.CFiles, p.CXXFiles, p.MFiles, p.HFiles, p.FFiles, p.SFiles, p.SwigFiles, p.SwigCXXFiles, p.SysoFiles} {
			for _, f := range fs {
				out = append(out, fmt.Sprintf("%s holds %s: native code and kernels belong to the CPU device (%s)", from, f, device))
			}
		}
		found := map[string]bool{}
		for _, fs := range [][]string{p.GoFiles, p.CgoFiles, p.IgnoredGoFiles, p.TestGoFiles, p.XTestGoFiles} {
			for _, f := range fs {
				imps, calls, err := fileUses(filepath.Join(p.Dir, f))
				if err != nil {
					return nil, err
				}
				for _, imp := range imps {
					if why, ok := nativeImports[imp]; ok && !found[imp] {
						found[imp] = true
						out = append(out, fmt.Sprintf("%s %s (%s imports %q): only the CPU device (%s) does", from, why, f, imp, device))
					}
				}
				for _, c := range calls {
					out = append(out, fmt.Sprintf("%s calls tensor.%s (%s): only a device's implementation (%s/...) uses its host storage", from, c, f, device))
				}
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// fileUses returns the import paths of a Go file, whatever its build
// constraints, and the hostOnly functions of pkg/tensor it names (called or
// not), in order.
func fileUses(path string) (imps, calls []string, err error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	names := map[string]bool{} // the names pkg/tensor is imported as
	for _, s := range f.Imports {
		p, err := strconv.Unquote(s.Path.Value)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: import %s: %w", path, s.Path.Value, err)
		}
		imps = append(imps, p)
		if p == module+"/"+device {
			name := "tensor"
			if s.Name != nil {
				name = s.Name.Name
			}
			names[name] = true
		}
	}
	if len(names) == 0 {
		return imps, nil, nil
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if s, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := s.X.(*ast.Ident); ok && names[x.Name] && hostOnly[s.Sel.Name] {
				calls = append(calls, s.Sel.Name)
			}
		}
		return true
	})
	return imps, calls, nil
}
