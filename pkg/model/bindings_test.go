package model

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
)

// TestBindingsMatchCheckWeights: the loader binds exactly the tensors, with
// the shapes, that checkpoint.CheckWeights requires of a checkpoint (and
// refuses any other), so a checkpoint that opens loads every tensor it holds.
func TestBindingsMatchCheckWeights(t *testing.T) {
	paths, err := filepath.Glob("../checkpoint/testdata/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no config fixtures: %v", err)
	}
	paths = append(paths, filepath.Join(testutil.Stories260k(), "config.json"))
	for _, p := range paths {
		cfg, err := checkpoint.LoadConfig(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		m, err := newModel(cfg, nil)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		m.Layers = make([]Layer, cfg.NumLayers)
		bound := map[string]string{}
		for _, b := range m.bindings() {
			bound[b.name] = fmt.Sprint(b.shape)
		}
		specs := cfg.Tensors()
		for _, s := range specs {
			if got, ok := bound[s.Name]; !ok || got != fmt.Sprint(s.Shape) {
				t.Errorf("%s: CheckWeights requires %s %v; the loader binds it with shape %q (bound: %v)", p, s.Name, s.Shape, got, ok)
			}
		}
		if len(bound) != len(specs) {
			t.Errorf("%s: the loader binds %d tensors, CheckWeights requires %d", p, len(bound), len(specs))
		}
		m.Close()
	}
}
