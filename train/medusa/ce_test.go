package medusa

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

func TestExpfAccuracy(t *testing.T) {
	worst := 0.0
	for i := 0; i <= 2_000_000; i++ {
		x := float32(-86 * float64(i) / 2_000_000)
		want := math.Exp(float64(x))
		rel := math.Abs(float64(expf(x))-want) / want
		worst = math.Max(worst, rel)
	}
	if worst > 3e-7 { // float32 epsilon is 1.19e-7: about two ulps
		t.Fatalf("expf worst relative error %g", worst)
	}
	if expf(-87) != 0 || expf(0) != 1 {
		t.Fatalf("expf(-87)=%g expf(0)=%g", expf(-87), expf(0))
	}
}

// TestEvaluateAgainstReference checks Evaluate's per-head loss sums and
// top-1/top-5 counts against a float64 forward with a full sort.
func TestEvaluateAgainstReference(t *testing.T) {
	g := Geometry{Hidden: 8, Vocab: 11, Heads: 2, Layers: 2}
	m, _ := randomHeads(t, g, 4)
	r := rand.New(rand.NewPCG(9, 9))
	rows := 40
	b := &Batch{Rows: rows, X: make([]float32, rows*g.Hidden), Targets: [][]int32{make([]int32, rows), make([]int32, rows)}}
	randFill(r, b.X, 1)
	for h := range b.Targets {
		for i := range b.Targets[h] {
			b.Targets[h][i] = int32(r.IntN(g.Vocab+3)) - 3 // some -1..-3: no target
			if b.Targets[h][i] < 0 {
				b.Targets[h][i] = -1
			}
		}
	}
	ws := m.NewWorkspace(rows, 7)
	m.Evaluate(tensor.CPU(), ws, b)
	gotRows, gotCE, gotT1, gotT5 := ws.Stats()
	logits := make([]float32, g.Vocab)
	ws2 := m.NewWorkspace(1, 1)
	for h := 0; h < g.Heads; h++ {
		var ce float64
		n, t1, t5 := 0, 0, 0
		for i := 0; i < rows; i++ {
			tg := b.Targets[h][i]
			if tg < 0 {
				continue
			}
			n++
			m.Logits(tensor.CPU(), ws2, h, b.X[i*g.Hidden:], 1, logits)
			l64 := make([]float64, g.Vocab)
			var z float64
			for v := range logits {
				l64[v] = float64(logits[v])
				z += math.Exp(l64[v])
			}
			ce += math.Log(z) - l64[tg]
			idx := make([]int, g.Vocab)
			for v := range idx {
				idx[v] = v
			}
			sort.SliceStable(idx, func(a, c int) bool { return l64[idx[a]] > l64[idx[c]] })
			for k, v := range idx {
				if v == int(tg) {
					if k == 0 {
						t1++
					}
					if k < 5 {
						t5++
					}
				}
			}
		}
		if gotRows[h] != n || gotT1[h] != t1 || gotT5[h] != t5 || math.Abs(gotCE[h]-ce) > 1e-5*ce {
			t.Fatalf("head %d: rows %d ce %g top1 %d top5 %d; reference %d %g %d %d", h, gotRows[h], gotCE[h], gotT1[h], gotT5[h], n, ce, t1, t5)
		}
	}
}

func TestAcceptance(t *testing.T) {
	// 1 + 0.5 + 0.5*0.4 + 0.5*0.4*0.5
	if a := Acceptance([]float64{0.5, 0.4, 0.5}); math.Abs(a-1.8) > 1e-12 {
		t.Fatalf("Acceptance = %g, want 1.8", a)
	}
}

// TestTrainStepAllocations: a training step allocates nothing per token; the
// only allocations are the goroutine launches of its parallel loops (one per
// logits chunk and per block, per head), so at a fixed chunk size doubling the
// rows doubles at most the chunk count.
func TestTrainStepAllocations(t *testing.T) {
	g := Geometry{Hidden: 16, Vocab: 50, Heads: 3, Layers: 1}
	m, _ := randomHeads(t, g, 2)
	m2, _ := NewHeads(g, m.LMHead[0], true)
	copy(m2.ParamData(), m.ParamData())
	count := func(rows, chunk int) float64 {
		ws := m2.NewWorkspace(rows, chunk)
		b := &Batch{Rows: rows, X: make([]float32, rows*g.Hidden)}
		for h := 0; h < g.Heads; h++ {
			b.Targets = append(b.Targets, make([]int32, rows))
		}
		w := Weights(g.Heads, 0.8)
		return testing.AllocsPerRun(5, func() { m2.TrainStep(tensor.CPU(), ws, b, w) })
	}
	// Same number of parallel loops (one chunk per head), 4x the rows.
	small, large := count(2048, 2048), count(8192, 8192)
	if large != small || large > 64 {
		t.Fatalf("allocations per step: %v at 2048 rows, %v at 8192 rows", small, large)
	}
	t.Logf("allocations per step: %v (2048 rows), %v (8192 rows)", small, large)
}
