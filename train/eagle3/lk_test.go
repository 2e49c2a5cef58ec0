package eagle3

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/lkloss"
	"github.com/drafter-ai/drafter/train/loop"
)

// TestLKLossWiring checks that the LK losses train the rows, targets and
// weights the soft cross-entropy does: the target distributions over the
// draft vocabulary sum to 1, so the KL form's gradient is the soft
// cross-entropy's and its loss the cross-entropy less p's entropy (smaller,
// not negative); every step's α lies in (0, 1); and TV's loss is the
// weighted 1 - α, step by step (the kernel's arithmetic is the conformance
// suite's: pkg/tensor/tensortest).
func TestLKLossWiring(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(61, g)
	samples := tt.samples(62, 3, 6, 10)
	const steps = 3
	grads := func(lk *tensor.LK) (*net, float64, []float32) {
		n, _ := buildTiny(t, g, tt, samples, steps, 1, true)
		r := rand.New(rand.NewPCG(5, 5))
		for i := range n.p.All {
			n.p.All[i] += float32(0.3 * r.NormFloat64())
		}
		n.writeParams()
		if lk != nil {
			n.lk, n.useLK = *lk, true
		}
		loss := n.forward(true)
		n.backward()
		an := deagle3.NewParams(g)
		n.grW.Read(n.dev, an, g)
		return n, loss, an.All
	}
	_, ce, gce := grads(nil)
	nkl, kl, gkl := grads(&tensor.LK{KL: 1})
	if !(kl < ce && kl >= 0) {
		t.Fatalf("KL loss %g, soft cross-entropy %g: want 0 <= KL < CE", kl, ce)
	}
	scale := 0.0
	for _, v := range gce {
		scale = math.Max(scale, math.Abs(float64(v)))
	}
	for i := range gce {
		if d := math.Abs(float64(gkl[i] - gce[i])); d > 1e-4*scale {
			t.Fatalf("parameter %d: KL gradient %g, soft cross-entropy's %g", i, gkl[i], gce[i])
		}
	}
	for k, a := range nkl.alphaK {
		if !(a > 0 && a < 1) {
			t.Fatalf("step %d: mean α %g, want one in (0, 1)", k, a)
		}
	}
	ntv, tv, _ := grads(&tensor.LK{TV: 1})
	want := 0.0
	for k := 0; k < steps; k++ {
		// The step's weights are float32 1/count: their sum is 1 within
		// float32's rounding.
		if math.Abs(ntv.lossK[k]-(1-ntv.alphaK[k])) > 1e-6 {
			t.Fatalf("step %d: TV loss %g, 1 - mean α %g", k, ntv.lossK[k], 1-ntv.alphaK[k])
		}
		want += math.Pow(0.8, float64(k)) * (1 - nkl.alphaK[k])
	}
	// The same weights and α as the KL run's (the same forward).
	if math.Abs(tv-want) > 1e-6 {
		t.Fatalf("TV loss %g, Σ 0.8^k (1 - α_k) of the KL run %g", tv, want)
	}
}

// TestTrainLKLoss trains with lk_hybrid: α is logged per step in the
// training and evaluation lines, the loss and η are recorded in
// drafter.json and train_args.json, an interrupted run resumes to the same
// end, and a resume with another loss or η is refused, as is an older
// record (no loss: the cross-entropy) with an LK loss.
func TestTrainLKLoss(t *testing.T) {
	g := tinyGeometry()
	tt := newTinyTarget(63, g)
	ds := memory(g.Hidden, tt.samples(64, 30, 8, 20))
	cfg := trainConfig()
	cfg.Epochs, cfg.Loss = 2, lkloss.Hybrid
	full := t.TempDir()
	res, err := train(context.Background(), cfg, tt, ds, full)
	if err != nil {
		t.Fatal(err)
	}
	if a := res.Best.Alpha; len(a) != cfg.Steps || !(a[0] > 0 && a[0] < 1) {
		t.Fatalf("held-out α %v, want %d values in (0, 1)", a, cfg.Steps)
	}
	lines := metricsWithoutTimings(t, filepath.Join(full, loop.MetricsFile))
	trainLines := 0
	for _, l := range lines {
		a, ok := l["alpha"].([]any)
		if !ok || len(a) != cfg.Steps {
			t.Fatalf("metrics line without %d α: %v", cfg.Steps, l)
		}
		if l["kind"] == "train" {
			trainLines++
		}
	}
	if trainLines == 0 {
		t.Fatal("no training line")
	}
	var prov map[string]any
	raw, err := os.ReadFile(filepath.Join(full, ProvenanceFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &prov); err != nil {
		t.Fatal(err)
	}
	if prov["loss"] != lkloss.Hybrid || prov["lk_eta"] != lkloss.DefaultEta {
		t.Fatalf("drafter.json records loss %v η %v, want %s and %g", prov["loss"], prov["lk_eta"], lkloss.Hybrid, lkloss.DefaultEta)
	}
	var args struct {
		Trainer map[string]any `json:"trainer"`
	}
	raw, err = os.ReadFile(filepath.Join(full, loop.ArgsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		t.Fatal(err)
	}
	if args.Trainer["loss"] != lkloss.Hybrid || args.Trainer["lk_eta"] != lkloss.DefaultEta {
		t.Fatalf("%s records loss %v η %v, want %s and %g", loop.ArgsFile, args.Trainer["loss"], args.Trainer["lk_eta"], lkloss.Hybrid, lkloss.DefaultEta)
	}

	// Interrupted and resumed: the same end, α lines included.
	part := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cfg2 := cfg
	cfg2.Progress = func(p Progress) {
		if p.Step == 5 && p.Eval == nil {
			cancel()
		}
	}
	if _, err := train(ctx, cfg2, tt, ds, part); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run returned %v", err)
	}
	for _, c := range []struct {
		loss string
		eta  float64
		diff string
	}{
		{lkloss.CE, 0, `loss: was "lk_hybrid", now "ce"`},
		{lkloss.TV, 0, `loss: was "lk_hybrid", now "tv"`},
		{lkloss.Hybrid, 2, "lk_eta: was 3, now 2"},
	} {
		other := cfg
		other.Loss, other.LKEta, other.Resume = c.loss, c.eta, true
		if _, err := train(context.Background(), other, tt, ds, part); err == nil || !strings.Contains(err.Error(), c.diff) {
			t.Fatalf("resume with loss %s η %g: err = %v, want a refusal naming %s", c.loss, c.eta, err, c.diff)
		}
	}
	cfg3 := cfg
	cfg3.Resume, cfg3.LKEta = true, lkloss.DefaultEta // η given as its default: the same settings
	if _, err := train(context.Background(), cfg3, tt, ds, part); err != nil {
		t.Fatal(err)
	}
	sameRun(t, full, part)

	// A record from before --loss: the cross-entropy, and nothing else.
	saved, err := json.Marshal(trainConfig())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(saved), `"loss"`) {
		t.Fatalf("the default loss is in the configuration's JSON: %s", saved)
	}
	ce := trainConfig()
	ce.Loss = lkloss.CE
	if err := sameArgs(t, tt, saved, ce); err != nil {
		t.Fatalf("--loss ce: %v", err)
	}
	lk := trainConfig()
	lk.Loss = lkloss.Hybrid
	if err := sameArgs(t, tt, saved, lk); err == nil {
		t.Fatal("an LK loss resumed a run trained with the cross-entropy")
	}
	// A bad loss is refused before training.
	bad := trainConfig()
	bad.Loss, bad.LKEta = lkloss.TV, 2
	out := filepath.Join(t.TempDir(), "out")
	if _, err := train(context.Background(), bad, tt, ds, out); err == nil || !strings.Contains(err.Error(), "lk-eta") {
		t.Fatalf("η with tv: err = %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("the refused run created %s (%v)", out, err)
	}
}
