package nn

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestExpfAccuracy checks the exponential the cross-entropies take
// (tensor.Expf, the inference kernels') over the shifted logits' range.
func TestExpfAccuracy(t *testing.T) {
	worst := 0.0
	for i := 0; i <= 2_000_000; i++ {
		x := float32(-86 * float64(i) / 2_000_000)
		want := math.Exp(float64(x))
		rel := math.Abs(float64(tensor.Expf(x))-want) / want
		worst = math.Max(worst, rel)
	}
	if worst > 3e-7 { // float32 epsilon is 1.19e-7: about two ulps
		t.Fatalf("expf worst relative error %g", worst)
	}
	if tensor.Expf(-88) != 0 || tensor.Expf(0) != 1 {
		t.Fatalf("Expf(-88)=%g Expf(0)=%g", tensor.Expf(-88), tensor.Expf(0))
	}
}

// TestCrossEntropyManyRows checks the chunked sums on more rows than the
// kernels keep chunk totals for (so chunks hold several rows), with unit
// weights (nil) and the gradient in a separate buffer, against float64.
func TestCrossEntropyManyRows(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	rows, v := 1000, 300
	logits := testutil.RandNormal(r, rows*v, 3)
	targets := make([]int32, rows)
	var want float64
	for row := range targets {
		targets[row] = int32(r.IntN(v+5)) - 5 // a few negative: skipped
		if targets[row] < 0 {
			targets[row] = -1
			continue
		}
		want -= testutil.LogSoftmax(to64(logits[row*v : row*v+v]))[targets[row]]
	}
	d := make([]float32, rows*v)
	got := CrossEntropy(logits, rows, v, targets, nil, d)
	if math.Abs(got-want) > 1e-6*math.Abs(want) {
		t.Fatalf("cross-entropy %.10g, want %.10g", got, want)
	}
	for row := 0; row < rows; row++ {
		ls := testutil.LogSoftmax(to64(logits[row*v : row*v+v]))
		want := make([]float64, v)
		if tg := targets[row]; tg >= 0 {
			for j := range want {
				want[j] = math.Exp(ls[j])
			}
			want[tg]--
		}
		assertClose(t, "dlogits", d[row*v:row*v+v], want, 1e-6)
	}
}

// TestCrossEntropyEval checks per-row losses and target ranks against a float64
// log-softmax and a full sort (ties count in the target's favour).
func TestCrossEntropyEval(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	rows, v := 40, 13
	logits := testutil.RandNormal(r, rows*v, 2)
	for j := 0; j < v; j++ { // one row of ties: every logit equal
		logits[5*v+j] = 0.5
	}
	targets := make([]int32, rows)
	for i := range targets {
		targets[i] = int32(r.IntN(v))
	}
	targets[7] = -1
	keep := append([]float32(nil), logits...)
	loss, rank := make([]float64, rows), make([]int32, rows)
	CrossEntropyEval(logits, rows, v, targets, loss, rank)
	if !slices.Equal(keep, logits) {
		t.Fatal("CrossEntropyEval changed the logits")
	}
	for row := 0; row < rows; row++ {
		tg := targets[row]
		if tg < 0 {
			if loss[row] != 0 || rank[row] != -1 {
				t.Fatalf("row %d without target: loss %g rank %d", row, loss[row], rank[row])
			}
			continue
		}
		l64 := to64(logits[row*v : row*v+v])
		want := -testutil.LogSoftmax(l64)[tg]
		if math.Abs(loss[row]-want) > 1e-6*(1+want) {
			t.Fatalf("row %d loss %.9g, want %.9g", row, loss[row], want)
		}
		idx := make([]int, v)
		for j := range idx {
			idx[j] = j
		}
		sort.SliceStable(idx, func(a, b int) bool { return l64[idx[a]] > l64[idx[b]] })
		wantRank := 0
		for idx[wantRank] != int(tg) && l64[idx[wantRank]] > l64[tg] {
			wantRank++
		}
		if int(rank[row]) != wantRank {
			t.Fatalf("row %d rank %d, want %d", row, rank[row], wantRank)
		}
	}
	if rank[5] != 0 {
		t.Fatalf("all-tied row ranks its target %d, want 0", rank[5])
	}
}
