package dspark

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	ddspark "github.com/drafter-ai/drafter/pkg/drafters/dspark"
	"github.com/drafter-ai/drafter/train/loop"
)

// calibrationOptions is a short training on tinyInputsN(7, 16) with half
// the sequences held out, so that there are a few dozen held-out blocks,
// many cut short by the prompt spans.
func calibrationOptions() Options {
	o := DefaultOptions()
	o.BlockSize, o.MarkovRank, o.Anchors, o.Epochs, o.Seed, o.EvalEvery, o.LogEvery = 4, 3, 8, 3, 4, 4, 1
	o.EvalFraction = 0.5
	return o
}

// readCalibration returns drafter.json's confidence_calibration, raw (nil
// when absent).
func readCalibration(t *testing.T, out string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, ProvenanceFile))
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	return p["confidence_calibration"]
}

// TestExportCalibration trains briefly and checks drafter.json's
// confidence_calibration: it validates for the block size, covers the
// blocks Evaluate counts, and is exactly the STS fit of the held-out
// blocks run through the EXPORTED weights (loaded back from the export into
// a fresh trainer); and those blocks' rows mean what the fit takes them
// for: the inference session of the exported draft gives, per valid slot,
// the same confidence σ(z), a greedy outcome of 1 exactly when its argmax
// is the label, and α = 1 − ½‖p_d − p_t‖₁ against the target's
// distribution at the position before the label. Without a confidence head
// drafter.json has no calibration.
func TestExportCalibration(t *testing.T) {
	o := calibrationOptions()
	B := o.BlockSize
	out := t.TempDir()
	res, err := Train(context.Background(), o, tinyInputsN(7, 16), &loop.Job{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	raw := readCalibration(t, out)
	if raw == nil {
		t.Fatal("drafter.json has no confidence_calibration")
	}
	var c ddspark.Calibration
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(B); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&c, res.Calibration) {
		t.Fatalf("drafter.json's calibration %+v is not the trainer's %+v", c, res.Calibration)
	}
	if c.Blocks == 0 || c.Blocks != res.Best.Blocks {
		t.Fatalf("calibrated on %d blocks; the evaluation counts %d held-out blocks", c.Blocks, res.Best.Blocks)
	}
	for k := range B {
		if c.ECE.GreedyAfter[k] > c.ECE.GreedyBefore[k] || c.ECE.SampledAfter[k] > c.ECE.SampledBefore[k] {
			t.Errorf("slot %d: ECE rose on the fit data: greedy %.4f → %.4f, sampled %.4f → %.4f", k,
				c.ECE.GreedyBefore[k], c.ECE.GreedyAfter[k], c.ECE.SampledBefore[k], c.ECE.SampledAfter[k])
		}
	}
	t.Log(calibrationLine(&c))

	// The exported weights, in a fresh trainer (same options: same split,
	// same held-out anchors).
	dir := filepath.Join(out, ExportDir)
	d, err := ddspark.LoadDraft(dir, ddspark.FormatDeepSpec)
	if err != nil {
		t.Fatal(err)
	}
	in := tinyInputsN(7, 16)
	tr, err := newTrainer(o, in)
	if err != nil {
		t.Fatal(err)
	}
	h0, err := tr.heldOutBlocks()
	if err != nil {
		t.Fatal(err)
	}
	copy(tr.w.All, d.Params.All)
	copy(tr.hw.All, d.Heads.All)
	h, err := tr.heldOutBlocks()
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(h0.logits, h.logits) {
		t.Fatal("the initial and the exported weights give the same confidences: the comparison below shows nothing")
	}
	again, err := ddspark.Calibrate(B, h.logits, h.greedy, h.sampled, h.valid)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, &c) {
		t.Fatalf("the fit of the exported weights' held-out blocks is %+v; drafter.json holds %+v", again, c)
	}

	// The rows against the exported draft's inference session.
	g := tr.g
	V, H := g.Vocab, g.TargetHidden
	lg := make([]float32, V)
	j, rows, hits, tied := 0, 0, 0, 0
	for _, i := range tr.EvalIdx {
		sb, err := tr.read(i, tr.EvalRand(i))
		if err != nil {
			t.Fatal(err)
		}
		if sb == nil || sb.wsum == 0 {
			continue
		}
		for b := range sb.blocks {
			n := 0
			for n < B && sb.w[b*B+n] > 0 {
				n++
			}
			if n == 0 {
				continue
			}
			if h.valid[j] != n {
				t.Fatalf("held-out block %d: %d valid slots recorded, the weights give %d", j, h.valid[j], n)
			}
			s := replayBlock(t, d, sb, b)
			for k := range n {
				row, at := b*B+k, j*B+k
				conf, err := s.Step(k, int(sb.prev[row]), lg)
				if err != nil {
					t.Fatal(err)
				}
				if got := sigmoid(h.logits[at]); math.Abs(got-float64(conf)) > 1e-5 {
					t.Fatalf("block %d slot %d: σ(z) %.7g recorded, the session's confidence %.7g", j, k, got, conf)
				}
				if z := s.ConfidenceLogit(); math.Abs(z-h.logits[at]) > 1e-4*(1+math.Abs(z)) {
					t.Fatalf("block %d slot %d: logit %.7g recorded, the session's %.7g", j, k, h.logits[at], z)
				}
				// The draft's top-1 (skipped on a near tie, where float32
				// rounding may pick either).
				best, second := 0, -1
				for v := 1; v < V; v++ {
					if lg[v] > lg[best] {
						best, second = v, best
					} else if second < 0 || lg[v] > lg[second] {
						second = v
					}
				}
				if lg[best]-lg[second] < 1e-4 {
					tied++
				} else if hit := best == int(sb.labels[row]); hit != (h.greedy[at] == 1) {
					t.Fatalf("block %d slot %d: greedy outcome %g, the session's argmax %d, label %d", j, k, h.greedy[at], best, sb.labels[row])
				}
				if h.greedy[at] == 1 {
					hits++
				}
				// α against softmax(lm_head · final) of the row's target
				// position, in float64.
				if a := alphaRef(lg, sb.final[row*H:(row+1)*H], in.LMHead, V, H); math.Abs(a-h.sampled[at]) > 1e-4 {
					t.Fatalf("block %d slot %d: α %.6f recorded, %.6f from the session's logits", j, k, h.sampled[at], a)
				}
				rows++
			}
			j++
		}
	}
	if j != len(h.valid) || j != c.Blocks {
		t.Fatalf("walked %d held-out blocks, the fit read %d, drafter.json says %d", j, len(h.valid), c.Blocks)
	}
	t.Logf("%d blocks, %d rows checked against the session (%d greedy hits, %d near ties skipped)", j, rows, hits, tied)
	if hits == 0 || hits == rows {
		t.Fatalf("%d of %d rows are greedy hits: the outcome check distinguishes nothing", hits, rows)
	}

	o.Confidence, o.Loss.Confidence = false, 0
	out = t.TempDir()
	if _, err := Train(context.Background(), o, tinyInputsN(7, 16), &loop.Job{Out: out}); err != nil {
		t.Fatal(err)
	}
	if raw := readCalibration(t, out); raw != nil {
		t.Fatalf("without a confidence head drafter.json holds a calibration: %s", raw)
	}
}

// alphaRef is 1 − ½‖softmax(logits) − softmax(lmHead·final)‖₁ in float64,
// clamped to [0, 1].
func alphaRef(logits, final, lmHead []float32, V, H int) float64 {
	pd, pt := make([]float64, V), make([]float64, V)
	for v := range V {
		pd[v] = float64(logits[v])
		var s float64
		for i := range H {
			s += float64(final[i]) * float64(lmHead[v*H+i])
		}
		pt[v] = s
	}
	softmax64(pd)
	softmax64(pt)
	var l1 float64
	for v := range V {
		l1 += math.Abs(pd[v] - pt[v])
	}
	return min(max(1-l1/2, 0), 1)
}

func softmax64(x []float64) {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, v)
	}
	var s float64
	for i, v := range x {
		x[i] = math.Exp(v - m)
		s += x[i]
	}
	for i := range x {
		x[i] /= s
	}
}
