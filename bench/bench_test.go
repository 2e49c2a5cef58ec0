package bench

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testdevice"
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

// The memory check refuses a shape that does not fit before building
// anything: the 8B shape's bf16 weights alone are 16 GB, more than a
// machine reporting 20 GiB free can hold with the trainers' state, and the
// 60M shape does not fit in 100 MiB. (Run would build the model only after
// the check, which is what keeps this test from ever building 8B.)
func TestMemoryRefusal(t *testing.T) {
	for _, c := range []struct {
		shape  string
		free   int64
		shared bool
	}{
		{"llama3-8b", 20 << 30, false},
		{"llama3-8b", 20 << 30, true},
		{"60m", 100 << 20, false},
	} {
		o := Quick()
		o.Shape, o.MedusaSharedLMHead = c.shape, c.shared
		o.freeHost = func() (int64, error) { return c.free, nil }
		_, err := Run(context.Background(), o)
		var me *MemoryError
		if !errors.As(err, &me) {
			t.Fatalf("%s with %d bytes free: error %v, want a MemoryError", c.shape, c.free, err)
		}
		if me.Where != "host" || me.Need <= c.free || !strings.Contains(err.Error(), "GiB") {
			t.Errorf("%s: %+v (%v)", c.shape, me, err)
		}
	}
	cfg, _, err := ShapeConfig("llama3-8b", 0)
	if err != nil {
		t.Fatal(err)
	}
	o := Quick()
	o.MedusaSharedLMHead = true
	if n := need(cfg, &o); n < 16_060_522_496 { // the bf16 weights alone
		t.Errorf("the 8B shape is estimated at %d bytes, less than its weights", n)
	}
}

// Sizes that cannot be measured name their option.
func TestSizeErrors(t *testing.T) {
	for _, c := range []struct {
		edit  func(o *Options)
		field string
	}{
		{func(o *Options) { o.Layers = 2 }, "layers"},
		{func(o *Options) { o.Prompt = 0 }, "prompt"},
		{func(o *Options) { o.TrainTokens = 4 }, "train-tokens"},
		{func(o *Options) { o.Prompt = 4000 }, "prompt"},
	} {
		o := Quick()
		o.Shape = "60m"
		c.edit(&o)
		_, err := Run(context.Background(), o)
		var se *SizeError
		if !errors.As(err, &se) || se.Field != c.field {
			t.Errorf("error %v, want a SizeError for %s", err, c.field)
		}
	}
}

// Every row runs on a device whose memory is not the host's (the CPU device
// with uploads copied and HostF32 declined): the bench reaches the model's,
// the trainers' and the drafters' values only through the device, as on a
// GPU.
func TestRunOnDevice(t *testing.T) {
	o := Quick()
	o.Shape, o.Layers, o.Device = "60m", 3, testdevice.New()
	tb, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkTable(t, tb)
	if tb.Layers != 3 || tb.ShapeLayers != 8 {
		t.Errorf("layers %d of %d, want 3 of 8", tb.Layers, tb.ShapeLayers)
	}
}
