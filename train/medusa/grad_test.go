package medusa

import (
	"math"
	"math/rand/v2"
	"testing"

	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// refLoss is an independent float64 forward of the loss TrainStep documents:
// sum_h w_h * mean over valid rows of -log softmax(lm_h * blocks_h(x))[target].
// p lists every parameter in Params order, as float64.
func refLoss(g dmedusa.Geometry, p [][]float64, shared []float64, b *Batch, w []float64) float64 {
	return refHeadMeans(g, p, shared, b, w, func(_, _ int, logq float64) float64 { return -logq })
}

// refHeadMeans runs the float64 forward of every head over the batch and
// returns sum_h w_h * mean over head h's valid rows r of rowLoss(h, r,
// log softmax(lm_h * blocks_h(x_r))[target]): the shape every loss the
// heads train with shares.
func refHeadMeans(g dmedusa.Geometry, p [][]float64, shared []float64, b *Batch, w []float64, rowLoss func(h, r int, logq float64) float64) float64 {
	H, V := g.Hidden, g.Vocab
	var total float64
	k := 0
	for h := 0; h < g.Heads; h++ {
		ws, bs := make([][]float64, g.Layers), make([][]float64, g.Layers)
		for l := 0; l < g.Layers; l++ {
			ws[l], bs[l] = p[k], p[k+1]
			k += 2
		}
		lm := shared
		if !g.SharedLMHead {
			lm = p[k]
			k++
		}
		var sum float64
		n := 0
		for r := 0; r < b.Rows; r++ {
			t := b.Targets[h][r]
			if t < 0 {
				continue
			}
			n++
			x := make([]float64, H)
			for i := range x {
				x[i] = float64(b.X[r*H+i])
			}
			for l := 0; l < g.Layers; l++ {
				nx := make([]float64, H)
				for o := 0; o < H; o++ {
					z := bs[l][o]
					for i := 0; i < H; i++ {
						z += ws[l][o*H+i] * x[i]
					}
					nx[o] = x[o] + z/(1+math.Exp(-z))
				}
				x = nx
			}
			logits := make([]float64, V)
			mx := math.Inf(-1)
			for v := 0; v < V; v++ {
				for i := 0; i < H; i++ {
					logits[v] += lm[v*H+i] * x[i]
				}
				mx = math.Max(mx, logits[v])
			}
			var z float64
			for _, l := range logits {
				z += math.Exp(l - mx)
			}
			sum += rowLoss(h, r, logits[t]-mx-math.Log(z))
		}
		if n > 0 {
			total += w[h] * sum / float64(n)
		}
	}
	return total
}

// randomHeads returns heads of geometry g with random blocks and lm_heads
// over a random target lm_head, which it returns too.
func randomHeads(t *testing.T, g dmedusa.Geometry, seed uint64) (*dmedusa.Heads, []float32) {
	r := rand.New(rand.NewPCG(seed, 5))
	target := make([]float32, g.Vocab*g.Hidden)
	randFill(r, target, 0.5)
	m, err := dmedusa.NewHeads(g, target, false)
	if err != nil {
		t.Fatal(err)
	}
	for h := 0; h < g.Heads; h++ {
		for l := 0; l < g.Layers; l++ {
			randFill(r, m.W[h][l], 0.3)
			randFill(r, m.B[h][l], 0.3)
		}
		if !g.SharedLMHead {
			randFill(r, m.LMHead[h], 0.5) // heads differ from each other and from the target
		}
	}
	return m, target
}

// randomBatch returns rows random positions with a random target per head
// for heads of geometry g.
func randomBatch(r *rand.Rand, g dmedusa.Geometry, rows int) *Batch {
	b := &Batch{Rows: rows, X: make([]float32, rows*g.Hidden), Targets: make([][]int32, g.Heads)}
	randFill(r, b.X, 1)
	for h := range b.Targets {
		b.Targets[h] = make([]int32, rows)
		for i := range b.Targets[h] {
			b.Targets[h][i] = int32(r.IntN(g.Vocab))
		}
	}
	return b
}

// gradsAndParams reads the workspace's gradients back and returns them with
// the heads' parameters as float64, both in Tensors order.
func gradsAndParams(ws *Workspace, m *dmedusa.Heads) ([][]float32, [][]float64) {
	params := m.Tensors()
	grads := make([][]float32, len(params))
	for i, p := range ws.n.Params() {
		grads[i] = make([]float32, p.Grad.Len())
		ws.dev.Read(grads[i], p.Grad)
	}
	p64 := make([][]float64, len(params))
	for i, p := range params {
		p64[i] = make([]float64, len(p.Data))
		for j, v := range p.Data {
			p64[i][j] = float64(v)
		}
	}
	return grads, p64
}

func randFill(r *rand.Rand, s []float32, scale float64) {
	for i := range s {
		s[i] = float32(r.NormFloat64() * scale)
	}
}

// TestGradientsAgainstFiniteDifferences checks every backward (residual SiLU
// blocks, lm_head, the fused cross-entropy with decay weights and per-head means)
// against central differences of the float64 reference loss.
func TestGradientsAgainstFiniteDifferences(t *testing.T) {
	for _, shared := range []bool{false, true} {
		g := dmedusa.Geometry{Hidden: 8, Vocab: 11, Heads: 2, Layers: 2, SharedLMHead: shared}
		r := rand.New(rand.NewPCG(7, uint64(len(t.Name()))))
		target := make([]float32, g.Vocab*g.Hidden)
		randFill(r, target, 0.5)
		m, err := dmedusa.NewHeads(g, target, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Tensors() {
			if p.Name[0] == 'b' { // blocks: random instead of zero so every path is exercised
				randFill(r, p.Data, 0.4)
			} else {
				randFill(r, p.Data, 0.5)
			}
		}
		rows := 7
		b := randomBatch(r, g, rows)
		b.Targets[0][2], b.Targets[1][5], b.Targets[1][6] = -1, -1, -1 // heads see different row sets
		w := Weights(g.Heads, 0.8)
		ws := mustWorkspace(t, cpu.DefaultBackend(), m, rows, 3) // chunks of 3, 3, 1 rows
		ws.n.ZeroGrad()
		loss := ws.TrainStep(b, w)
		params := m.Tensors()
		grads, p64 := gradsAndParams(ws, m)
		sh64 := make([]float64, len(target))
		for j, v := range target {
			sh64[j] = float64(v)
		}
		ref := refLoss(g, p64, sh64, b, w)
		if math.Abs(ref-loss) > 1e-5*math.Abs(ref) {
			t.Fatalf("shared=%v: loss %g, float64 reference %g", shared, loss, ref)
		}
		const eps = 1e-5
		checked := 0
		for i, p := range params {
			for j := range p.Data {
				orig := p64[i][j]
				p64[i][j] = orig + eps
				up := refLoss(g, p64, sh64, b, w)
				p64[i][j] = orig - eps
				dn := refLoss(g, p64, sh64, b, w)
				p64[i][j] = orig
				fd := (up - dn) / (2 * eps)
				got := float64(grads[i][j])
				if math.Abs(got-fd) > 2e-4*math.Abs(fd)+2e-6 {
					t.Fatalf("shared=%v %s[%d]: gradient %.8g, finite difference %.8g", shared, p.Name, j, got, fd)
				}
				checked++
			}
		}
		// The gradient test is only meaningful if the lm_head and block grads are non-trivial.
		if checked == 0 {
			t.Fatal("no parameters checked")
		}
		t.Logf("shared=%v: %d gradients match, loss %.6f", shared, checked, loss)
	}
}
