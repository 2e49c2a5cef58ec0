package dspark

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/drafter-ai/drafter/train/loop"
)

// A run cut short by MaxSteps and resumed ends with the same weights, bit
// for bit, as one that was not: anchors, order and split are drawn from the
// seed, the epoch and the sample, and the checkpoint holds the rest; and so
// with the same confidence calibration.
func TestResumeBitIdentical(t *testing.T) {
	o := DefaultOptions()
	o.BlockSize, o.MarkovRank, o.Anchors, o.Epochs, o.Seed, o.EvalEvery, o.LogEvery = 4, 3, 3, 3, 4, 2, 1
	export := func(dir string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, ExportDir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	full := t.TempDir()
	if _, err := Train(context.Background(), o, tinyInputs(7), &loop.Job{Out: full}); err != nil {
		t.Fatal(err)
	}
	cut := t.TempDir()
	o2 := o
	o2.MaxSteps = 3
	r, err := Train(context.Background(), o2, tinyInputs(7), &loop.Job{Out: cut})
	if err != nil {
		t.Fatal(err)
	}
	if r.Stopped != "max-steps" {
		t.Fatalf("the cut run stopped by %q", r.Stopped)
	}
	if bytes.Equal(export(full), export(cut)) {
		t.Fatal("3 steps export what the whole run does: the comparison shows nothing")
	}
	if bytes.Equal(readCalibration(t, full), readCalibration(t, cut)) {
		t.Fatal("3 steps calibrate as the whole run does: the comparison shows nothing")
	}
	in := tinyInputs(7)
	in.Resume = true
	if _, err := Train(context.Background(), o, in, &loop.Job{Out: cut}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(export(full), export(cut)) {
		t.Fatal("the resumed run's export differs from the uninterrupted run's")
	}
	// drafter.json's confidence calibration, fitted on the exported
	// weights, is the same bytes too (the rest of drafter.json records
	// times).
	if a, b := readCalibration(t, full), readCalibration(t, cut); a == nil || !bytes.Equal(a, b) {
		t.Fatalf("confidence_calibration: uninterrupted %s, resumed %s", a, b)
	}
}
