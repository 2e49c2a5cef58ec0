package medusa

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
)

// TestEvaluateAgainstReference checks Evaluate's per-head loss sums and
// top-1/top-5 counts against a float64 forward with a full sort.
func TestEvaluateAgainstReference(t *testing.T) {
	g := dmedusa.Geometry{Hidden: 8, Vocab: 11, Heads: 2, Layers: 2}
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
	ws := mustWorkspace(t, cpu.DefaultBackend(), m, rows, 7)
	ws.Evaluate(b)
	gotRows, gotCE, gotT1, gotT5 := ws.Stats()
	sc, err := m.NewScorer(cpu.New(nil), g.Heads)
	if err != nil {
		t.Fatal(err)
	}
	right := make([][]bool, g.Heads) // reference: head h ranks row i's target first
	for h := 0; h < g.Heads; h++ {
		right[h] = make([]bool, rows)
		var ce float64
		n, t1, t5 := 0, 0, 0
		for i := 0; i < rows; i++ {
			tg := b.Targets[h][i]
			if tg < 0 {
				continue
			}
			n++
			logits := sc.Score(b.X[i*g.Hidden:])[h*g.Vocab : (h+1)*g.Vocab]
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
						right[h][i] = true
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
	// Leads: per row, the run of leading heads that ranked their target first
	// (a head without a target ends it).
	leads := ws.Leads(rows)
	longest := 0
	for i := 0; i < rows; i++ {
		k := 0
		for k < g.Heads && b.Targets[k][i] >= 0 && right[k][i] {
			k++
		}
		if int(leads[i]) != k {
			t.Fatalf("row %d: lead %d, reference %d", i, leads[i], k)
		}
		longest = max(longest, k)
	}
	if longest < 2 {
		t.Fatalf("degenerate lead check: longest run %d", longest)
	}
	t.Logf("leads checked on %d rows, longest run %d", rows, longest)
}

// serialBackend is a plain triple-loop cpu.Backend that allocates nothing,
// so that an allocation count sees the trainer's own allocations only (the
// pure-Go sgemm launches work per row block, which scales with the rows).
type serialBackend struct{}

func (serialBackend) Name() string { return "serial" }

func (serialBackend) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k; p++ {
				av, bv := a[i*lda+p], b[p*ldb+j]
				if transA {
					av = a[p*lda+i]
				}
				if transB {
					bv = b[j*ldb+p]
				}
				s += av * bv
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}

func (serialBackend) Sgemv(trans bool, m, n int, alpha float32, a []float32, lda int, x []float32, beta float32, y []float32) {
	rows, cols := m, n
	if trans {
		rows, cols = n, m
	}
	for i := 0; i < rows; i++ {
		var s float32
		for j := 0; j < cols; j++ {
			av := a[i*lda+j]
			if trans {
				av = a[j*lda+i]
			}
			s += av * x[j]
		}
		if beta == 0 {
			y[i] = alpha * s
		} else {
			y[i] = alpha*s + beta*y[i]
		}
	}
}

// TestTrainStepAllocations: a training step allocates nothing per token; the
// only allocations are the closures of its parallel loops (one per logits
// chunk and per block, per head), so at a fixed chunk count 4x the rows
// allocate no more. The matrix products run on serialBackend, which allocates
// nothing, so the count is the trainer's own whatever BLAS is installed.
func TestTrainStepAllocations(t *testing.T) {
	g := dmedusa.Geometry{Hidden: 16, Vocab: 50, Heads: 3, Layers: 1}
	m, _ := randomHeads(t, g, 2)
	m2, _ := dmedusa.NewHeads(g, m.LMHead[0], true)
	copy(m2.ParamData(), m.ParamData())
	count := func(rows, chunk int) float64 {
		ws := mustWorkspace(t, serialBackend{}, m2, rows, chunk)
		b := &Batch{Rows: rows, X: make([]float32, rows*g.Hidden)}
		for h := 0; h < g.Heads; h++ {
			b.Targets = append(b.Targets, make([]int32, rows))
		}
		w := Weights(g.Heads, 0.8)
		return testing.AllocsPerRun(2, func() { ws.TrainStep(b, w) })
	}
	// Same number of parallel loops (one chunk per head), 4x the rows.
	small, large := count(512, 512), count(2048, 2048)
	if large != small || large > 64 {
		t.Fatalf("allocations per step: %v at 512 rows, %v at 2048 rows", small, large)
	}
	t.Logf("allocations per step: %v (512 rows), %v (2048 rows)", small, large)
}

// TestHeldOutChainWalk checks Metrics.Chain on hand-worked samples: heads whose
// every prediction is a chosen token c_t (zero blocks, identity lm_head, one-hot
// states), walked as greedy chain decoding would walk them, across batch
// boundaries and past a sample without any head target.
func TestHeldOutChainWalk(t *testing.T) {
	const V, heads = 4, 3
	lm := make([]float32, V*V)
	for v := range V {
		lm[v*V+v] = 1
	}
	m, err := dmedusa.NewHeads(dmedusa.Geometry{Hidden: V, Vocab: V, Heads: heads, Layers: 1}, lm, false)
	if err != nil {
		t.Fatal(err)
	}
	sample := func(tokens []int32, respFrom int, c []int) dataset.Sample {
		s := dataset.Sample{Tokens: tokens, LossMask: make([]bool, len(tokens)), Final: make([]float32, len(tokens)*V)}
		for j := range tokens {
			s.LossMask[j] = j >= respFrom
			s.Final[j*V+c[j]] = 5
		}
		return s
	}
	data := &dataset.Memory{H: V, Samples: []dataset.Sample{
		// From t=1 (response from 2): c=1 matches tokens 3, 4 but not 5: 3
		// tokens; from t=4: c=3 matches 6, 7 and head 2 has no target: 3
		// tokens. 6 tokens in 2 steps.
		sample([]int32{0, 0, 1, 1, 1, 2, 3, 3}, 2, []int{0, 1, 0, 0, 3, 0, 0, 0}),
		// c=3 everywhere: t=0 misses (1 token), t=1 hits 3 then misses (2),
		// t=3 has no head target (1). 4 tokens in 3 steps.
		sample([]int32{0, 1, 2, 3, 0}, 1, []int{3, 3, 3, 3, 3}),
		// No head has a target anywhere: 1 token in 1 step.
		sample([]int32{0, 2}, 1, []int{0, 0}),
	}}
	for _, rows := range []int{3, 64} {
		ws := mustWorkspace(t, cpu.DefaultBackend(), m, rows, 2)
		b := &Batch{X: make([]float32, rows*V), Targets: make([][]int32, heads)}
		for h := range b.Targets {
			b.Targets[h] = make([]int32, rows)
		}
		mt, err := newEvaluator(rows).evaluate(ws, b, data, []int{0, 2, 1}, heads, V, V, Weights(heads, 1), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if mt.ChainSteps != 6 || math.Abs(mt.Chain-11.0/6) > 1e-12 {
			t.Fatalf("batch of %d rows: chain %g in %d steps, want 11/6 in 6", rows, mt.Chain, mt.ChainSteps)
		}
	}
}

// TestAutoBatchAndEpochs pins the data-derived defaults documented on
// DefaultConfig.
func TestAutoBatchAndEpochs(t *testing.T) {
	for _, c := range []struct{ pos, batch, epochs int }{
		{0, 64, 40}, {1000, 64, 40}, {32767, 64, 40}, {32768, 128, 40},
		{36900, 128, 40}, {100_000, 256, 40}, {200_000, 512, 25}, {800_000, 2048, 7}, {1_048_575, 2048, 5}, {1_048_576, 4096, 5},
		{2_500_000, 4096, 2}, {100_000_000, 4096, 2},
	} {
		if b, e := AutoBatchTokens(c.pos), AutoEpochs(c.pos); b != c.batch || e != c.epochs {
			t.Errorf("%d positions: batch %d, epochs %d; want %d, %d", c.pos, b, e, c.batch, c.epochs)
		}
	}
}

// mustWorkspace returns a workspace of heads m on a CPU device of be.
func mustWorkspace(tb testing.TB, be cpu.Backend, m *dmedusa.Heads, rows, chunk int) *Workspace {
	tb.Helper()
	ws, err := NewWorkspace(cpu.New(be), m, rows, chunk)
	if err != nil {
		tb.Fatal(err)
	}
	return ws
}
