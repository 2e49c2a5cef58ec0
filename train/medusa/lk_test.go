package medusa

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/drafters"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/lkloss"
	"github.com/drafter-ai/drafter/train/loop"
)

// refLossLK is refLoss with the LK loss l against each row's one-hot
// target instead of the cross-entropy, written from its definition
// (tensor.LK): α = q_t, KL = -log q_t, TV = 1 - α, NLA = -log max(α, ε),
// Hybrid λ·KL + (1-λ)·TV. Hybrid's λ is detached: lam[h][r] holds it when
// not nil (a finite-difference check holds it at the unperturbed
// parameters'), else it is computed and stored there when lam is given
// empty rows.
func refLossLK(g dmedusa.Geometry, p [][]float64, shared []float64, b *Batch, w []float64, l tensor.LK, lam [][]float64, fill bool) float64 {
	return refHeadMeans(g, p, shared, b, w, func(h, r int, logq float64) float64 {
		alpha := math.Exp(logq)
		if fill {
			lam[h][r] = math.Exp(-l.Eta * alpha)
		}
		kl, tv := -logq, 1-alpha
		row := l.KL*kl + l.TV*tv - l.NLA*math.Log(math.Max(alpha, tensor.LKEpsilon))
		if l.Hybrid != 0 {
			row += l.Hybrid * (lam[h][r]*kl + (1-lam[h][r])*tv)
		}
		return row
	})
}

// TestLKGradientsAgainstFiniteDifferences checks TrainStep with each LK form
// (every gradient through the heads' blocks and lm_heads, with the decay
// weights and per-head means) against central differences of refLossLK, and
// its per-head mean α against the reference's.
func TestLKGradientsAgainstFiniteDifferences(t *testing.T) {
	forms := []tensor.LK{{KL: 1}, {TV: 1}, {NLA: 1}, {Hybrid: 1, Eta: 3}, {KL: 0.1, TV: 0.9, NLA: 0.3, Hybrid: 0.5, Eta: 1.5}}
	for fi, l := range forms {
		t.Run(fmt.Sprint(fi), func(t *testing.T) {
			g := dmedusa.Geometry{Hidden: 8, Vocab: 11, Heads: 2, Layers: 2}
			r := rand.New(rand.NewPCG(17, uint64(fi)))
			target := make([]float32, g.Vocab*g.Hidden)
			randFill(r, target, 0.5)
			m, err := dmedusa.NewHeads(g, target, true)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range m.Tensors() {
				randFill(r, p.Data, 0.5)
			}
			rows := 7
			b := randomBatch(r, g, rows)
			b.Targets[0][2], b.Targets[1][5] = -1, -1
			w := Weights(g.Heads, 0.8)
			ws := mustWorkspace(t, cpu.DefaultBackend(), m, rows, 3)
			ws.UseLK(l)
			ws.n.ZeroGrad()
			loss := ws.TrainStep(b, w)
			params := m.Tensors()
			grads, p64 := gradsAndParams(ws, m)
			lam := [][]float64{make([]float64, rows), make([]float64, rows)}
			ref := refLossLK(g, p64, nil, b, w, l, lam, true)
			if math.Abs(ref-loss) > 1e-5*math.Abs(ref) {
				t.Fatalf("loss %g, float64 reference %g", loss, ref)
			}
			// α: the mean of the head's q_t, which is exp(-log q_t).
			for h, a := range ws.Alpha() {
				var want float64
				n := 0
				for r, tg := range b.Targets[h] {
					if tg >= 0 {
						one := tensor.LK{TV: 1}
						hb := &Batch{Rows: 1, X: b.X[r*g.Hidden : (r+1)*g.Hidden], Targets: make([][]int32, g.Heads)}
						for hh := range hb.Targets {
							hb.Targets[hh] = []int32{-1}
						}
						hb.Targets[h][0] = tg
						wh := make([]float64, g.Heads)
						wh[h] = 1
						want += 1 - refLossLK(g, p64, nil, hb, wh, one, nil, false)
						n++
					}
				}
				if want /= float64(n); math.Abs(a-want) > 1e-6 {
					t.Fatalf("head %d: mean α %g, reference %g", h, a, want)
				}
			}
			const eps = 1e-5
			for i, p := range params {
				for j := range p.Data {
					orig := p64[i][j]
					p64[i][j] = orig + eps
					up := refLossLK(g, p64, nil, b, w, l, lam, false)
					p64[i][j] = orig - eps
					dn := refLossLK(g, p64, nil, b, w, l, lam, false)
					p64[i][j] = orig
					fd := (up - dn) / (2 * eps)
					if got := float64(grads[i][j]); math.Abs(got-fd) > 2e-4*math.Abs(fd)+2e-6 {
						t.Fatalf("%s[%d]: gradient %.8g, finite difference %.8g", p.Name, j, got, fd)
					}
				}
			}
		})
	}
}

// TestTrainLKLoss trains with nla: each training line logs every head's
// mean α, drafter.json and train_args.json record the loss, a resume with
// another loss is refused, and a record from before --loss (the
// cross-entropy) resumes with ce only.
func TestTrainLKLoss(t *testing.T) {
	data, st := synthData(3, 16, 32, 60, 3, 20)
	cfg := DefaultConfig()
	cfg.BatchTokens, cfg.MaxEpochs, cfg.LogEvery, cfg.Loss = 128, 2, 1, lkloss.NLA
	dir := t.TempDir()
	r, err := Train(context.Background(), cfg, st.LM, data, cpu.New(nil), &loop.Job{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	// Held out: α per head, the mean of e^-CE over the rows (the heads'
	// probability of their tokens), so at least e^-(mean CE) (Jensen), and
	// falling with the head's distance.
	if a := r.Best.Alpha; len(a) != cfg.Heads || !(a[0] > a[cfg.Heads-1]) {
		t.Fatalf("held-out α %v, want %d values falling with the head", a, cfg.Heads)
	}
	for h, a := range r.Best.Alpha {
		if !(a > 0 && a >= math.Exp(-r.Best.HeadLoss[h])-1e-12) {
			t.Fatalf("head %d: held-out α %g, mean cross-entropy %g: want α >= e^-CE", h, a, r.Best.HeadLoss[h])
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, loop.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	trainLines := 0
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte{'\n'}) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["grad_norm"]; !ok {
			continue // an evaluation
		}
		trainLines++
		a, _ := m["alpha"].([]any)
		if len(a) != cfg.Heads {
			t.Fatalf("training line without %d α: %s", cfg.Heads, line)
		}
		for _, v := range a {
			if f, _ := v.(float64); !(f > 0 && f < 1) {
				t.Fatalf("training line with α %v outside (0, 1): %s", v, line)
			}
		}
	}
	if trainLines == 0 {
		t.Fatal("no training line")
	}
	var prov map[string]any
	if raw, err = os.ReadFile(filepath.Join(dir, drafters.ProvenanceFile)); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &prov); err != nil {
		t.Fatal(err)
	}
	if prov["loss"] != lkloss.NLA {
		t.Fatalf("drafter.json records loss %v, want %s", prov["loss"], lkloss.NLA)
	}
	if _, ok := prov["lk_eta"]; ok {
		t.Fatalf("drafter.json records an η nla does not use: %v", prov["lk_eta"])
	}

	res := cfg
	res.Resume, res.Loss = true, lkloss.TV
	if _, err := Train(context.Background(), res, st.LM, data, cpu.New(nil), &loop.Job{Out: dir}); err == nil || !strings.Contains(err.Error(), `loss: was "nla", now "tv"`) {
		t.Fatalf("resume with another loss: err = %v", err)
	}

	// A record without the loss, as written before --loss existed.
	var args map[string]any
	if raw, err = os.ReadFile(filepath.Join(dir, loop.ArgsFile)); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		t.Fatal(err)
	}
	delete(args["trainer"].(map[string]any), "loss")
	if raw, err = json.Marshal(args); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, loop.ArgsFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Train(context.Background(), res, st.LM, data, cpu.New(nil), &loop.Job{Out: dir}); err == nil || !strings.Contains(err.Error(), `loss: was "ce", now "tv"`) {
		t.Fatalf("resume of a cross-entropy record with tv: err = %v", err)
	}
	res.Loss = ""
	if _, err := Train(context.Background(), res, st.LM, data, cpu.New(nil), &loop.Job{Out: dir}); err != nil {
		t.Fatalf("resume of a cross-entropy record with the default loss: %v", err)
	}
}
