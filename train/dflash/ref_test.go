package dflash

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	ddflash "github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/train/dataset"
)

// tinyConfig is a small target shape for the checks: GQA (4 heads over 2
// key/value heads), head_dim 4.
func tinyConfig() *checkpoint.Config {
	return &checkpoint.Config{HiddenSize: 8, NumHeads: 4, NumKVHeads: 2, HeadDim: 4, IntermediateSize: 12,
		RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositions: 128, VocabSize: 11, NumLayers: 4}
}

// tinyProblem builds a random draft (norm weights away from one, so their
// gradients matter), a target embedding and lm_head, and one sequence's
// blocks with anchors at several positions.
func tinyProblem(t *testing.T, causal bool) (ddflash.Geometry, *ddflash.Weights[float64], *seqBatch, []float32) {
	t.Helper()
	c := tinyConfig()
	g := ddflash.TargetGeometry(c, 2, 2, 4, 10)
	g.Causal = causal
	r := rand.New(rand.NewPCG(7, 8))
	w, err := ddflash.NewWeights[float64](g, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range w.Tensors(g) {
		for i := range ts.Data {
			if len(ts.Shape) == 1 {
				ts.Data[i] = 1 + 0.3*r.NormFloat64()
			} else {
				ts.Data[i] = 0.4 * r.NormFloat64()
			}
		}
	}
	V, H := g.Vocab, g.Hidden
	lm := make([]float32, V*H)
	emb := make([]float32, V*H)
	for i := range lm {
		lm[i], emb[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	T := 14
	s := &dataset.Sample{Tokens: make([]int32, T), LossMask: make([]bool, T)}
	for i := range T {
		s.Tokens[i] = int32(r.IntN(V - 1))
		s.LossMask[i] = i >= 3 && i != 9
	}
	for range g.Features {
		f := make([]float32, T*H)
		for i := range f {
			f[i] = float32(r.NormFloat64())
		}
		s.Features = append(s.Features, f)
	}
	// Anchors 3, 5 and 11: the last block runs past the sequence's end and
	// block 5 straddles the unmasked position 9.
	sb, err := buildBlocks(g, 2, s, T, []int{3, 5, 11}, emb)
	if err != nil {
		t.Fatal(err)
	}
	return g, w, sb, lm
}

func to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// loss64 runs the float64 passes over sb and returns the loss, with the
// gradients accumulated into gw when it is not nil.
func loss64(t *testing.T, g ddflash.Geometry, w, gw *ddflash.Weights[float64], sb *seqBatch, lm []float64) float64 {
	t.Helper()
	n := ddflash.NewNet(g, w, gw)
	if err := n.Context(to64(sb.feat), sb.pos); err != nil {
		t.Fatal(err)
	}
	if err := n.Blocks(to64(sb.emb), sb.blocks, n.Kc, n.Vc); err != nil {
		t.Fatal(err)
	}
	R := len(sb.labels)
	logits := make([]float64, R*g.Vocab)
	var dY []float64
	if gw != nil {
		dY = make([]float64, R*g.Hidden)
	}
	l := n.Loss(lm, sb.labels, sb.weights, sb.wsum, logits, dY, nil, nil)
	if gw != nil {
		n.Backward(dY)
	}
	return l
}

// TestGradientsFiniteDifferences checks every tensor's gradient (fc,
// hidden_norm, the injected context keys and values through each layer's
// k_proj, k_norm and v_proj, the block attention, the MLP, the norms and the
// loss) against float64 central differences, for the bidirectional and the
// causal block.
func TestGradientsFiniteDifferences(t *testing.T) {
	for _, causal := range []bool{false, true} {
		g, w, sb, lm32 := tinyProblem(t, causal)
		lm := to64(lm32)
		gw, _ := ddflash.NewWeights[float64](g, nil)
		loss64(t, g, w, gw, sb, lm)
		grads := gw.Tensors(g)
		r := rand.New(rand.NewPCG(1, 2))
		const eps = 1e-6
		checked := 0
		for ti, ts := range w.Tensors(g) {
			for range 6 {
				i := r.IntN(len(ts.Data))
				old := ts.Data[i]
				ts.Data[i] = old + eps
				lp := loss64(t, g, w, nil, sb, lm)
				ts.Data[i] = old - eps
				lm_ := loss64(t, g, w, nil, sb, lm)
				ts.Data[i] = old
				fd := (lp - lm_) / (2 * eps)
				an := grads[ti].Data[i]
				if math.Abs(fd-an) > 1e-6+1e-5*math.Abs(fd) {
					t.Errorf("causal=%v %s[%d]: analytic %.10g, finite difference %.10g", causal, ts.Name, i, an, fd)
				}
				if an != 0 {
					checked++
				}
			}
		}
		if checked < 100 {
			t.Errorf("causal=%v: only %d of the sampled gradients are non-zero: the check would not catch a missing path", causal, checked)
		}
	}
}

// TestFloat32MatchesFloat64 runs the same passes in float32 and float64.
func TestFloat32MatchesFloat64(t *testing.T) {
	g, w, sb, lm32 := tinyProblem(t, false)
	w32, _ := ddflash.NewWeights[float32](g, nil)
	for i, x := range w.All {
		w32.All[i] = float32(x)
	}
	n := ddflash.NewNet[float32](g, w32, nil)
	if err := n.Context(sb.feat, sb.pos); err != nil {
		t.Fatal(err)
	}
	if err := n.Blocks(sb.emb, sb.blocks, n.Kc, n.Vc); err != nil {
		t.Fatal(err)
	}
	logits := make([]float32, len(sb.labels)*g.Vocab)
	l32 := n.Loss(lm32, sb.labels, sb.weights, sb.wsum, logits, nil, nil, nil)
	l64 := loss64(t, g, w, nil, sb, to64(lm32))
	if math.Abs(l32-l64) > 1e-4*math.Abs(l64) {
		t.Fatalf("float32 loss %.8g, float64 %.8g", l32, l64)
	}
}

// blockOut runs the float64 forward and returns Y.
func blockOut(t *testing.T, g ddflash.Geometry, w *ddflash.Weights[float64], sb *seqBatch) []float64 {
	t.Helper()
	n := ddflash.NewNet(g, w, nil)
	if err := n.Context(to64(sb.feat), sb.pos); err != nil {
		t.Fatal(err)
	}
	if err := n.Blocks(to64(sb.emb), sb.blocks, n.Kc, n.Vc); err != nil {
		t.Fatal(err)
	}
	return append([]float64(nil), n.Y...)
}

// TestStrictMaskAndBlockIsolation: a block anchored at p must not change when
// the context feature at p (its anchor's own target state, which does not
// exist yet at inference) or any later one changes, nor when another block's
// inputs change; and it must change when the context before p changes (the
// injection is wired at all).
func TestStrictMaskAndBlockIsolation(t *testing.T) {
	g, w, sb, _ := tinyProblem(t, false)
	H, F, B := g.Hidden, g.Features, g.BlockSize
	base := blockOut(t, g, w, sb)
	same := func(a, b []float64, rows [2]int) bool {
		for i := rows[0] * H; i < rows[1]*H; i++ {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	// Block 1 is anchored at 5: perturb context row 5 (and later).
	p := sb.blocks[1].Start
	for j := p; j < len(sb.pos); j++ {
		for k := range F * H {
			sb.feat[j*F*H+k] += 1
		}
	}
	got := blockOut(t, g, w, sb)
	if !same(base, got, [2]int{0, 2 * B}) {
		t.Errorf("blocks anchored at 3 and 5 changed when context rows %d.. changed: the context mask is not strict (j < p)", p)
	}
	// Perturb block 0's anchor embedding: blocks 1 and 2 must not move.
	for k := range H {
		sb.emb[k] += 1
	}
	got2 := blockOut(t, g, w, sb)
	if !same(got, got2, [2]int{B, 3 * B}) {
		t.Error("changing block 0's tokens changed other blocks: attention leaks across blocks")
	}
	if same(got, got2, [2]int{0, B}) {
		t.Error("changing block 0's anchor did not change block 0")
	}
	// Context before 3 feeds block 0.
	for k := range F * H {
		sb.feat[k] += 1
	}
	got3 := blockOut(t, g, w, sb)
	if same(got2, got3, [2]int{0, B}) {
		t.Error("changing context row 0 did not change the block anchored at 3: the context is not injected")
	}
}
