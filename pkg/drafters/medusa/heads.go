// Package medusa is the Medusa-1 drafter method: the heads (forward and
// backward, which both the trainer in train/medusa and the proposer run),
// the proposer that drafts with them during speculative decoding, and the
// two export layouts vLLM and FasterDecoding/TensorRT-LLM load, each with
// its writer, detector and loader.
//
// Head h (0-based) reads the target's post-norm hidden state x at position t
// and predicts the token at t+h+2 (the target's own lm_head predicts t+1):
//
//	x_{l+1} = x_l + SiLU(W_{h,l} x_l + b_{h,l})   for l = 0..layers-1
//	logits  = lm_head_h x_layers
//
// The forward and backward passes are written side by side (llm.c style);
// all matrix products run through tensor.Backend and every buffer is
// allocated once.
package medusa

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
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

// Param is one trainable tensor under its vLLM name, with its gradient.
type Param struct {
	Name       string
	Data, Grad []float32
}

// Params lists the trainable tensors with their gradients under their vLLM
// names (blocks.{h}.layers.{l}.weight|bias, lm_heads.{h}.weight), in a fixed
// order. The heads must have been built with gradients.
func (m *Heads) Params() []Param {
	var ps []Param
	for h := 0; h < m.Heads; h++ {
		for l := 0; l < m.Layers; l++ {
			ps = append(ps,
				Param{Name: fmt.Sprintf("blocks.%d.layers.%d.weight", h, l), Data: m.W[h][l], Grad: m.GW[h][l]},
				Param{Name: fmt.Sprintf("blocks.%d.layers.%d.bias", h, l), Data: m.B[h][l], Grad: m.GB[h][l]})
		}
		if !m.SharedLMHead {
			ps = append(ps, Param{Name: fmt.Sprintf("lm_heads.%d.weight", h), Data: m.LMHead[h], Grad: m.GLMHead[h]})
		}
	}
	return ps
}

// ParamData returns the single allocation holding every trainable value, in
// Params order (used to snapshot and restore the best weights).
func (m *Heads) ParamData() []float32 { return m.params }

// ZeroGrad clears every gradient.
func (m *Heads) ZeroGrad() {
	g := m.grads
	tensor.Parallel(len(g), 1<<16, func(lo, hi int) { clear(g[lo:hi]) })
}

// Forward runs head h's residual blocks on rows positions: xs[0] holds the
// input [rows, H], block l writes its output to xs[l+1] and its
// pre-activation W x + b to zs[l] (each [rows, H]), which Backward reads.
// Without a backward pass to follow, the xs may all be one slice and the zs
// another: the blocks then run in place.
func (m *Heads) Forward(be tensor.Backend, xs, zs [][]float32, h, rows int) {
	H := m.Hidden
	for l := 0; l < m.Layers; l++ {
		x, z := xs[l][:rows*H], zs[l][:rows*H]
		nn.Linear(be, z, x, m.W[h][l], m.B[h][l], rows, H, H)
		residualSiLU(xs[l+1][:rows*H], x, z, rows)
	}
}

// Backward takes d(loss)/d(x_layers) in dx and accumulates the block
// gradients of head h over rows positions, given Forward's xs and zs; dz is
// scratch. The input x_0 is the frozen target's state: it gets no gradient,
// and dx is overwritten on the way down.
func (m *Heads) Backward(be tensor.Backend, dx, dz []float32, xs, zs [][]float32, h, rows int) {
	H := m.Hidden
	for l := m.Layers - 1; l >= 0; l-- {
		dz := dz[:rows*H]
		residualSiLUBackward(dz, dx[:rows*H], zs[l][:rows*H])
		var dxl []float32
		if l > 0 {
			dxl = dx[:rows*H] // dx_l = dx_{l+1} + dz W: accumulates onto the residual path
		}
		nn.LinearBackward(be, dxl, m.GW[h][l], m.GB[h][l], dz, xs[l][:rows*H], m.W[h][l], rows, H, H)
	}
}

// residualSiLU computes out = x + SiLU(z) (z = W x + b) over rows rows, with
// nn.SiLU's arithmetic (z / (1 + tensor.Expf(-z)), the inference kernels');
// out may alias x. One row (a drafting step) runs on the calling goroutine
// without building the closure a hand-off to the workers needs, so that
// drafting does not allocate.
func residualSiLU(out, x, z []float32, rows int) {
	if rows == 1 {
		residualSiLURange(out, x, z)
		return
	}
	tensor.Parallel(len(z), 16384, func(lo, hi int) { residualSiLURange(out[lo:hi], x[lo:hi], z[lo:hi]) })
}

func residualSiLURange(out, x, z []float32) {
	x, out = x[:len(z)], out[:len(z)]
	for i, v := range z {
		out[i] = x[i] + v/(1+tensor.Expf(-v))
	}
}

// residualSiLUBackward sets dz = dx * SiLU'(z) (the residual path keeps dx as is).
func residualSiLUBackward(dz, dx, z []float32) {
	tensor.Parallel(len(z), 16384, func(lo, hi int) {
		d, g, zz := dz[lo:hi], dx[lo:hi], z[lo:hi]
		for i, v := range zz {
			s := 1 / (1 + tensor.Expf(-v))
			d[i] = g[i] * s * (1 + v*(1-s))
		}
	})
}

// Scorer runs heads on one position at a time, the way the proposer drafts:
// on the calling goroutine, without allocating, each head's blocks in place
// (Forward), then the output products, one batched product over all heads
// when they share the target's lm_head.
type Scorer struct {
	m      *Heads
	heads  int
	xs     []float32     // [heads, H] each head's residual stream
	z      []float32     // [H] a block's pre-activation
	logits []float32     // [heads, V]
	rowXs  [][][]float32 // per head, Layers+1 views of its row of xs
	rowZs  [][]float32   // Layers views of z
	shared bool          // every head uses the same lm_head slice
}

// NewScorer allocates a scorer of the first heads heads.
func (m *Heads) NewScorer(heads int) (*Scorer, error) {
	if heads < 1 || heads > m.Heads {
		return nil, fmt.Errorf("medusa: scoring %d of %d heads", heads, m.Heads)
	}
	H := m.Hidden
	s := &Scorer{m: m, heads: heads, xs: make([]float32, heads*H), z: make([]float32, H),
		logits: make([]float32, heads*m.Vocab), shared: true}
	s.rowZs = make([][]float32, m.Layers)
	for l := range s.rowZs {
		s.rowZs[l] = s.z
	}
	s.rowXs = make([][][]float32, heads)
	for hd := range heads {
		if len(m.LMHead[hd]) != m.Vocab*H || &m.LMHead[hd][0] != &m.LMHead[0][0] {
			s.shared = false
		}
		if len(m.W[hd]) != m.Layers || len(m.B[hd]) != m.Layers {
			return nil, fmt.Errorf("medusa: head %d has %d weight and %d bias blocks, want %d", hd, len(m.W[hd]), len(m.B[hd]), m.Layers)
		}
		row := s.xs[hd*H : (hd+1)*H]
		s.rowXs[hd] = make([][]float32, m.Layers+1)
		for l := range s.rowXs[hd] {
			s.rowXs[hd][l] = row
		}
	}
	return s, nil
}

// Score runs every head of the scorer on x [H] and returns their logits
// [heads, V], owned by the scorer until the next Score.
func (s *Scorer) Score(be tensor.Backend, x []float32) []float32 {
	m := s.m
	H, V := m.Hidden, m.Vocab
	for hd := range s.heads {
		copy(s.xs[hd*H:(hd+1)*H], x[:H])
		m.Forward(be, s.rowXs[hd], s.rowZs, hd, 1)
	}
	if s.shared {
		tensor.MatMulT(be, s.logits[:s.heads*V], s.xs[:s.heads*H], m.LMHead[0], s.heads, V, H)
	} else {
		for hd := range s.heads {
			tensor.MatMulT(be, s.logits[hd*V:(hd+1)*V], s.xs[hd*H:(hd+1)*H], m.LMHead[hd], 1, V, H)
		}
	}
	return s.logits
}
