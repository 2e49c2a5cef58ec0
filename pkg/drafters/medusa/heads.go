// Package medusa trains Medusa-1 heads on a frozen target's final hidden states
// and exports them in the layouts vLLM and FasterDecoding/TensorRT-LLM load.
//
// Head h (0-based) reads the target's post-norm hidden state x at position t and
// predicts the token at t+h+2 (the target's own lm_head predicts t+1):
//
//	x_{l+1} = x_l + SiLU(W_{h,l} x_l + b_{h,l})   for l = 0..layers-1
//	logits  = lm_head_h x_layers
//
// The forward and backward passes are written side by side (llm.c style); all
// matrix products run through tensor.Backend and every buffer is allocated once.
package medusa

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/optim"
)

// Geometry is the shape of a set of Medusa heads.
type Geometry struct {
	Hidden int // H, the target's hidden size
	Vocab  int // V, the target's vocabulary size
	Heads  int // number of Medusa heads
	Layers int // residual blocks per head
	// SharedLMHead makes every head use the target's lm_head, frozen: it is not
	// trained and the FasterDecoding export cannot omit it (see Export).
	SharedLMHead bool
}

func (g Geometry) validate() error {
	if g.Hidden <= 0 || g.Vocab <= 0 || g.Heads <= 0 || g.Layers < 0 {
		return fmt.Errorf("medusa: invalid geometry hidden=%d vocab=%d heads=%d layers=%d (want positive sizes, layers >= 0)",
			g.Hidden, g.Vocab, g.Heads, g.Layers)
	}
	return nil
}

// Heads holds the parameters of all heads and, when built for training, their
// gradients. Parameters and gradients are each one contiguous allocation carved
// into per-tensor views.
type Heads struct {
	Geometry
	// W[h][l] is block l of head h's weight [H,H] (out, in); B[h][l] its bias [H].
	W, B [][][]float32
	// LMHead[h] is head h's output matrix [V,H]. With SharedLMHead every entry is
	// the same slice: the target's lm_head, which is never written.
	LMHead [][]float32
	// Gradients with the same layout (nil when built without gradients); GLMHead
	// is nil with SharedLMHead.
	GW, GB  [][][]float32
	GLMHead [][]float32

	params, grads []float32
}

// NewHeads allocates heads of geometry g: blocks zero-initialised, and each
// head's lm_head a copy of targetLMHead [V,H] (the target's lm_head, or its
// embedding when tied), or with SharedLMHead a reference to it. withGrads
// allocates the gradient buffers for training.
func NewHeads(g Geometry, targetLMHead []float32, withGrads bool) (*Heads, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	if len(targetLMHead) != g.Vocab*g.Hidden {
		return nil, fmt.Errorf("medusa: target lm_head has %d values, want vocab %d x hidden %d", len(targetLMHead), g.Vocab, g.Hidden)
	}
	m := newHeads(g, withGrads, targetLMHead)
	if !g.SharedLMHead {
		for h := range m.LMHead {
			copy(m.LMHead[h], targetLMHead)
		}
	}
	return m, nil
}

// newHeads allocates zeroed heads; shared is the lm_head used with SharedLMHead.
func newHeads(g Geometry, withGrads bool, shared []float32) *Heads {
	hh, v := g.Hidden*g.Hidden, g.Vocab*g.Hidden
	perHead := g.Layers * (hh + g.Hidden)
	if !g.SharedLMHead {
		perHead += v
	}
	m := &Heads{Geometry: g, params: make([]float32, g.Heads*perHead)}
	m.W, m.B, m.LMHead = carve(g, m.params, shared)
	if withGrads {
		m.grads = make([]float32, len(m.params))
		m.GW, m.GB, m.GLMHead = carve(g, m.grads, nil)
	}
	return m
}

func carve(g Geometry, buf, shared []float32) (w, b [][][]float32, lm [][]float32) {
	hh, v := g.Hidden*g.Hidden, g.Vocab*g.Hidden
	take := func(n int) []float32 { s := buf[:n:n]; buf = buf[n:]; return s }
	w = make([][][]float32, g.Heads)
	b = make([][][]float32, g.Heads)
	lm = make([][]float32, g.Heads)
	for h := 0; h < g.Heads; h++ {
		w[h] = make([][]float32, g.Layers)
		b[h] = make([][]float32, g.Layers)
		for l := 0; l < g.Layers; l++ {
			w[h][l] = take(hh)
			b[h][l] = take(g.Hidden)
		}
		if g.SharedLMHead {
			lm[h] = shared
		} else {
			lm[h] = take(v)
		}
	}
	if g.SharedLMHead && shared == nil {
		lm = nil
	}
	return w, b, lm
}

// Params lists the trainable tensors with their gradients under their vLLM
// names (blocks.{h}.layers.{l}.weight|bias, lm_heads.{h}.weight), in a fixed
// order. The heads must have been built with gradients.
func (m *Heads) Params() []optim.Param {
	var ps []optim.Param
	for h := 0; h < m.Heads; h++ {
		for l := 0; l < m.Layers; l++ {
			ps = append(ps,
				optim.Param{Name: fmt.Sprintf("blocks.%d.layers.%d.weight", h, l), Data: m.W[h][l], Grad: m.GW[h][l]},
				optim.Param{Name: fmt.Sprintf("blocks.%d.layers.%d.bias", h, l), Data: m.B[h][l], Grad: m.GB[h][l]})
		}
		if !m.SharedLMHead {
			ps = append(ps, optim.Param{Name: fmt.Sprintf("lm_heads.%d.weight", h), Data: m.LMHead[h], Grad: m.GLMHead[h]})
		}
	}
	return ps
}

// ParamData returns the single allocation holding every trainable value, in
// Params order (used to snapshot and restore the best weights).
func (m *Heads) ParamData() []float32 { return m.params }

// Workspace holds the activations for at most MaxRows positions per head.
// Heads are processed one after another, so it is sized for one head.
type Workspace struct {
	MaxRows, Chunk int
	xs             [][]float32 // x_0..x_layers, each [MaxRows, H]
	zs             [][]float32 // pre-activations W x + b, each [MaxRows, H]
	dx, dz         []float32   // [MaxRows, H]
	logits         []float32   // [Chunk, V]: logits, then in place their gradient
	targets        []int32     // [MaxRows] compacted targets of the current head
	rowW           []float32   // [Chunk] the current head's loss weight per row
	rowLoss        []float64   // [Chunk] per-row cross-entropy (evaluation)
	rank           []int32     // [Chunk] per-row rank of the target (evaluation)
	rowOf          []int32     // [MaxRows] batch row of each gathered row
	lead           []int32     // [MaxRows] per batch row: heads 0..lead-1 all ranked their target first (evaluation)
	// statistics of the last pass, per head
	headLoss           []float64
	headRows           []int
	headTop1, headTop5 []int
}

// NewWorkspace allocates activations for up to maxRows positions. chunk bounds
// the rows of the [chunk, V] logits buffer (0 means min(maxRows, 512)): the
// output layer runs as GEMMs of chunk rows, large enough to be efficient.
func (m *Heads) NewWorkspace(maxRows, chunk int) *Workspace {
	if chunk <= 0 || chunk > maxRows {
		chunk = min(maxRows, 512)
	}
	H := m.Hidden
	ws := &Workspace{MaxRows: maxRows, Chunk: chunk}
	ws.xs = make([][]float32, m.Layers+1)
	for l := range ws.xs {
		ws.xs[l] = make([]float32, maxRows*H)
	}
	ws.zs = make([][]float32, m.Layers)
	for l := range ws.zs {
		ws.zs[l] = make([]float32, maxRows*H)
	}
	ws.dx = make([]float32, maxRows*H)
	ws.dz = make([]float32, maxRows*H)
	ws.logits = make([]float32, chunk*m.Vocab)
	ws.targets = make([]int32, maxRows)
	ws.rowW = make([]float32, chunk)
	ws.rowLoss = make([]float64, chunk)
	ws.rank = make([]int32, chunk)
	ws.rowOf = make([]int32, maxRows)
	ws.lead = make([]int32, maxRows)
	ws.headLoss = make([]float64, m.Heads)
	ws.headRows = make([]int, m.Heads)
	ws.headTop1 = make([]int, m.Heads)
	ws.headTop5 = make([]int, m.Heads)
	return ws
}

// Batch is a set of positions: their final hidden states and, per head, the
// token each head must predict there (-1 where that head has no target: beyond
// the sequence end or not a response token).
type Batch struct {
	Rows    int
	X       []float32 // [Rows, H]
	Targets [][]int32 // [Heads][Rows]
}

// residualSiLU computes z = x W^T + b (already in z) then out = x + SiLU(z).
func residualSiLU(out, x, z []float32) {
	tensor.Parallel(len(z), 16384, func(lo, hi int) {
		o, xx, zz := out[lo:hi], x[lo:hi], z[lo:hi]
		for i, v := range zz {
			o[i] = xx[i] + v/(1+float32(math.Exp(float64(-v))))
		}
	})
}

// residualSiLUBackward sets dz = dx * SiLU'(z) (the residual path keeps dx as is).
func residualSiLUBackward(dz, dx, z []float32) {
	tensor.Parallel(len(z), 16384, func(lo, hi int) {
		d, g, zz := dz[lo:hi], dx[lo:hi], z[lo:hi]
		for i, v := range zz {
			s := 1 / (1 + float32(math.Exp(float64(-v))))
			d[i] = g[i] * s * (1 + v*(1-s))
		}
	})
}

// gather copies the rows of x whose target for head h is valid into ws.xs[0]
// and their targets into ws.targets, returning how many there are.
func (ws *Workspace) gather(b *Batch, h, H int) int {
	n := 0
	x0 := ws.xs[0]
	for r, t := range b.Targets[h][:b.Rows] {
		if t < 0 {
			continue
		}
		copy(x0[n*H:(n+1)*H], b.X[r*H:(r+1)*H])
		ws.targets[n] = t
		ws.rowOf[n] = int32(r)
		n++
	}
	return n
}

// blocksForward runs head h's residual blocks on the first n rows of ws.xs[0].
func (m *Heads) blocksForward(be tensor.Backend, ws *Workspace, h, n int) {
	H := m.Hidden
	for l := 0; l < m.Layers; l++ {
		x, z := ws.xs[l][:n*H], ws.zs[l][:n*H]
		nn.Linear(be, z, x, m.W[h][l], m.B[h][l], n, H, H)
		residualSiLU(ws.xs[l+1][:n*H], x, z)
	}
}

// blocksBackward takes d(loss)/d(x_layers) in ws.dx and accumulates the block
// gradients of head h (the input x_0 is the frozen target's state: no gradient).
func (m *Heads) blocksBackward(be tensor.Backend, ws *Workspace, h, n int) {
	H := m.Hidden
	for l := m.Layers - 1; l >= 0; l-- {
		dz := ws.dz[:n*H]
		residualSiLUBackward(dz, ws.dx[:n*H], ws.zs[l][:n*H])
		var dx []float32
		if l > 0 {
			dx = ws.dx[:n*H] // dx_l = dx_{l+1} + dz W: accumulates onto the residual path
		}
		nn.LinearBackward(be, dx, m.GW[h][l], m.GB[h][l], dz, ws.xs[l][:n*H], m.W[h][l], n, H, H)
	}
}

// Weights returns the per-head loss weights decay^h.
func Weights(heads int, decay float64) []float64 {
	w := make([]float64, heads)
	for h := range w {
		w[h] = math.Pow(decay, float64(h))
	}
	return w
}

// TrainStep runs forward and backward over the batch and ACCUMULATES the
// parameter gradients. The loss is
//
//	L = sum_h w_h * (1/n_h) * sum_{t valid for h} CE_h(t)
//
// with n_h the number of positions in the batch where head h has a target
// (heads without any contribute nothing): each head's mean cross-entropy,
// weighted by w_h (Weights). It returns L; per-head means are in ws.HeadLoss.
func (m *Heads) TrainStep(be tensor.Backend, ws *Workspace, b *Batch, w []float64) float64 {
	return m.pass(be, ws, b, w, true)
}

// Evaluate runs the forward pass only and records, per head, the summed
// cross-entropy, the number of rows and the top-1/top-5 hits (see Stats).
func (m *Heads) Evaluate(be tensor.Backend, ws *Workspace, b *Batch) {
	m.pass(be, ws, b, nil, false)
}

// Stats returns, for the last TrainStep or Evaluate, per head: the number of
// positions with a target, the summed cross-entropy over them (unweighted), and
// how many had the target ranked first and within the top five (ties count in
// the target's favour). The slices are owned by the workspace.
func (ws *Workspace) Stats() (rows []int, ceSum []float64, top1, top5 []int) {
	return ws.headRows, ws.headLoss, ws.headTop1, ws.headTop5
}

// Leads returns, for the last Evaluate, per batch row the length k of the
// run of leading heads 0..k-1 that all ranked their target first; a head
// without a target there ends the run. 1+k is what a greedy chain of the
// heads drafted from that position would have accepted had the target
// produced the data's tokens. The slice is owned by the workspace.
func (ws *Workspace) Leads(rows int) []int32 { return ws.lead[:rows] }

func (m *Heads) pass(be tensor.Backend, ws *Workspace, b *Batch, w []float64, train bool) float64 {
	if b.Rows > ws.MaxRows {
		panic(fmt.Sprintf("medusa: batch of %d rows exceeds the workspace's %d", b.Rows, ws.MaxRows))
	}
	H, V := m.Hidden, m.Vocab
	var total float64
	if !train {
		clear(ws.lead[:b.Rows])
	}
	for h := 0; h < m.Heads; h++ {
		ws.headLoss[h], ws.headRows[h], ws.headTop1[h], ws.headTop5[h] = 0, 0, 0, 0
		n := ws.gather(b, h, H)
		ws.headRows[h] = n
		if n == 0 {
			continue
		}
		m.blocksForward(be, ws, h, n)
		xL := ws.xs[m.Layers]
		lm := m.LMHead[h]
		var rowW float32
		if train {
			rowW = float32(w[h] / float64(n))
			clear(ws.dx[:n*H])
		}
		for c0 := 0; c0 < n; c0 += ws.Chunk {
			c := min(ws.Chunk, n-c0)
			logits := ws.logits[:c*V]
			x := xL[c0*H : (c0+c)*H]
			tensor.MatMulT(be, logits, x, lm, c, V, H)
			tg := ws.targets[c0 : c0+c]
			if !train {
				rl, rank := ws.rowLoss[:c], ws.rank[:c]
				nn.CrossEntropyEval(logits, c, V, tg, rl, rank)
				rowOf := ws.rowOf[c0 : c0+c]
				for i, l := range rl {
					ws.headLoss[h] += l
					if rank[i] == 0 {
						ws.headTop1[h]++
						// Heads run in order: lead == h means heads 0..h-1 were all right.
						if r := rowOf[i]; ws.lead[r] == int32(h) {
							ws.lead[r]++
						}
					}
					if rank[i] < 5 {
						ws.headTop5[h]++
					}
				}
				continue
			}
			// Fused softmax-CE: the logits buffer becomes d(loss)/d(logits).
			// Every row weighs rowW; the unweighted sum is the head's loss.
			rw := ws.rowW[:c]
			for i := range rw {
				rw[i] = rowW
			}
			ws.headLoss[h] += nn.CrossEntropy(logits, c, V, tg, rw, logits) / float64(rowW)
			var glm []float32
			if !m.SharedLMHead {
				glm = m.GLMHead[h]
			}
			var dx []float32
			if m.Layers > 0 {
				dx = ws.dx[c0*H : (c0+c)*H]
			}
			nn.LinearBackward(be, dx, glm, nil, logits, x, lm, c, H, V)
		}
		if train {
			total += w[h] * ws.headLoss[h] / float64(n)
			if m.Layers > 0 {
				m.blocksBackward(be, ws, h, n)
			}
		}
	}
	return total
}

// ZeroGrad clears every gradient.
func (m *Heads) ZeroGrad() {
	g := m.grads
	tensor.Parallel(len(g), 1<<16, func(lo, hi int) { clear(g[lo:hi]) })
}

// Logits computes head h's logits for rows positions: x is [rows, H] (final
// post-norm target states), out receives [rows, V]. rows must not exceed
// ws.MaxRows. It is the inference path the evaluation and serving code use.
func (m *Heads) Logits(be tensor.Backend, ws *Workspace, h int, x []float32, rows int, out []float32) {
	if rows > ws.MaxRows {
		panic(fmt.Sprintf("medusa: %d rows exceed the workspace's %d", rows, ws.MaxRows))
	}
	H := m.Hidden
	copy(ws.xs[0][:rows*H], x[:rows*H])
	m.blocksForward(be, ws, h, rows)
	tensor.MatMulT(be, out[:rows*m.Vocab], ws.xs[m.Layers][:rows*H], m.LMHead[h], rows, m.Vocab, H)
}
