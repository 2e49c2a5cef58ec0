package dspark

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/eval"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/drafters"
	ddflash "github.com/drafter-ai/drafter/pkg/drafters/dflash"
	ddspark "github.com/drafter-ai/drafter/pkg/drafters/dspark"
	"github.com/drafter-ai/drafter/pkg/drafters/layerids"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/train/dflash"
	"github.com/drafter-ai/drafter/train/loop"
)

// acceptance loads the export in dir through method and returns its mean
// acceptance length at temperatures 0 and 1 with a chain of depth on the
// held-out stories prompts, failing unless temperature 0 is lossless.
func acceptance(t *testing.T, gt *target.Target, method drafters.Method, dir string, depth int) [2]float64 {
	t.Helper()
	m := gt.Model
	layout, err := method.Detect(dir)
	if err != nil || layout == "" {
		t.Fatalf("detect %s: %q, %v", dir, layout, err)
	}
	dr, err := method.Load(dir, layout, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := eval.LoadPrompts(gt, storiesEval, 40)
	if err != nil {
		t.Fatal(err)
	}
	var out [2]float64
	for i, temp := range []float64{0, 1} {
		cfg := eval.Config{Mode: eval.ModeChain, Depth: depth, MaxNewTokens: 64, EOS: []int{storiesEOS}, Sampling: sample.Params{Temperature: temp}, Seed: 1}
		rep, err := eval.Run(context.Background(), m, eval.NewDrafter(dr), ps, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.CheckLossless(); err != nil {
			t.Fatal(err)
		}
		out[i] = rep.MeanAcceptLength
	}
	return out
}

// TestCompareDFlash (DRAFTER_COMPARE=1; a few minutes) trains DFlash
// (z-lab's layout, block 8: 7 drafts) and DSpark (block 7: 7 drafts) with
// their defaults, and DSpark at DFlash's two layers and without its Markov
// head, on the same self-distilled stories260k capture for the same epochs,
// and logs each one's acceptance length with a chain of 7 at temperatures
// 0 and 1 over 40 held-out prompts.
func TestCompareDFlash(t *testing.T) {
	if os.Getenv("DRAFTER_COMPARE") != "1" {
		t.Skip("set DRAFTER_COMPARE=1 to train and compare DFlash and DSpark (minutes)")
	}
	gt, err := target.Load(testutil.Stories260k(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer gt.Close()
	m := gt.Model
	L := m.NumLayers()
	all := []int{1, 2, 3, 4, 5}
	mem := capture(t, gt, all, 300, 64)
	pick := func(layers []int) *layerView { return &layerView{mem: mem, all: all, want: layers} }
	const epochs = 8
	var lines []string

	fo := dflash.DefaultOptions()
	fo.Epochs, fo.Seed = epochs, 1
	flayers, err := layerids.Decode(layerids.DFlashTarget, layerids.DFlashDefault(L, fo.DraftLayers), L)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fout := t.TempDir()
	fin := dflash.Inputs{Config: m.Config, Layers: flayers, Embed: m.Embed.Float32(), LMHead: m.LMHead.Float32(), Data: pick(flayers)}
	if _, err := dflash.Train(context.Background(), fo, fin, &loop.Job{Out: fout}); err != nil {
		t.Fatal(err)
	}
	a := acceptance(t, gt, ddflash.Method{}, filepath.Join(fout, dflash.ExportDir), fo.BlockSize-1)
	lines = append(lines, fmt.Sprintf("DFlash B=%d, %d layers %v: T=0 %.3f, T=1 %.3f (%v)", fo.BlockSize, fo.DraftLayers, flayers, a[0], a[1], time.Since(start).Round(time.Second)))

	for _, v := range []struct {
		name   string
		layers int
		rank   int
	}{{"defaults", ddspark.DefaultDraftLayers, 32}, {"2 layers", 2, 32}, {"2 layers, no Markov head", 2, 0}} {
		o := DefaultOptions()
		o.Epochs, o.Seed, o.DraftLayers, o.MarkovRank = epochs, 1, v.layers, v.rank
		o.ConfidenceWithMarkov = v.rank > 0
		layers, err := o.featureLayers(L)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out := t.TempDir()
		in := Inputs{Config: m.Config, Layers: layers, Embed: m.Embed.Float32(), LMHead: m.LMHead.Float32(), Data: pick(layers)}
		if _, err := Train(context.Background(), o, in, &loop.Job{Out: out}); err != nil {
			t.Fatal(err)
		}
		a := acceptance(t, gt, ddspark.Method{}, filepath.Join(out, ExportDir), o.BlockSize)
		lines = append(lines, fmt.Sprintf("DSpark %s (B=%d, %d layers %v, rank %d): T=0 %.3f, T=1 %.3f (%v)", v.name, o.BlockSize, o.DraftLayers, layers, o.MarkovRank, a[0], a[1], time.Since(start).Round(time.Second)))
	}
	for _, l := range lines {
		t.Log(l)
	}
}
