package medusa

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// TestCalibratedTreeRecorded: the tree given to Export is written to
// drafter.json and read back as the heads' default tree (an explicit --tree
// still wins, and without one recorded the static default applies); a
// recorded tree deeper than the heads, or not closed under prefixes, is
// refused naming drafter.json.
func TestCalibratedTreeRecorded(t *testing.T) {
	g := Geometry{Hidden: 8, Vocab: 13, Heads: 3, Layers: 1}
	m, _ := randomHeads(t, g, 3)
	tree := spec.Choices{{0}, {1}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}}
	dir := t.TempDir()
	if err := Export(dir, m, ExportInfo{TargetFingerprint: "sha256:abc", Tree: tree}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, drafters.ProvenanceFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	load := func(data []byte) (spec.Choices, error) {
		ld, err := vllm{}.load(filepath.Join(dir, VLLMDir))
		if err != nil {
			t.Fatal(err)
		}
		return checkProvenance(&drafters.Provenance{Path: path, Data: data}, filepath.Join(dir, VLLMDir), ld)
	}
	got, err := load(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, tree) {
		t.Fatalf("drafter.json's tree read back as %v, want %v", got, tree)
	}
	d := &Drafter{h: m, tree: got}
	c, err := d.Configure(drafters.Decoding{Mode: drafters.ModeTree})
	if err != nil || !reflect.DeepEqual(c.Tree, tree) {
		t.Fatalf("default tree %v (%v), want the recorded %v", c.Tree, err, tree)
	}
	explicit := spec.Choices{{0}, {0, 0}}
	if c, err = d.Configure(drafters.Decoding{Mode: drafters.ModeTree, Tree: explicit}); err != nil || !reflect.DeepEqual(c.Tree, explicit) {
		t.Fatalf("an explicit tree gave %v (%v)", c.Tree, err)
	}
	d.tree = nil
	if c, err = d.Configure(drafters.Decoding{Mode: drafters.ModeTree}); err != nil || !reflect.DeepEqual(c.Tree, spec.DefaultChoices(3)) {
		t.Fatalf("without a recorded tree: %v (%v), want the static default", c.Tree, err)
	}
	for _, bad := range []struct{ tree, want string }{
		{`[[0],[0,0],[0,0,0],[0,0,0,0]]`, "depth 4 but the export has 3 Medusa heads"},
		{`[[0],[1,0]]`, "prefix [1] is missing"},
	} {
		b := strings.Replace(string(data), `"tree": [`, `"tree": `+bad.tree+`, "was": [`, 1)
		if b == string(data) {
			t.Fatalf("drafter.json has no tree to replace: %s", data)
		}
		_, err := load([]byte(b))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("tree %s: %v, want an error naming %s and %q", bad.tree, err, path, bad.want)
		}
	}
}
