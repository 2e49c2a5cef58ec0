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
// The forward and backward passes are written side by side (llm.c style),
// as ops of a tensor.Device over the heads' layers (Layers: nn.Linear
// blocks and output layers), and every buffer is allocated once.
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

// Layers are heads' blocks and output layers on a device (nn.Linear, viewing
// the heads' values where the device's memory is the host's), with their
// gradients when the heads have them: what the trainer and the scorer
// compute with. One Layers serves one caller, as its device does.
type Layers struct {
	m      *Heads
	dev    tensor.Device
	blocks [][]*nn.Linear // [head][block]
	lm     []*nn.Linear   // [head]; one layer for all with SharedLMHead
	gw, gb [][]tensor.Tensor
	glm    []tensor.Tensor // empty with SharedLMHead
}

// On returns m's layers on dev.
func (m *Heads) On(dev tensor.Device) (*Layers, error) {
	H, V := m.Hidden, m.Vocab
	n := &Layers{m: m, dev: dev, blocks: make([][]*nn.Linear, m.Heads), lm: make([]*nn.Linear, m.Heads)}
	up := func(v []float32, rows, cols int) (tensor.Tensor, error) {
		if v == nil {
			return tensor.Tensor{}, nil
		}
		return dev.Upload(tensor.F32Matrix(v, rows, cols))
	}
	var err error
	for h := range m.Heads {
		if len(m.W[h]) != m.Layers || len(m.B[h]) != m.Layers {
			return nil, fmt.Errorf("medusa: head %d has %d weight and %d bias blocks, want %d", h, len(m.W[h]), len(m.B[h]), m.Layers)
		}
		n.blocks[h] = make([]*nn.Linear, m.Layers)
		for l := range m.Layers {
			if n.blocks[h][l], err = nn.NewLinear(dev, tensor.F32Matrix(m.W[h][l], H, H), m.B[h][l]); err != nil {
				return nil, fmt.Errorf("medusa: head %d block %d: %w", h, l, err)
			}
		}
		if len(m.LMHead[h]) != V*H {
			return nil, fmt.Errorf("medusa: head %d's lm_head has %d values, want vocab %d x hidden %d", h, len(m.LMHead[h]), V, H)
		}
		if h > 0 && &m.LMHead[h][0] == &m.LMHead[0][0] {
			n.lm[h] = n.lm[0]
		} else if n.lm[h], err = nn.NewLinear(dev, tensor.F32Matrix(m.LMHead[h], V, H), nil); err != nil {
			return nil, fmt.Errorf("medusa: head %d's lm_head: %w", h, err)
		}
	}
	if m.GW == nil {
		return n, nil
	}
	n.gw, n.gb = make([][]tensor.Tensor, m.Heads), make([][]tensor.Tensor, m.Heads)
	n.glm = make([]tensor.Tensor, m.Heads)
	for h := range m.Heads {
		n.gw[h], n.gb[h] = make([]tensor.Tensor, m.Layers), make([]tensor.Tensor, m.Layers)
		for l := range m.Layers {
			if n.gw[h][l], err = up(m.GW[h][l], H, H); err != nil {
				return nil, fmt.Errorf("medusa: gradients: %w", err)
			}
			if n.gb[h][l], err = up(m.GB[h][l], 1, H); err != nil {
				return nil, fmt.Errorf("medusa: gradients: %w", err)
			}
		}
		if m.GLMHead != nil {
			if n.glm[h], err = up(m.GLMHead[h], V, H); err != nil {
				return nil, fmt.Errorf("medusa: gradients: %w", err)
			}
		}
	}
	return n, nil
}

// Forward runs head h's residual blocks on the rows of xs[0]: block l
// writes its output to xs[l+1] and its pre-activation W x + b to zs[l]
// (each with xs[0]'s rows), which Backward reads. Without a backward pass
// to follow, the xs may all be one tensor and the zs another: the blocks
// then run in place.
func (n *Layers) Forward(xs, zs []tensor.Tensor, h int) {
	for l, b := range n.blocks[h] {
		// x_{l+1} = x_l + SiLU(z_l): the copy is a no-op in place.
		b.Forward(n.dev, zs[l], xs[l])
		n.dev.Copy(xs[l+1], xs[l])
		n.dev.AddSiLU(xs[l+1], zs[l])
	}
}

// Backward takes d(loss)/d(x_layers) in dx and accumulates the block
// gradients of head h over the rows of xs[0], given Forward's xs and zs; dz
// is scratch of dx's shape. The input x_0 is the frozen target's state: it
// gets no gradient, and dx is overwritten on the way down.
func (n *Layers) Backward(dx, dz tensor.Tensor, xs, zs []tensor.Tensor, h int) {
	for l := len(n.blocks[h]) - 1; l >= 0; l-- {
		n.dev.Zero(dz)
		n.dev.SiLUBackward(dz, dx, zs[l])
		var dxl tensor.Tensor
		if l > 0 {
			dxl = dx // dx_l = dx_{l+1} + dz W: accumulates onto the residual path
		}
		n.blocks[h][l].Backward(n.dev, dxl, n.gw[h][l], n.gb[h][l], dz, xs[l])
	}
}

// Logits writes head h's logits [rows, V] of the rows x (its blocks'
// output) into out.
func (n *Layers) Logits(out, x tensor.Tensor, h int) { n.lm[h].Forward(n.dev, out, x) }

// LogitsBackward accumulates into dx the gradient at Logits' input x, given
// dlogits at its output, and into head h's lm_head gradient (none with
// SharedLMHead); dx may be empty (not needed).
func (n *Layers) LogitsBackward(dx, dlogits, x tensor.Tensor, h int) {
	var glm tensor.Tensor
	if n.glm != nil {
		glm = n.glm[h]
	}
	n.lm[h].Backward(n.dev, dx, glm, tensor.Tensor{}, dlogits, x)
}

// Scorer runs heads on one position at a time, the way the proposer drafts:
// on the calling goroutine, without allocating, each head's blocks in place
// (Forward), then the output products, one batched product over all heads
// when they share the target's lm_head.
type Scorer struct {
	n      *Layers
	heads  int
	xs     tensor.Tensor     // [heads, H] each head's residual stream
	rowXs  [][]tensor.Tensor // per head, Layers+1 views of its row of xs
	rowZs  []tensor.Tensor   // Layers views of a block's pre-activation [1, H]
	logits tensor.Tensor     // [heads, V]
	host   []float32         // the logits on the host
	shared bool              // every head uses the same lm_head
}

// NewScorer allocates a scorer of the first heads heads on dev.
func (m *Heads) NewScorer(dev tensor.Device, heads int) (*Scorer, error) {
	if heads < 1 || heads > m.Heads {
		return nil, fmt.Errorf("medusa: scoring %d of %d heads", heads, m.Heads)
	}
	n, err := m.On(dev)
	if err != nil {
		return nil, err
	}
	H, V := m.Hidden, m.Vocab
	s := &Scorer{n: n, heads: heads, host: make([]float32, heads*V), shared: true}
	if s.xs, err = dev.Alloc(tensor.F32, heads, H); err != nil {
		return nil, err
	}
	z, err := dev.Alloc(tensor.F32, 1, H)
	if err != nil {
		return nil, err
	}
	if s.logits, err = dev.Alloc(tensor.F32, heads, V); err != nil {
		return nil, err
	}
	s.rowZs = make([]tensor.Tensor, m.Layers)
	for l := range s.rowZs {
		s.rowZs[l] = z
	}
	s.rowXs = make([][]tensor.Tensor, heads)
	for hd := range heads {
		if n.lm[hd] != n.lm[0] {
			s.shared = false
		}
		s.rowXs[hd] = make([]tensor.Tensor, m.Layers+1)
		for l := range s.rowXs[hd] {
			s.rowXs[hd][l] = s.xs.RowRange(hd, hd+1)
		}
	}
	return s, nil
}

// TopK writes into idx the len(idx) most likely tokens of head hd's logits
// of the last Score, best first (ties to the lower id), on the scorer's
// device, and returns how many it wrote.
func (s *Scorer) TopK(hd int, idx []int) int { return s.n.dev.TopK(idx, s.logits.RowRange(hd, hd+1)) }

// Score runs every head of the scorer on x [H] and returns their logits
// [heads, V], owned by the scorer until the next Score.
func (s *Scorer) Score(x []float32) []float32 {
	n := s.n
	dev := n.dev
	H := n.m.Hidden
	for hd := range s.heads {
		row := s.rowXs[hd][0]
		dev.Write(row, x[:H])
		n.Forward(s.rowXs[hd], s.rowZs, hd)
	}
	if s.shared {
		n.Logits(s.logits, s.xs, 0)
	} else {
		for hd := range s.heads {
			n.Logits(s.logits.RowRange(hd, hd+1), s.xs.RowRange(hd, hd+1), hd)
		}
	}
	if h, ok := dev.HostF32(s.logits); ok {
		return h
	}
	dev.Read(s.host, s.logits)
	return s.host
}
