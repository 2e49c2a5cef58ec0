package model

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The sparse layers of a mixture-of-experts target. Each expert runs once
// per pass over the rows routed to it, gathered into one block (a grouped
// product, as the engines run them, instead of one token at a time), and
// its outputs are added into the layer's output weighted by their routing
// probabilities, expert by expert in index order as Transformers sums them.
// The routing itself (a softmax over a few to a few hundred logits per
// row, and their top k) runs on the host over the router's logits.

// moeScratch is the sparse layers' activation memory, sized for the
// largest pass: the router's logits, one expert's gathered inputs and
// outputs and its MLP activations, and on the host the logits, each
// expert's rows and weights, and one row's probabilities and choice.
type moeScratch struct {
	logits, xe, ye tensor.Tensor
	acts, shared   nn.MLPActs
	hostLogits     []float32
	rows           [][]int32   // rows[e]: the pass's rows routed to expert e, in order
	weights        [][]float32 // weights[e][i]: the routing weight of rows[e][i]
	probs, choice  []float32   // one row's weights and the scores that choose its experts
	groupScore     []float32
	top            []int
}

// growMoE allocates the sparse layers' scratch for passes of up to rows
// rows.
func (m *Model) growMoE(al *tensor.Allocator, rows int) {
	s := &m.s.moe
	c := m.Config
	s.logits = al.Alloc(tensor.F32, rows, c.Experts)
	s.xe = al.Alloc(tensor.F32, rows, m.h)
	s.ye = al.Alloc(tensor.F32, rows, m.h)
	s.acts = nn.MLPActs{Gate: al.Alloc(tensor.F32, rows, c.ExpertIntermediate), Up: al.Alloc(tensor.F32, rows, c.ExpertIntermediate),
		Fused: al.Alloc(tensor.F32, rows, 2*c.ExpertIntermediate)}
	if si := c.SharedIntermediate; si > 0 {
		s.shared = nn.MLPActs{Gate: al.Alloc(tensor.F32, rows, si), Up: al.Alloc(tensor.F32, rows, si), Fused: al.Alloc(tensor.F32, rows, 2*si)}
	}
	s.rows, s.weights = make([][]int32, c.Experts), make([][]float32, c.Experts)
	for e := range s.rows {
		s.rows[e], s.weights[e] = make([]int32, 0, rows), make([]float32, 0, rows)
	}
	s.probs, s.choice = make([]float32, c.Experts), make([]float32, c.Experts)
	s.top = make([]int, 0, max(c.TopK, c.Groups, 2))
	s.groupScore = make([]float32, c.Groups)
}

// forward sets the pass's y to the mixture's output over its normed rows
// xn: Σ over the experts e of weight·expert_e(xn) for the rows routed to e.
func (e *MoE) forward(m *Model, p *pass) {
	d, s := m.dev, &m.s.moe
	logits := s.logits.RowRange(0, p.rows)
	e.Router.nn.Forward(d, logits, p.xn)
	m.route(m.host(logits, &s.hostLogits), e.Bias, p.rows)
	d.Zero(p.y)
	for x := range e.Experts {
		rows := s.rows[x]
		n := len(rows)
		if n == 0 {
			continue
		}
		xe, ye := s.xe.RowRange(0, n), s.ye.RowRange(0, n)
		d.GatherRows(xe, p.xn, rows)
		e.Experts[x].nn.Forward(d, ye, xe, &s.acts, false)
		d.AddScaledRows(p.y, ye, rows, s.weights[x])
	}
	if e.Shared != nil {
		e.Shared.nn.Forward(d, p.y, p.xn, &s.shared, true)
	}
}

// route chooses each row's experts from its router logits (rows·experts,
// row-major) as Transformers' routers do in float32, and lists each
// expert's rows and weights. Softmax routers (Mixtral, Qwen3-MoE): the
// softmax over all experts, its TopK most probable, their probabilities
// divided by their sum where NormTopK. gpt-oss's: the TopK logits, weighed
// by their softmax. DeepSeek's (bias non-nil): sigmoid
// scores, which plus the correction bias rank the groups (by their two
// best) and, within the TopKGroups best groups, the experts; the chosen
// experts weigh by their sigmoid scores, over their sum where NormTopK,
// times RoutedScaling. The lower index comes first among equal values.
func (m *Model) route(logits, bias []float32, rows int) {
	s := &m.s.moe
	c := m.Config
	E, k := c.Experts, c.TopK
	for x := range s.rows {
		s.rows[x], s.weights[x] = s.rows[x][:0], s.weights[x][:0]
	}
	for i := 0; i < rows; i++ {
		z := logits[i*E : (i+1)*E]
		switch {
		case m.fam.MoE.SoftmaxTopK:
			// gpt-oss: the top k logits, weighed by their own softmax.
			s.top = topK(s.top[:0], z, k)
			for j, x := range s.top {
				s.choice[j] = z[x]
			}
			softmax32(s.choice[:k], s.choice[:k])
			for j, x := range s.top {
				s.probs[x] = s.choice[j]
			}
		case bias == nil:
			softmax32(s.probs, z)
			s.top = topK(s.top[:0], s.probs, k)
		default:
			for j, v := range z {
				s.probs[j] = float32(1 / (1 + math.Exp(-float64(v))))
				s.choice[j] = s.probs[j] + bias[j]
			}
			s.top = m.groupTopK(s.top[:0])
		}
		var sum float32
		for _, x := range s.top {
			sum += s.probs[x]
		}
		if bias != nil {
			sum += 1e-20 // Transformers' DeepSeek denominator
		}
		for _, x := range s.top {
			w := s.probs[x]
			if c.NormTopK {
				w /= sum
			}
			if bias != nil {
				w *= float32(c.RoutedScaling)
			}
			s.rows[x] = append(s.rows[x], int32(i))
			s.weights[x] = append(s.weights[x], w)
		}
	}
}

// groupTopK appends to dst the TopK experts of the best TopKGroups groups
// by the corrected scores in the scratch's choice: a group ranks by the sum
// of its two best scores, and the experts of the other groups are out.
func (m *Model) groupTopK(dst []int) []int {
	s, c := &m.s.moe, m.Config
	n := c.Experts / c.Groups
	for g := range s.groupScore {
		grp := s.choice[g*n : (g+1)*n]
		best := topK(dst[:0], grp, 2)
		s.groupScore[g] = grp[best[0]] + grp[best[1]]
	}
	groups := topK(dst[:0], s.groupScore, c.TopKGroups)
	for g := range s.groupScore {
		if !chosen(groups, g) {
			for j := g * n; j < (g+1)*n; j++ {
				s.choice[j] = float32(math.Inf(-1))
			}
		}
	}
	return topK(dst[:0], s.choice, c.TopK)
}

// softmax32 writes the softmax of z into p in float32: exp(z-max) over
// its sum.
func softmax32(p, z []float32) {
	mx := z[0]
	for _, v := range z[1:] {
		mx = max(mx, v)
	}
	var sum float32
	for j, v := range z {
		p[j] = float32(math.Exp(float64(v - mx)))
		sum += p[j]
	}
	for j := range p {
		p[j] /= sum
	}
}

// topK appends to dst the indices of the k largest values of p, largest
// first, the lower index first among equal values.
func topK(dst []int, p []float32, k int) []int {
	for len(dst) < k {
		best := -1
		for j, v := range p {
			if (best < 0 || v > p[best]) && !chosen(dst, j) {
				best = j
			}
		}
		dst = append(dst, best)
	}
	return dst
}

func chosen(dst []int, j int) bool {
	for _, x := range dst {
		if x == j {
			return true
		}
	}
	return false
}

// unstack gives each expert of e its gate, up and down layers from the
// stacked tensors (gpt-oss). Stored as float: expert x's gate_up block
// [hidden, 2·intermediate] is input-major with gate j in column 2j and up j
// in column 2j+1, so gate row j is column 2j transposed; its down block
// [intermediate, hidden] transposed is down_proj's [hidden, intermediate].
// Stored as MXFP4 the blocks are output-major already: gate row j is
// gate_up's row 2j, and down is expert x's slice as it lies in the file.
// Rearranged matrices are copies in the stored dtype.
func (m *Model) unstack(e *MoE) error {
	c := m.Config
	H, I := m.h, c.ExpertIntermediate
	for x := range e.Experts {
		ex := &e.Experts[x]
		if e.GateUpBlocks != nil {
			var err error
			if ex.Gate.W, ex.Up.W, ex.Down.W, err = mxfp4Expert(e, x, H, I); err != nil {
				return fmt.Errorf("model: expert %d: %w", x, err)
			}
		} else {
			gu := e.GateUp.RowRange(x*H, (x+1)*H) // [H, 2I]
			ex.Gate.W = transposeCols(gu, 0, 2)   // [I, H]: columns 0, 2, 4, ...
			ex.Up.W = transposeCols(gu, 1, 2)
			ex.Down.W = transposeCols(e.Down.RowRange(x*I, (x+1)*I), 0, 1) // [H, I]
		}
		ex.Gate.In, ex.Gate.Out, ex.Up.In, ex.Up.Out = H, I, H, I
		ex.Down.In, ex.Down.Out = I, H
		b := e.GateUpBias[x*2*I : (x+1)*2*I]
		ex.Gate.B, ex.Up.B = make([]float32, I), make([]float32, I)
		for j := 0; j < I; j++ {
			ex.Gate.B[j], ex.Up.B[j] = b[2*j], b[2*j+1]
		}
		ex.Down.B = e.DownBias[x*H : (x+1)*H]
	}
	return nil
}

// mxfp4Expert returns expert x's gate [I, H], up [I, H] and down [H, I]
// MXFP4 matrices from the stacked blocks and scales: gate and up copied
// from gate_up's even and odd rows, down viewing the file.
func mxfp4Expert(e *MoE, x, H, I int) (gate, up, down tensor.Matrix, err error) {
	rb, rs := H/2, H/tensor.MXFP4Block // one gate_up row's block and scale bytes
	gb, gs := e.GateUpBlocks[x*2*I*rb:(x+1)*2*I*rb], e.GateUpScales[x*2*I*rs:(x+1)*2*I*rs]
	part := func(first int) (tensor.Matrix, error) {
		b, s := make([]uint8, I*rb), make([]uint8, I*rs)
		for j := 0; j < I; j++ {
			r := 2*j + first
			copy(b[j*rb:(j+1)*rb], gb[r*rb:(r+1)*rb])
			copy(s[j*rs:(j+1)*rs], gs[r*rs:(r+1)*rs])
		}
		return tensor.MXFP4Matrix(b, s, I, H)
	}
	if gate, err = part(0); err != nil {
		return
	}
	if up, err = part(1); err != nil {
		return
	}
	db, ds := I/2, I/tensor.MXFP4Block
	down, err = tensor.MXFP4Matrix(e.DownBlocks[x*H*db:(x+1)*H*db], e.DownScales[x*H*ds:(x+1)*H*ds], H, I)
	return
}

// transposeCols returns the matrix whose row j is column first+j·step of
// w, in w's dtype.
func transposeCols(w tensor.Matrix, first, step int) tensor.Matrix {
	rows := (w.Cols - first + step - 1) / step
	out := tensor.Matrix{DType: w.DType, Rows: rows, Cols: w.Rows}
	if w.DType == tensor.F32 {
		out.F32 = make([]float32, rows*w.Rows)
	} else {
		out.U16 = make([]uint16, rows*w.Rows)
	}
	for j := 0; j < rows; j++ {
		col := first + j*step
		for r := 0; r < w.Rows; r++ {
			if w.DType == tensor.F32 {
				out.F32[j*w.Rows+r] = w.F32[r*w.Cols+col]
			} else {
				out.U16[j*w.Rows+r] = w.U16[r*w.Cols+col]
			}
		}
	}
	return out
}
