package methods

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/drafters/medusa"
)

// TestKindsAndLayouts: every method has its own kind and lists its own
// layouts, and All builds a fresh list each time (nothing a caller could
// change for others).
func TestKindsAndLayouts(t *testing.T) {
	kinds := map[drafters.Kind]bool{}
	for _, m := range All() {
		if m.Kind() == "" || kinds[m.Kind()] {
			t.Errorf("kind %q is empty or listed twice", m.Kind())
		}
		kinds[m.Kind()] = true
		ls := m.Layouts()
		if len(ls) == 0 || slices.Contains(ls, "") || len(slices.Compact(slices.Sorted(slices.Values(ls)))) != len(ls) {
			t.Errorf("%s lists layouts %q; want distinct names", m.Kind(), ls)
		}
	}
	if !kinds[medusa.Kind] || !kinds[eagle3.Kind] {
		t.Fatalf("methods %v lack medusa or eagle3", kinds)
	}
	a := All()
	a[0] = nil
	if All()[0] == nil {
		t.Fatal("All returns a shared list")
	}
}

// TestDetectEachLayout exports a drafter in every layout of every method and
// checks that, through the list, exactly its method recognises each export
// folder, as the layout it was written in, and none recognises an empty
// folder.
func TestDetectEachLayout(t *testing.T) {
	root := t.TempDir()
	want := map[string][2]string{} // folder -> kind, layout

	g := medusa.Geometry{Hidden: 4, Vocab: 9, Heads: 2, Layers: 1}
	heads, err := medusa.NewHeads(g, make([]float32, g.Vocab*g.Hidden), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := medusa.Export(filepath.Join(root, "medusa-run"), heads, medusa.ExportInfo{}); err != nil {
		t.Fatal(err)
	}
	want[filepath.Join(root, "medusa-run", medusa.VLLMDir)] = [2]string{string(medusa.Kind), medusa.VLLMDir}
	want[filepath.Join(root, "medusa-run", medusa.MedusaDir)] = [2]string{string(medusa.Kind), medusa.MedusaDir}

	eg := eagle3.Geometry{Hidden: 8, Heads: 2, KVHeads: 1, HeadDim: 4, Intermediate: 12, RMSNormEps: 1e-5,
		RopeTheta: 10000, MaxPositions: 64, Vocab: 16, DraftVocab: 10}
	voc, err := eagle3.BuildVocab(make([]int64, eg.Vocab), eg.DraftVocab)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{eagle3.FormatNative, eagle3.FormatSpeculators} {
		dir := filepath.Join(root, "eagle3-"+f)
		if err := eagle3.Export(dir, eg, eagle3.NewParams(eg), voc, eagle3.ExportOptions{Format: f, DefaultLayers: true}); err != nil {
			t.Fatal(err)
		}
		want[dir] = [2]string{string(eagle3.Kind), f}
	}
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	want[empty] = [2]string{}

	for dir, w := range want {
		var got [][2]string
		for _, m := range All() {
			layout, err := m.Detect(dir)
			if err != nil {
				t.Fatalf("%s: %s: %v", dir, m.Kind(), err)
			}
			if layout != "" {
				if !slices.Contains(m.Layouts(), layout) {
					t.Errorf("%s: %s detects layout %q, which it does not list", dir, m.Kind(), layout)
				}
				got = append(got, [2]string{string(m.Kind()), layout})
			}
		}
		switch {
		case w == [2]string{} && len(got) != 0:
			t.Errorf("%s: detected %v in an empty folder", dir, got)
		case w != [2]string{} && (len(got) != 1 || got[0] != w):
			t.Errorf("%s: detected %v; want exactly %v", dir, got, w)
		}
	}
}

// TestDefaultLayersServeEveryMethod: the default capture holds every
// method's default layers, ascending and each once, so it serves every
// method; a capture without one of EAGLE-3's layers does not serve EAGLE-3,
// and one without the final-norm state serves none.
func TestDefaultLayersServeEveryMethod(t *testing.T) {
	for _, L := range []int{5, 6, 16, 32, 36} {
		c := &checkpoint.Config{NumLayers: L}
		layers, err := DefaultLayers(c)
		if err != nil {
			t.Fatalf("L=%d: %v", L, err)
		}
		if !slices.IsSorted(layers) || len(slices.Compact(slices.Clone(layers))) != len(layers) {
			t.Fatalf("L=%d: default layers %v are not ascending and distinct", L, layers)
		}
		var all []drafters.Kind
		for _, m := range All() {
			all = append(all, m.Kind())
			for _, k := range m.Capture(c).Layers {
				if !slices.Contains(layers, k) {
					t.Errorf("L=%d: %s's layer %d is not captured by default (%v)", L, m.Kind(), k, layers)
				}
			}
		}
		if got := Serves(c, layers, true); !slices.Equal(got, all) {
			t.Errorf("L=%d: the default capture serves %v, want %v", L, got, all)
		}
		if got := Serves(c, layers, false); len(got) != 0 {
			t.Errorf("L=%d: a capture without final_norm serves %v", L, got)
		}
		e := eagle3.DefaultLayers(L)
		fewer := slices.DeleteFunc(slices.Clone(layers), func(k int) bool { return k == e[1] })
		if slices.Contains(Serves(c, fewer, true), eagle3.Kind) {
			t.Errorf("L=%d: a capture without layer %d serves eagle3", L, e[1])
		}
	}
	if _, err := DefaultLayers(&checkpoint.Config{NumLayers: 0}); err == nil {
		t.Error("a target without layers got default capture layers")
	}
}
