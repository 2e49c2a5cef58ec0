package dflash

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	ddflash "github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/loop"
)

// memoryData is a small synthetic dataset for tinyConfig's target: n
// samples of random tokens (the response from position 4), two feature
// layers.
func memoryData(n int) *dataset.Memory {
	c := tinyConfig()
	r := rand.New(rand.NewPCG(3, 4))
	m := &dataset.Memory{H: c.HiddenSize}
	for range n {
		T := 12 + r.IntN(8)
		s := dataset.Sample{Tokens: make([]int32, T), LossMask: make([]bool, T)}
		for i := range T {
			s.Tokens[i] = int32(r.IntN(c.VocabSize - 1))
			s.LossMask[i] = i >= 4
		}
		for range 2 {
			f := make([]float32, T*c.HiddenSize)
			for i := range f {
				f[i] = float32(r.NormFloat64())
			}
			s.Features = append(s.Features, f)
		}
		m.Samples = append(m.Samples, s)
	}
	return m
}

func tinyInputs() Inputs {
	c := tinyConfig()
	r := rand.New(rand.NewPCG(5, 6))
	e := make([]float32, c.VocabSize*c.HiddenSize)
	for i := range e {
		e[i] = float32(r.NormFloat64())
	}
	return Inputs{Config: c, Layers: []int{2, 4}, Embed: e, LMHead: e, Data: memoryData(12)}
}

func tinyOptions() Options {
	o := DefaultOptions()
	o.BlockSize, o.DraftLayers, o.Anchors, o.Epochs, o.EvalFraction, o.Patience, o.LogEvery = 4, 2, 4, 2, 0.2, 0, 1
	return o
}

// TestResumeIsExact: a run stopped after 5 updates and resumed exports the
// same bytes as one run straight through (anchors are drawn from the seed,
// the epoch and the sample, not from a stream the stop would cut).
func TestResumeIsExact(t *testing.T) {
	in := tinyInputs()
	full := t.TempDir()
	if _, err := Train(context.Background(), tinyOptions(), in, &loop.Job{Out: full}); err != nil {
		t.Fatal(err)
	}
	part := t.TempDir()
	o := tinyOptions()
	o.MaxSteps = 5
	if _, err := Train(context.Background(), o, in, &loop.Job{Out: part}); err != nil {
		t.Fatal(err)
	}
	in.Resume = true
	r, err := Train(context.Background(), tinyOptions(), in, &loop.Job{Out: part})
	if err != nil {
		t.Fatal(err)
	}
	if r.Steps != 2*len(tinyTrainIdx(t)) {
		t.Errorf("resumed run took %d steps in all", r.Steps)
	}
	a, err := os.ReadFile(filepath.Join(full, ExportDir, ddflash.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(part, ExportDir, ddflash.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("the resumed run exported other weights than the uninterrupted one")
	}
	// The export loads back, with the mask token the trainer chose and the
	// layers it trained on.
	d, err := ddflash.LoadDraft(filepath.Join(full, ExportDir), ddflash.FormatNative, in.Config.NumLayers)
	if err != nil {
		t.Fatal(err)
	}
	if d.Geometry.MaskToken != in.Config.VocabSize-1 || d.LayerIDs[0] != 2 || d.LayerIDs[1] != 4 {
		t.Errorf("export: mask %d (want the unused id %d), layers %v", d.Geometry.MaskToken, in.Config.VocabSize-1, d.LayerIDs)
	}
}

// tinyTrainIdx is the training split of tinyInputs under tinyOptions.
func tinyTrainIdx(t *testing.T) []int {
	tr, err := newTrainer(tinyOptions(), tinyInputs())
	if err != nil {
		t.Fatal(err)
	}
	return tr.TrainIdx
}

// TestColumnsDefaults: the fused layers default to z-lab's ids converted to
// HF indices, and the options are checked.
func TestColumnsDefaults(t *testing.T) {
	c := tinyConfig()
	c.NumLayers = 36
	o := DefaultOptions()
	o.DraftLayers = 5
	cols, err := o.Columns(c)
	if err != nil {
		t.Fatal(err)
	}
	want := []int{2, 10, 18, 26, 34} // Qwen3-8B's [1, 9, 17, 25, 33] + 1
	for i, k := range want {
		if cols.FeatureLayers[i] != k {
			t.Fatalf("default layers %v, want %v", cols.FeatureLayers, want)
		}
	}
	o.BlockSize = 1
	if _, err := o.Columns(c); err == nil {
		t.Error("a block of 1 was accepted")
	}
	o = DefaultOptions()
	o.Layers = []int{0, 3}
	if _, err := o.Columns(c); err == nil {
		t.Error("hidden_states index 0 (the embedding) was accepted as a feature layer")
	}
}
