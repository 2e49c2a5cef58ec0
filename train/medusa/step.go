package medusa

import (
	"fmt"
	"math"

	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/optim"
)

// Workspace holds the activations of heads m for at most MaxRows positions
// per head, and runs the training step and the held-out evaluation on them.
// Heads are processed one after another, so it is sized for one head.
type Workspace struct {
	MaxRows, Chunk int
	m              *dmedusa.Heads
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
	// dev runs the losses: one device per workspace, as a device serves
	// one caller.
	dev tensor.Device
}

// NewWorkspace allocates activations of heads m for up to maxRows positions.
// chunk bounds the rows of the [chunk, V] logits buffer (0 means min(maxRows,
// 512)): the output layer runs as GEMMs of chunk rows, large enough to be
// efficient.
func NewWorkspace(m *dmedusa.Heads, maxRows, chunk int) *Workspace {
	if chunk <= 0 || chunk > maxRows {
		chunk = min(maxRows, 512)
	}
	H := m.Hidden
	// The losses are element-wise: the device's backend is never called.
	ws := &Workspace{MaxRows: maxRows, Chunk: chunk, m: m, dev: tensor.NewCPU(tensor.PureGo())}
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

// params lists the heads' trainable tensors for the optimiser, under their
// vLLM names (dmedusa.Heads.Params).
func params(m *dmedusa.Heads) []optim.Param {
	var ps []optim.Param
	for _, p := range m.Params() {
		ps = append(ps, optim.Param{Name: p.Name, Data: p.Data, Grad: p.Grad})
	}
	return ps
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
func (ws *Workspace) TrainStep(be tensor.Backend, b *Batch, w []float64) float64 {
	return ws.pass(be, b, w, true)
}

// Evaluate runs the forward pass only and records, per head, the summed
// cross-entropy, the number of rows and the top-1/top-5 hits (see Stats).
func (ws *Workspace) Evaluate(be tensor.Backend, b *Batch) {
	ws.pass(be, b, nil, false)
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

func (ws *Workspace) pass(be tensor.Backend, b *Batch, w []float64, train bool) float64 {
	m := ws.m
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
		m.Forward(be, ws.xs, ws.zs, h, n)
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
				ws.dev.CrossEntropyEval(rl, rank, tensor.HostTensor(logits, c, V), tensor.HostI32(tg, c, 1))
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
			lg := tensor.HostTensor(logits, c, V)
			ws.headLoss[h] += ws.dev.CrossEntropy(lg, lg, tensor.HostI32(tg, c, 1), tensor.HostTensor(rw, c, 1)) / float64(rowW)
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
				m.Backward(be, ws.dx, ws.dz, ws.xs, ws.zs, h, n)
			}
		}
	}
	return total
}
