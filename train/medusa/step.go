package medusa

import (
	"fmt"
	"math"

	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/optim"
)

// Workspace holds the activations of heads m for at most MaxRows positions
// per head on a device, and runs the training step and the held-out
// evaluation on them. Heads are processed one after another, so it is sized
// for one head.
type Workspace struct {
	MaxRows, Chunk int
	m              *dmedusa.Heads
	n              *dmedusa.Layers
	dev            tensor.Device
	xs             []tensor.Tensor // x_0..x_layers, each [MaxRows, H]
	zs             []tensor.Tensor // pre-activations W x + b, each [MaxRows, H]
	dx, dz         tensor.Tensor   // [MaxRows, H]
	viewX, viewZ   []tensor.Tensor // the xs' and zs' rows of the head in flight
	logits         tensor.Tensor   // [Chunk, V]: logits, then in place their gradient
	targets        []int32         // [MaxRows] compacted targets of the current head
	tgt            tensor.Tensor   // I32 [MaxRows, 1] the targets on the device
	rowW           []float32       // [Chunk] the current head's loss weight per row
	rowWT          tensor.Tensor   // [Chunk, 1] rowW on the device
	rowLoss        []float64       // [Chunk] per-row cross-entropy (evaluation)
	rank           []int32         // [Chunk] per-row rank of the target (evaluation)
	rowOf          []int32         // [MaxRows] batch row of each gathered row
	lead           []int32         // [MaxRows] per batch row: heads 0..lead-1 all ranked their target first (evaluation)
	// lk is the LK loss TrainStep trains instead of the cross-entropy
	// when useLK (UseLK).
	lk    tensor.LK
	useLK bool
	// statistics of the last pass, per head
	headLoss           []float64
	headAlpha          []float64 // summed α of the head's rows (TrainStep with an LK loss)
	headRows           []int
	headTop1, headTop5 []int
	headRank           [][]int // [heads][RankBins] positions whose target the head ranked r (evaluation)
}

// RankBins is how many ranks the held-out evaluation counts per head: the
// widest a calibrated tree (spec.CalibratedChoices) may go at one depth.
const RankBins = 10

// NewWorkspace allocates activations of heads m for up to maxRows positions
// on dev, which the workspace then owns (a device serves one caller), and
// puts the heads on it (dmedusa.Heads.On: for heads built for training, their
// master weights and gradients). chunk
// bounds the rows of the [chunk, V] logits buffer (0 means min(maxRows,
// 512)): the output layer runs as GEMMs of chunk rows, large enough to be
// efficient.
func NewWorkspace(dev tensor.Device, m *dmedusa.Heads, maxRows, chunk int) (*Workspace, error) {
	if chunk <= 0 || chunk > maxRows {
		chunk = min(maxRows, 512)
	}
	n, err := m.On(dev)
	if err != nil {
		return nil, err
	}
	H := m.Hidden
	ws := &Workspace{MaxRows: maxRows, Chunk: chunk, m: m, n: n, dev: dev}
	al := tensor.Allocator{Dev: dev}
	alloc := al.F32
	ws.xs = make([]tensor.Tensor, m.Layers+1)
	for l := range ws.xs {
		ws.xs[l] = alloc(maxRows, H)
	}
	ws.zs = make([]tensor.Tensor, m.Layers)
	for l := range ws.zs {
		ws.zs[l] = alloc(maxRows, H)
	}
	ws.viewX, ws.viewZ = make([]tensor.Tensor, len(ws.xs)), make([]tensor.Tensor, len(ws.zs))
	ws.dx = alloc(maxRows, H)
	ws.dz = alloc(maxRows, H)
	ws.logits = alloc(chunk, m.Vocab)
	ws.rowWT = alloc(chunk, 1)
	ws.tgt = al.Alloc(tensor.I32, maxRows, 1)
	if al.Err != nil {
		return nil, fmt.Errorf("medusa: workspace of %d rows: %w", maxRows, al.Err)
	}
	ws.targets = make([]int32, maxRows)
	ws.rowW = make([]float32, chunk)
	ws.rowLoss = make([]float64, chunk)
	ws.rank = make([]int32, chunk)
	ws.rowOf = make([]int32, maxRows)
	ws.lead = make([]int32, maxRows)
	ws.headLoss = make([]float64, m.Heads)
	ws.headAlpha = make([]float64, m.Heads)
	ws.headRows = make([]int, m.Heads)
	ws.headTop1 = make([]int, m.Heads)
	ws.headTop5 = make([]int, m.Heads)
	ws.headRank = make([][]int, m.Heads)
	for h := range ws.headRank {
		ws.headRank[h] = make([]int, RankBins)
	}
	return ws, nil
}

// UseLK makes TrainStep train the LK loss l (tensor.LK, against the heads'
// one-hot targets: α is the probability a head gives its target) instead of
// the cross-entropy; Stats then reports its sums, and Alpha each head's
// mean α.
func (ws *Workspace) UseLK(l tensor.LK) { ws.lk, ws.useLK = l, true }

// Alpha returns, for the last TrainStep or Evaluate with an LK loss
// (UseLK), each head's mean α over its positions (0 for a head without
// any): the probability the head gives its target. The slice is owned by
// the workspace.
func (ws *Workspace) Alpha() []float64 { return ws.headAlpha }

// Batch is a set of positions: their final hidden states and, per head, the
// token each head must predict there (-1 where that head has no target: beyond
// the sequence end or not a response token).
type Batch struct {
	Rows    int
	X       []float32 // [Rows, H]
	Targets [][]int32 // [Heads][Rows]
}

// params lists the heads' trainable tensors on the workspace's device for
// the optimiser, under their vLLM names (dmedusa.Layers.Params).
func (ws *Workspace) params() []optim.Param {
	var ps []optim.Param
	for _, p := range ws.n.Params() {
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
		ws.dev.Write(x0.RowRange(n, n+1), b.X[r*H:(r+1)*H])
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
// (heads without any contribute nothing): each head's mean cross-entropy
// (or LK loss: UseLK), weighted by w_h (Weights). It returns L; per-head
// sums are in Stats.
func (ws *Workspace) TrainStep(b *Batch, w []float64) float64 {
	return ws.pass(b, w, true)
}

// Evaluate runs the forward pass only and records, per head, the summed
// cross-entropy, the number of rows and the top-1/top-5 hits (see Stats).
func (ws *Workspace) Evaluate(b *Batch) {
	ws.pass(b, nil, false)
}

// Stats returns, for the last TrainStep or Evaluate, per head: the number of
// positions with a target, the summed cross-entropy over them (unweighted;
// a TrainStep with an LK loss sums that loss), and
// how many had the target ranked first and within the top five (ties count in
// the target's favour). The slices are owned by the workspace.
func (ws *Workspace) Stats() (rows []int, ceSum []float64, top1, top5 []int) {
	return ws.headRows, ws.headLoss, ws.headTop1, ws.headTop5
}

// RankCounts returns, for the last Evaluate, per head and rank r below
// RankBins, the number of positions whose target the head ranked r (ties
// count in the target's favour). The slices are owned by the workspace.
func (ws *Workspace) RankCounts() [][]int { return ws.headRank }

// Leads returns, for the last Evaluate, per batch row the length k of the
// run of leading heads 0..k-1 that all ranked their target first; a head
// without a target there ends the run. 1+k is what a greedy chain of the
// heads drafted from that position would have accepted had the target
// produced the data's tokens. The slice is owned by the workspace.
func (ws *Workspace) Leads(rows int) []int32 { return ws.lead[:rows] }

func (ws *Workspace) pass(b *Batch, w []float64, train bool) float64 {
	m, dev := ws.m, ws.dev
	if b.Rows > ws.MaxRows {
		panic(fmt.Sprintf("medusa: batch of %d rows exceeds the workspace's %d", b.Rows, ws.MaxRows))
	}
	H := m.Hidden
	var total float64
	if !train {
		clear(ws.lead[:b.Rows])
	}
	xs, zs := ws.viewX, ws.viewZ
	for h := 0; h < m.Heads; h++ {
		ws.headLoss[h], ws.headRows[h], ws.headTop1[h], ws.headTop5[h], ws.headAlpha[h] = 0, 0, 0, 0, 0
		clear(ws.headRank[h])
		n := ws.gather(b, h, H)
		ws.headRows[h] = n
		if n == 0 {
			continue
		}
		for l := range xs {
			xs[l] = ws.xs[l].RowRange(0, n)
		}
		for l := range zs {
			zs[l] = ws.zs[l].RowRange(0, n)
		}
		dev.WriteI32(ws.tgt, ws.targets[:n])
		ws.n.Forward(xs, zs, h)
		xL := xs[m.Layers]
		var rowW float32
		if train {
			// Every row weighs rowW; the unweighted sum is the head's loss.
			rowW = float32(w[h] / float64(n))
			rw := ws.rowW[:min(ws.Chunk, n)]
			for i := range rw {
				rw[i] = rowW
			}
			dev.Write(ws.rowWT, rw)
			dev.Zero(ws.dx.RowRange(0, n))
		}
		for c0 := 0; c0 < n; c0 += ws.Chunk {
			c := min(ws.Chunk, n-c0)
			lt := ws.logits.RowRange(0, c)
			x := xL.RowRange(c0, c0+c)
			ws.n.Logits(lt, x, h)
			tg := ws.tgt.RowRange(c0, c0+c)
			if !train {
				rl, rank := ws.rowLoss[:c], ws.rank[:c]
				dev.CrossEntropyEval(rl, rank, lt, tg)
				rowOf := ws.rowOf[c0 : c0+c]
				for i, l := range rl {
					ws.headLoss[h] += l
					if ws.useLK {
						// α = q_t = e^-CE: what the LK loss trains, held out.
						ws.headAlpha[h] += math.Exp(-l)
					}
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
					if rank[i] < RankBins {
						ws.headRank[h][rank[i]]++
					}
				}
				continue
			}
			// Fused softmax-CE (or LK loss): the logits buffer becomes
			// d(loss)/d(logits).
			if ws.useLK {
				l, a := dev.LKLossHard(lt, lt, tg, ws.rowWT.RowRange(0, c), ws.lk)
				ws.headLoss[h] += l / float64(rowW)
				ws.headAlpha[h] += a / float64(rowW)
			} else {
				ws.headLoss[h] += dev.CrossEntropy(lt, lt, tg, ws.rowWT.RowRange(0, c)) / float64(rowW)
			}
			var dx tensor.Tensor
			if m.Layers > 0 {
				dx = ws.dx.RowRange(c0, c0+c)
			}
			ws.n.LogitsBackward(dx, lt, x, h)
		}
		ws.headAlpha[h] /= float64(n)
		if train {
			total += w[h] * ws.headLoss[h] / float64(n)
			if m.Layers > 0 {
				ws.n.Backward(ws.dx.RowRange(0, n), ws.dz.RowRange(0, n), xs, zs, h)
			}
		}
	}
	return total
}
