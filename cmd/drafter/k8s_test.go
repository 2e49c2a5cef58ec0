package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/train"
)

// yamlPaths reads the block mappings of a Kubernetes manifest written in the
// plain subset of YAML the examples use (two-space indentation, "key: value"
// and "- key: value" lines, flow lists on one line, whole-line comments) and
// returns every value by its dotted key path; list items add no path
// element. A tab, an indentation off the two-space grid or a line of another
// form, or keys of one mapping indented differently, fail the test: the
// examples must stay in the subset this reads.
func yamlPaths(t *testing.T, path string) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type open struct {
		indent int
		key    string
		child  int // the indentation of its keys, -1 until the first
	}
	top := open{indent: -1, child: 0}
	var stack []open
	out := map[string][]string{}
	for n, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.Contains(line, "\t") {
			t.Fatalf("%s:%d: a tab", path, n+1)
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		rest := trimmed
		if r, ok := strings.CutPrefix(rest, "- "); ok {
			indent, rest = indent+2, r
		}
		if indent%2 != 0 {
			t.Fatalf("%s:%d: indentation of %d spaces", path, n+1, indent)
		}
		key, val, ok := strings.Cut(rest, ": ")
		if !ok {
			key, ok = strings.CutSuffix(rest, ":")
		}
		if !ok || key == "" || strings.ContainsAny(key, " \"'[{") {
			t.Fatalf("%s:%d: %q is not a key: value line", path, n+1, rest)
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		parent := &top
		if len(stack) > 0 {
			parent = &stack[len(stack)-1]
		}
		if parent.child < 0 {
			parent.child = indent
		}
		if parent.child != indent {
			t.Fatalf("%s:%d: %s is indented by %d spaces, the other keys of its mapping by %d", path, n+1, key, indent, parent.child)
		}
		var p []string
		for _, o := range stack {
			p = append(p, o.key)
		}
		p = append(p, key)
		out[strings.Join(p, ".")] = append(out[strings.Join(p, ".")], val)
		if val == "" {
			stack = append(stack, open{indent: indent, key: key, child: -1})
		}
	}
	return out
}

// one returns the single value at key, failing the test otherwise.
func one(t *testing.T, file string, m map[string][]string, key string) string {
	t.Helper()
	if len(m[key]) != 1 {
		t.Fatalf("%s: %s has %d values %q, want one", file, key, len(m[key]), m[key])
	}
	return m[key][0]
}

// TestKubernetesExample keeps scripts/k8s working: the Indexed Job's
// manifests hold the structure Kubernetes needs (an Indexed Job whose pods
// mount the shared claim; a command-line mistake fails the Job instead of
// being retried), each pod's drafter command line, with its
// JOB_COMPLETION_INDEX expanded, parses with the real command tree into
// --shard i/N of the Job's N completions with an output folder of its own on
// the claim and generation through a serving endpoint, and the train Job's
// --data resolves to exactly those folders.
func TestKubernetesExample(t *testing.T) {
	const dir = "../../scripts/k8s"
	distillFile, trainFile := filepath.Join(dir, "distill-indexed-job.yaml"), filepath.Join(dir, "train-job.yaml")
	dm, tm := yamlPaths(t, distillFile), yamlPaths(t, trainFile)
	args := func(file string, m map[string][]string) []string {
		t.Helper()
		if c := one(t, file, m, "spec.template.spec.containers.command"); c != `["drafter"]` {
			t.Fatalf("%s: command %s, want [\"drafter\"]", file, c)
		}
		var a []string
		if err := json.Unmarshal([]byte(one(t, file, m, "spec.template.spec.containers.args")), &a); err != nil {
			t.Fatalf("%s: args: %v", file, err)
		}
		return a
	}
	for file, m := range map[string]map[string][]string{distillFile: dm, trainFile: tm} {
		for key, want := range map[string]string{
			"apiVersion": "batch/v1", "kind": "Job", "spec.template.spec.restartPolicy": "Never",
			"spec.template.spec.volumes.name": "data", "spec.template.spec.containers.volumeMounts.name": "data",
			"spec.template.spec.containers.volumeMounts.mountPath":       "/data",
			"spec.template.spec.volumes.persistentVolumeClaim.claimName": "drafter-data",
		} {
			if got := one(t, file, m, key); got != want {
				t.Errorf("%s: %s is %q, want %q", file, key, got, want)
			}
		}
	}
	for key, want := range map[string]string{
		"spec.completionMode":                                   "Indexed",
		"spec.podFailurePolicy.rules.action":                    "FailJob",
		"spec.podFailurePolicy.rules.onExitCodes.containerName": one(t, distillFile, dm, "spec.template.spec.containers.name"),
		"spec.podFailurePolicy.rules.onExitCodes.values":        fmt.Sprintf("[%d]", exitUsage),
	} {
		if got := dm[key]; !slices.Contains(got, want) {
			t.Errorf("%s: %s is %q, want %q among them", distillFile, key, got, want)
		}
	}
	n, err := strconv.Atoi(one(t, distillFile, dm, "spec.completions"))
	if err != nil || n < 2 {
		t.Fatalf("%s: completions %q", distillFile, one(t, distillFile, dm, "spec.completions"))
	}

	// Every pod's command line, as Kubernetes expands it.
	root := t.TempDir()
	var model string
	var outs []string
	for i := 0; i < n; i++ {
		var line []string
		for _, a := range args(distillFile, dm) {
			line = append(line, strings.ReplaceAll(a, "$(JOB_COMPLETION_INDEX)", strconv.Itoa(i)))
		}
		if s := strings.Join(line, " "); strings.Contains(s, "$(") {
			t.Fatalf("%s: %s refers to a variable the Job does not set", distillFile, s)
		}
		var o *distillOptions
		r := runCLI(t, func(x any) error { o = x.(*distillOptions); return nil }, line...)
		if r.code != exitOK {
			t.Fatalf("%s, pod %d: drafter %s: exit %d: %s", distillFile, i, strings.Join(line, " "), r.code, r.msg)
		}
		d := o.Distill
		if d.Shard != i || d.NumShards != n || d.Generator == nil || len(d.Generator.URLs) == 0 || slices.Contains(outs, d.Out) {
			t.Fatalf("%s, pod %d: --shard %d/%d, generator %v, --out %s (shared with another pod: %v)", distillFile, i, d.Shard, d.NumShards, d.Generator, d.Out, slices.Contains(outs, d.Out))
		}
		for _, p := range []string{o.Model, d.Prompts, d.Out} {
			if !strings.HasPrefix(p, "/data/") {
				t.Errorf("%s: %s is not on the shared volume mounted at /data", distillFile, p)
			}
		}
		model = o.Model
		outs = append(outs, d.Out)
		// The folder a pod leaves, under a stand-in for the volume.
		if err := os.MkdirAll(filepath.Join(root, d.Out), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, d.Out, capture.ManifestName), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var o *trainOptions
	line := args(trainFile, tm)
	if r := runCLI(t, func(x any) error { o = x.(*trainOptions); return nil }, line...); r.code != exitOK {
		t.Fatalf("%s: drafter %s: exit %d: %s", trainFile, strings.Join(line, " "), r.code, r.msg)
	}
	if o.Run.Model != model {
		t.Errorf("%s trains against %s, the distill Job used %s", trainFile, o.Run.Model, model)
	}
	var data []string
	for _, e := range o.Run.Data {
		data = append(data, filepath.Join(root, e))
	}
	got, err := train.ExpandData(data)
	if err != nil {
		t.Fatalf("%s: --data %v: %v", trainFile, o.Run.Data, err)
	}
	var want []string
	for _, d := range outs {
		want = append(want, filepath.Join(root, d))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: --data %v resolves to %v, want the %d pods' folders %v", trainFile, o.Run.Data, got, n, want)
	}
}
