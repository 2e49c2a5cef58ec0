// Command docscheck fails when the documentation names something the
// repository does not have: a package or file path (pkg/..., cmd/...,
// train/..., capture/..., eval, data/..., internal/..., scripts/...,
// docs/..., models/...), a package-qualified identifier (pkg/x.Name), a
// source file named on its own beside the package it belongs to, a
// `make` target or a `drafter` command. It reads docs/*.md and README.md under the module root
// (the argument, default the current directory) and prints each such name
// with its file and line, exiting 1 when there is one. `make vet` runs it,
// so that a moved or renamed package breaks the build until the prose
// follows it: the docs are read by people deciding where code goes, and a
// stale path there sends them to the wrong place.
//
// What it reads as a name:
//
//   - Anywhere in the text, backticks or not: a path whose first segment is
//     one of the roots above (pkg/tensor/cpu, docs/performance.md). It must
//     exist; "...", "*" and "<placeholder>" segments stand for any, so
//     pkg/drafters/... and pkg/arch/<family>.go need only what comes before
//     them. A last segment pkg.Name names an identifier: the package must
//     declare Name at top level.
//   - In backticks: a root on its own (`eval`, `capture`), and a source file
//     named on its own (`forward.go`), which must be in the folder of a
//     path the same paragraph (list item, table row) names, or anywhere in
//     the repository when the paragraph names none.
//   - `make X` in backticks, and make X at the start of a line of a code
//     block: X must be a target of the Makefile. `drafter X` likewise: X
//     must be one of the commands cmd/drafter defines (a cobra command's
//     Use).
package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// roots are the first segments of the repository paths the docs name.
var roots = []string{"pkg", "cmd", "train", "capture", "eval", "data", "internal", "scripts", "docs", "models"}

// sourceExts are the extensions of a file name given on its own that is
// checked: the repository's code. Other bare names (config.json,
// manifest.json, model.safetensors) are the files drafter reads and writes,
// not the repository's.
var sourceExts = map[string]bool{".go": true, ".s": true, ".h": true, ".c": true, ".cc": true, ".cu": true, ".sh": true}

var (
	// rootedPath matches a path starting at one of roots, not inside a
	// longer path, URL or word (the character before it is none of these).
	rootedPath = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./:-])((?:` + strings.Join(roots, "|") + `)(?:/[A-Za-z0-9_.*<>-]+)+/?|(?:` + strings.Join(roots, "|") + `)/)`)
	backticked = regexp.MustCompile("`([^`]+)`")
	bareSource = regexp.MustCompile(`^[A-Za-z0-9_.-]+\.[a-z]+$`)
	codeMake   = regexp.MustCompile(`^\s*make\s+(.+)$`)
	codeCmd    = regexp.MustCompile(`^\s*drafter\s+(\S+)`)
	cobraUse   = regexp.MustCompile(`Use:\s*"([a-z0-9-]+)`)
	makeRule   = regexp.MustCompile(`^([A-Za-z0-9_./ -]+):([^=]|$)`)
)

// Problem is one name that does not exist, where the docs give it.
type Problem struct {
	File string // relative to the root
	Line int
	Name string
	Why  string
}

// String is how main prints it: file:line: name: why.
func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Name, p.Why) }

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	problems, err := Check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docscheck:", err)
		os.Exit(1)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "docscheck: %d names in the docs that the repository does not have\n", len(problems))
		os.Exit(1)
	}
}

// Check reads docs/*.md and README.md under root and returns every name
// they give that does not exist, in file and line order.
func Check(root string) ([]Problem, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "README.md")); err == nil {
		files = append([]string{filepath.Join(root, "README.md")}, files...)
	}
	c := &checker{root: root, idents: map[string]map[string]bool{}}
	if c.targets, err = makeTargets(filepath.Join(root, "Makefile")); err != nil {
		return nil, err
	}
	if c.commands, err = commands(filepath.Join(root, "cmd", "drafter")); err != nil {
		return nil, err
	}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		if err := c.file(f, filepath.ToSlash(rel)); err != nil {
			return nil, err
		}
	}
	return c.problems, nil
}

// checker holds what a run has learnt of the repository.
type checker struct {
	root     string
	targets  map[string]bool
	commands map[string]bool            // drafter's commands
	idents   map[string]map[string]bool // package folder -> its top-level names
	names    map[string]bool            // every file name in the repository, read once
	problems []Problem
}

// line is one line of a document and the paragraph it belongs to.
type line struct {
	n    int
	text string
	code bool // inside a ``` block
	para int
}

// file checks one document.
func (c *checker) file(name, rel string) error {
	lines, err := readLines(name)
	if err != nil {
		return err
	}
	// The folders each paragraph names, for the source files named alone.
	dirs := map[int][]string{}
	for _, l := range lines {
		for _, p := range rootedPaths(l.text) {
			if d := c.folderOf(p); d != "" {
				dirs[l.para] = append(dirs[l.para], d)
			}
		}
	}
	for _, l := range lines {
		c.line(rel, l, dirs[l.para])
	}
	return nil
}

// readLines splits a document into lines and paragraphs: a blank line, a
// heading, a list item and a table row each start a new paragraph, and so
// does every line of a code block.
func readLines(name string) ([]line, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []line
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	code, para, n := false, 0, 0
	for sc.Scan() {
		n++
		t := sc.Text()
		trim := strings.TrimSpace(t)
		if strings.HasPrefix(trim, "```") {
			code = !code
			para++
			continue
		}
		if code || trim == "" || strings.HasPrefix(trim, "#") || strings.HasPrefix(trim, "|") || listItem(trim) {
			para++
		}
		out = append(out, line{n: n, text: t, code: code, para: para})
		if trim == "" || code || strings.HasPrefix(trim, "|") {
			para++
		}
	}
	return out, sc.Err()
}

// listItem reports whether a trimmed line starts a list item.
func listItem(t string) bool {
	if strings.HasPrefix(t, "- ") || strings.HasPrefix(t, "* ") {
		return true
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	return i > 0 && strings.HasPrefix(t[i:], ". ")
}

// line checks the names in one line; dirs are the folders its paragraph
// names.
func (c *checker) line(file string, l line, dirs []string) {
	report := func(name, why string) {
		c.problems = append(c.problems, Problem{File: file, Line: l.n, Name: name, Why: why})
	}
	for _, p := range rootedPaths(l.text) {
		if why := c.path(p); why != "" {
			report(p, why)
		}
	}
	if l.code {
		if m := codeMake.FindStringSubmatch(l.text); m != nil {
			for _, t := range makeArgs(m[1]) {
				if !c.targets[t] {
					report("make "+t, "no such target in the Makefile")
				}
			}
		}
		if m := codeCmd.FindStringSubmatch(l.text); m != nil {
			c.command(m[1], report)
		}
		return
	}
	for _, m := range backticked.FindAllStringSubmatch(l.text, -1) {
		tok := strings.TrimSpace(m[1])
		switch {
		case strings.HasPrefix(tok, "make "):
			for _, t := range makeArgs(tok[len("make "):]) {
				if !c.targets[t] {
					report("make "+t, "no such target in the Makefile")
				}
			}
		case strings.HasPrefix(tok, "drafter "):
			c.command(strings.Fields(tok)[1], report)
		case isRoot(tok):
			if !c.isDir(tok) {
				report(tok, "no such package or folder")
			}
		case bareSource.MatchString(tok) && sourceExts[path.Ext(tok)]:
			if why := c.bareFile(tok, dirs); why != "" {
				report(tok, why)
			}
		}
	}
}

// command reports the word after "drafter" when it is not one of its
// commands (flags and <placeholders> are not checked).
func (c *checker) command(word string, report func(name, why string)) {
	if strings.HasPrefix(word, "-") || strings.ContainsAny(word, "<>[]{}|$") || c.commands[word] {
		return
	}
	report("drafter "+word, "no such command in cmd/drafter")
}

// rootedPaths returns the paths starting at one of roots in s, without
// the punctuation that may end a sentence after them.
func rootedPaths(s string) []string {
	var out []string
	for _, m := range rootedPath.FindAllStringSubmatch(s, -1) {
		p := strings.TrimRight(m[1], ".,:;")
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// makeArgs returns the targets of a make command line: its words that are
// not options, variable settings or the rest of a shell line.
func makeArgs(s string) []string {
	var out []string
	for _, w := range strings.Fields(s) {
		if strings.ContainsAny(w, "#;&|<>`$") {
			break
		}
		if strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
			continue
		}
		out = append(out, w)
	}
	return out
}

// isRoot reports whether s is one of roots on its own.
func isRoot(s string) bool {
	for _, r := range roots {
		if s == r {
			return true
		}
	}
	return false
}

// path checks a rooted path and says why it does not exist ("" when it
// does).
func (c *checker) path(p string) string {
	clean := strings.TrimSuffix(p, "/")
	segs := strings.Split(clean, "/")
	// Placeholders and wildcards: what comes before them must exist, and
	// a glob must match.
	for i, s := range segs {
		if s == "..." || strings.ContainsAny(s, "<>{}") {
			if pre := strings.Join(segs[:i], "/"); !c.isDir(pre) {
				return "no such folder " + pre
			}
			return ""
		}
		if strings.Contains(s, "*") {
			m, _ := filepath.Glob(filepath.Join(c.root, filepath.FromSlash(strings.Join(segs[:i+1], "/"))))
			if len(m) == 0 {
				return "matches nothing"
			}
			if i == len(segs)-1 {
				return ""
			}
			return c.path(strings.Join(segs[:i], "/") + "/...")
		}
	}
	full := filepath.Join(c.root, filepath.FromSlash(clean))
	st, err := os.Stat(full)
	switch {
	case err == nil && strings.HasSuffix(p, "/") && !st.IsDir():
		return "a file, not a folder"
	case err == nil:
		return ""
	}
	// pkg/x.Name: an identifier of the package in pkg/x.
	last := segs[len(segs)-1]
	if i := strings.IndexByte(last, '.'); i > 0 {
		dir := strings.Join(append(segs[:len(segs)-1:len(segs)-1], last[:i]), "/")
		ident := strings.SplitN(last[i+1:], ".", 2)[0]
		if c.isDir(dir) && ident != "" && ident[0] >= 'A' && ident[0] <= 'Z' {
			names, err := c.declared(dir)
			if err != nil {
				return err.Error()
			}
			if !names[ident] {
				return "package " + dir + " declares no " + ident
			}
			return ""
		}
	}
	return "no such file or folder"
}

// bareFile checks a source file named on its own: it must be in one of
// dirs, or anywhere in the repository when dirs is empty.
func (c *checker) bareFile(name string, dirs []string) string {
	if len(dirs) == 0 {
		if c.names == nil {
			c.names = map[string]bool{}
			filepath.WalkDir(c.root, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() && p != c.root && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				if err == nil && !d.IsDir() {
					c.names[d.Name()] = true
				}
				return nil
			})
		}
		if !c.names[name] {
			return "no such file in the repository"
		}
		return ""
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(d), name)); err == nil {
			return ""
		}
	}
	uniq := append([]string(nil), dirs...)
	sort.Strings(uniq)
	uniq = compact(uniq)
	return "not in " + strings.Join(uniq, ", ") + " (the folders its paragraph names)"
}

// compact drops the repeats from a sorted slice.
func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// folderOf returns the folder a rooted path names or lies in ("" when it
// names nothing that exists), for the source files its paragraph names.
func (c *checker) folderOf(p string) string {
	clean := strings.TrimSuffix(p, "/")
	if strings.ContainsAny(clean, "*<>{}") || strings.Contains(clean, "...") {
		return ""
	}
	if c.isDir(clean) {
		return clean
	}
	dir, last := path.Split(clean)
	if i := strings.IndexByte(last, '.'); i > 0 && c.isDir(dir+last[:i]) {
		return dir + last[:i] // pkg/x.Name: the package's folder
	}
	if dir := path.Dir(clean); c.isDir(dir) {
		return dir
	}
	return ""
}

// isDir reports whether the repository has the folder p.
func (c *checker) isDir(p string) bool {
	st, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(p)))
	return err == nil && st.IsDir()
}

// declared returns the top-level names the Go package in dir declares
// (its tests' too: a doc may name a test).
func (c *checker) declared(dir string) (map[string]bool, error) {
	if names, ok := c.idents[dir]; ok {
		return names, nil
	}
	names := map[string]bool{}
	fset := token.NewFileSet()
	matches, _ := filepath.Glob(filepath.Join(c.root, filepath.FromSlash(dir), "*.go"))
	for _, m := range matches {
		f, err := parser.ParseFile(fset, m, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	c.idents[dir] = names
	return names, nil
}

// commands reads the names of the cobra commands the Go files in dir
// define: the first word of each Use.
func commands(dir string) (map[string]bool, error) {
	names := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range cobraUse.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	return names, nil
}

// makeTargets reads the targets the Makefile defines (the names before a
// rule's colon, not variable assignments or recipe lines).
func makeTargets(name string) (map[string]bool, error) {
	b, err := os.ReadFile(name)
	if os.IsNotExist(err) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	targets := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "#") {
			continue
		}
		if m := makeRule.FindStringSubmatch(l); m != nil {
			for _, t := range strings.Fields(m[1]) {
				targets[t] = true
			}
		}
	}
	return targets, nil
}
