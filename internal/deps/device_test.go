package deps

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Only the CPU device (pkg/tensor and below) imports the kernel package,
// uses cgo, holds native sources or loads native code (OpenBLAS with
// dlopen): the whole module, tests included, under the build settings of
// the run (make test runs it with cgo and with CGO_ENABLED=0).
func TestDeviceRule(t *testing.T) {
	pkgs := listPackages(t)
	v, err := deviceViolations(pkgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) > 0 {
		t.Fatalf("%d breaks of the device rule (docs/architecture.md):\n  %s", len(v), strings.Join(v, "\n  "))
	}
	// The device itself imports the kernels: the checker would see that
	// import anywhere else.
	users := 0
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			if imp == module+"/"+kernels {
				users++
			}
		}
	}
	if users == 0 {
		t.Fatalf("go list shows no importer of %s: the rule checks nothing", kernels)
	}
	// hostOnly lists the functions of pkg/tensor/host.go, every one.
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", device, "host.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var funcs []string
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.IsExported() {
			funcs = append(funcs, fd.Name.Name)
		}
	}
	if len(funcs) != len(hostOnly) {
		t.Errorf("pkg/tensor/host.go exports %q, hostOnly lists %d functions", funcs, len(hostOnly))
	}
	for _, fn := range funcs {
		if !hostOnly[fn] {
			t.Errorf("pkg/tensor/host.go exports %s, which hostOnly does not list", fn)
		}
	}
}

// The checker finds each kind of break, in code and in tests and in files a
// build leaves out, and allows them in the device: the rule test above
// cannot pass by checking nothing.
func TestDeviceViolationsFound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return name
	}
	cgo := write("blas.go", "//go:build cgo\n\npackage nn\n\n// #include <dlfcn.h>\nimport \"C\"\n")
	plugin := write("load_test.go", "package nn\n\nimport (\n\t\"plugin\"\n\t\"testing\"\n)\n")
	purego := write("dl.go", "package nn\n\nimport \"github.com/ebitengine/purego\"\n")
	clean := write("nn.go", "package nn\n\nimport \"fmt\"\n")
	host := write("host.go", "package nn\n\nimport \"github.com/drafter-ai/drafter/pkg/tensor\"\n\nvar x = tensor.HostValuesF32(tensor.HostTensorF32(nil, 0, 0))\n")
	aliased := write("alias_test.go", "package nn\n\nimport t \"github.com/drafter-ai/drafter/pkg/tensor\"\n\nvar kv = t.HostKV\nvar tensor = struct{ HostKV int }{}\nvar y = tensor.HostKV\n")
	p := func(path string) devicePkg {
		return devicePkg{pkg: pkg{ImportPath: module + "/" + path, Imports: []string{"fmt"}}, Dir: dir, GoFiles: []string{clean}}
	}
	with := func(path string, edit func(*devicePkg)) devicePkg {
		x := p(path)
		edit(&x)
		return x
	}
	kernel := module + "/" + kernels
	cases := []struct {
		p    devicePkg
		want []string // each break found, in order
	}{
		{with("pkg/model", func(x *devicePkg) { x.Imports = append(x.Imports, kernel) }),
			[]string{"pkg/model imports pkg/tensor/internal/kernel: only the CPU device"}},
		{with("pkg/nn", func(x *devicePkg) { x.XTestImports = []string{kernel} }), []string{"pkg/nn imports pkg/tensor/internal/kernel"}},
		{with("pkg/nn", func(x *devicePkg) { x.CgoFiles = []string{cgo} }),
			[]string{`pkg/nn uses cgo (blas.go imports "C")`, "pkg/nn uses cgo (blas.go): only the CPU device"}},
		{with("pkg/nn", func(x *devicePkg) { x.IgnoredGoFiles = []string{cgo} }), []string{`pkg/nn uses cgo (blas.go imports "C")`}},
		{with("train", func(x *devicePkg) { x.TestGoFiles = []string{plugin} }), []string{`train loads native code at run time (plugin) (load_test.go imports "plugin")`}},
		{with("pkg/model", func(x *devicePkg) { x.GoFiles = append(x.GoFiles, purego) }), []string{"pkg/model loads native code at run time (dlopen without cgo)"}},
		{with("pkg/nn", func(x *devicePkg) { x.HFiles = []string{"cblas.h"} }), []string{"pkg/nn holds cblas.h: native code and kernels belong to the CPU device"}},
		{with("eval", func(x *devicePkg) { x.CFiles, x.SFiles = []string{"a.c"}, []string{"dot_amd64.s"} }),
			[]string{"eval holds a.c", "eval holds dot_amd64.s"}},
		{with("pkg/nn", func(x *devicePkg) { x.SysoFiles = []string{"blas.syso"} }), []string{"pkg/nn holds blas.syso"}},
		{with("pkg/nn", func(x *devicePkg) { x.GoFiles = append(x.GoFiles, host) }),
			[]string{"pkg/nn calls tensor.HostTensorF32 (host.go): only a device's implementation", "pkg/nn calls tensor.HostValuesF32 (host.go)"}},
		{with("train/optim", func(x *devicePkg) { x.TestGoFiles = []string{aliased} }), []string{"train/optim calls tensor.HostKV (alias_test.go)"}},
	}
	for _, c := range cases {
		v, err := deviceViolations([]devicePkg{c.p})
		if err != nil {
			t.Fatal(err)
		}
		ok := len(v) == len(c.want)
		for i := 0; ok && i < len(v); i++ {
			ok = strings.Contains(v[i], c.want[i])
		}
		if !ok {
			t.Errorf("%s: breaks %q, want %q", c.p.ImportPath, v, c.want)
		}
	}
	allowed := []devicePkg{
		p("pkg/model"),
		with("pkg/tensor", func(x *devicePkg) {
			x.Imports, x.CgoFiles, x.GoFiles = []string{"C", kernel}, []string{cgo}, []string{clean, purego}
		}),
		with("pkg/tensor/internal/kernel", func(x *devicePkg) { x.SFiles, x.HFiles = []string{"dot_amd64.s"}, []string{"zero_amd64.h"} }),
		with("pkg/tensor/cuda", func(x *devicePkg) { x.CgoFiles, x.Imports = []string{cgo}, []string{kernel} }),
		with("pkg/tensor/cpu", func(x *devicePkg) { x.GoFiles, x.XTestGoFiles = []string{host}, []string{aliased} }),
		{pkg: pkg{ImportPath: "github.com/other/module", Imports: []string{kernel}}, CgoFiles: []string{cgo}},
	}
	if v, err := deviceViolations(allowed); err != nil || len(v) > 0 {
		t.Errorf("allowed packages reported: %q (%v)", v, err)
	}
	if _, err := deviceViolations([]devicePkg{with("pkg/nn", func(x *devicePkg) { x.GoFiles = []string{"missing.go"} })}); err == nil {
		t.Error("an unreadable Go file was not reported")
	}
}
