package bench

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/model"
)

// The shapes' parameter counts are the published checkpoints'.
func TestShapeParams(t *testing.T) {
	for _, c := range []struct {
		shape string
		want  int64
	}{
		{"llama3-1b", 1_235_814_400}, // meta-llama/Llama-3.2-1B
		{"llama3-8b", 8_030_261_248}, // meta-llama/Llama-3.1-8B
	} {
		cfg, _, err := ShapeConfig(c.shape, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n := cfg.NumParams(); n != c.want {
			t.Errorf("%s: NumParams %d, want %d", c.shape, n, c.want)
		}
	}
}

// The 60m shape is pkg/model's bench model.
func Test60MIsBench60M(t *testing.T) {
	cfg, _, err := ShapeConfig("60m", 0)
	if err != nil {
		t.Fatal(err)
	}
	b := model.Bench60MConfig()
	got := []any{cfg.ModelType, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim,
		cfg.RMSNormEps, cfg.RopeTheta, cfg.MaxPositions, cfg.VocabSize, cfg.TieWordEmbeddings, cfg.BOS[0], cfg.EOS[0], cfg.RopeScaling == nil}
	want := []any{b.ModelType, b.HiddenSize, b.IntermediateSize, b.NumLayers, b.NumHeads, b.NumKVHeads, b.HeadDim,
		b.RMSNormEps, b.RopeTheta, b.MaxPositions, b.VocabSize, b.TieWordEmbeddings, b.BOS[0], b.EOS[0], true}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("field %d: %v, want %v", i, got[i], want[i])
		}
	}
}

// An unknown shape is refused with the list of shapes.
func TestUnknownShape(t *testing.T) {
	_, err := Run(context.Background(), Options{Shape: "llama3-70b"})
	var ue *UnknownShapeError
	if !errors.As(err, &ue) {
		t.Fatalf("error %v, want an UnknownShapeError", err)
	}
	for _, s := range []string{"60m", "llama3-1b", "llama3-8b", "llama3-70b"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
}

// checkTable checks that a table has every row, in order, each finite and
// positive.
func checkTable(t *testing.T, tb *Table) {
	t.Helper()
	names := RowNames()
	if len(tb.Rows) != len(names) {
		t.Fatalf("%d rows, want %d: %+v", len(tb.Rows), len(names), tb.Rows)
	}
	for i, r := range tb.Rows {
		if r.Name != names[i] {
			t.Errorf("row %d is %q, want %q", i, r.Name, names[i])
		}
		if !(r.Value > 0) || math.IsInf(r.Value, 0) || math.IsNaN(r.Value) {
			t.Errorf("%s: %v %s, want a finite positive value", r.Name, r.Value, r.Unit)
		}
		if r.Unit == "" || r.Detail == "" {
			t.Errorf("%s: unit %q detail %q", r.Name, r.Unit, r.Detail)
		}
	}
}

// The 60M shape runs every row on the CPU at the quick sizes.
func TestRun60M(t *testing.T) {
	o := Quick()
	o.Shape = "60m"
	tb, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkTable(t, tb)
	if tb.Layers != 8 || tb.ShapeLayers != 8 || tb.Params != model.Bench60MConfig().NumParams() {
		t.Errorf("table header %+v", tb)
	}
	if os.Getenv("DRAFTER_BENCH_PRINT") != "" {
		if err := tb.WriteText(os.Stdout); err != nil {
			t.Fatal(err)
		}
	}
}
