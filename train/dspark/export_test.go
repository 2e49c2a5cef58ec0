package dspark

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	ddspark "github.com/drafter-ai/drafter/pkg/drafters/dspark"
	"github.com/drafter-ai/drafter/train/loop"
)

// TestExportReproducesTrainer exports a trainer's (perturbed) draft, loads
// it back and drafts every block of a batch with the inference session:
// context = the positions before the anchor, backbone once on [anchor,
// mask, ...] at the anchor's position, then each slot's step with the
// trainer's previous token. Its step logits and confidences must be the
// trainer's (teacher-forced) ones: training and inference see the same
// positions, context, Markov prev tokens and heads, in both layouts.
func TestExportReproducesTrainer(t *testing.T) {
	o := DefaultOptions()
	o.BlockSize, o.DraftLayers, o.MarkovRank, o.Anchors, o.Seed = 4, 2, 3, 4, 5
	in := tinyInputs(6)
	tr, err := newTrainer(o, in)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(8, 8))
	for i := range tr.hw.All {
		tr.hw.All[i] = float32(r.NormFloat64() * 0.5)
	}
	for i := range tr.w.All {
		tr.w.All[i] += float32(r.NormFloat64() * 0.2)
	}
	if err := tr.Seek(0, loop.Position{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := tr.Next(); err != nil || !ok || len(tr.batch) == 0 {
		t.Fatalf("no batch: %v", err)
	}
	sb := tr.batch[0]
	if _, err := tr.pass(sb, sb.wsum, false, nil); err != nil {
		t.Fatal(err)
	}
	g := tr.g
	B, V := g.BlockSize, g.Vocab
	for _, layout := range []string{ddspark.FormatDeepSpec, ddspark.FormatSpeculators} {
		dir := filepath.Join(t.TempDir(), layout)
		if err := ddspark.Export(dir, tr.draft(), ddspark.ExportOptions{Format: layout}); err != nil {
			t.Fatal(err)
		}
		d, err := ddspark.LoadDraft(dir, layout)
		if err != nil {
			t.Fatal(err)
		}
		lg := make([]float32, V)
		checked, worst := 0, 0.0
		for b, bl := range sb.blocks {
			s := replayBlock(t, d, sb, b)
			for k := range B {
				row := b*B + k
				c, err := s.Step(k, int(sb.prev[row]), lg)
				if err != nil {
					t.Fatal(err)
				}
				for v := range V {
					want := tr.logits[row*V+v]
					d := math.Abs(float64(lg[v] - want))
					worst = max(worst, d)
					if d > 1e-4*(1+math.Abs(float64(want))) {
						t.Fatalf("%s block %d (anchor %d) slot %d token %d: session %.7g, trainer %.7g", layout, b, bl.Start, k, v, lg[v], want)
					}
				}
				if wc := 1 / (1 + math.Exp(-float64(tr.c[row]))); math.Abs(float64(c)-wc) > 1e-5 {
					t.Fatalf("%s block %d slot %d: confidence %.7g, trainer %.7g", layout, b, k, c, wc)
				}
				checked++
			}
		}
		t.Logf("%s: %d slots of %d blocks agree within %.2g", layout, checked, len(sb.blocks), worst)
	}
}

// replayBlock runs block b of sb through d's inference session as eval
// drafts it: the context strictly before the block's anchor, then the
// backbone on [anchor, mask, ...]; Step then gives each slot.
func replayBlock(t *testing.T, d *ddspark.Draft, sb *seqBatch, b int) *ddspark.Session {
	t.Helper()
	g := d.Geometry
	bl := sb.blocks[b]
	s, err := d.NewSession(bl.Start + g.BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(sb.feat[:bl.Start*g.Features*g.TargetHidden]); err != nil {
		t.Fatal(err)
	}
	if err := s.Backbone(int(sb.prev[b*g.BlockSize])); err != nil {
		t.Fatal(err)
	}
	return s
}
