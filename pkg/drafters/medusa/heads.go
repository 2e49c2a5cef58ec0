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

// Heads holds the parameters of all heads in host memory: what an export
// writes and a loader reads, and a trainer's initialisation. The parameters
// are one contiguous allocation carved into per-tensor views. Heads built for
// training (NewHeads with withGrads) keep their master weights on a device
// while they train (On): on a device whose memory is not the host's the
// host values are the initial ones until Layers.ReadWeights copies the
// trained ones back (on the CPU device they are the masters themselves).
type Heads struct {
	Geometry
	// W[h][l] is block l of head h's weight [H,H] (out, in); B[h][l] its bias [H].
	W, B [][][]float32
	// LMHead[h] is head h's output matrix [V,H]. With SharedLMHead every entry is
	// the same slice: the target's lm_head, which is never written.
	LMHead [][]float32

	params    []float32
	trainable bool
}

// NewHeads allocates heads of geometry g: blocks zero-initialised, and each
// head's lm_head a copy of targetLMHead [V,H] (the target's lm_head, or its
// embedding when tied), or with SharedLMHead a reference to it. withGrads
// builds them for training: their layers on a device (On) hold the master
// weights, allocated on the device from these values, with gradients beside
// them.
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
func newHeads(g Geometry, trainable bool, shared []float32) *Heads {
	hh, v := g.Hidden*g.Hidden, g.Vocab*g.Hidden
	perHead := g.Layers * (hh + g.Hidden)
	if !g.SharedLMHead {
		perHead += v
	}
	m := &Heads{Geometry: g, params: make([]float32, g.Heads*perHead), trainable: trainable}
	m.W, m.B, m.LMHead = carve(g, m.params, shared)
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

// Tensor is one trainable tensor's host values under its vLLM name.
type Tensor struct {
	Name string
	Data []float32
}

// Tensors lists the trainable tensors' host values under their vLLM names
// (blocks.{h}.layers.{l}.weight|bias, lm_heads.{h}.weight), in the order of
// Layers.Params.
func (m *Heads) Tensors() []Tensor {
	var ts []Tensor
	for h := 0; h < m.Heads; h++ {
		for l := 0; l < m.Layers; l++ {
			ts = append(ts,
				Tensor{Name: blockName(h, l, "weight"), Data: m.W[h][l]},
				Tensor{Name: blockName(h, l, "bias"), Data: m.B[h][l]})
		}
		if !m.SharedLMHead {
			ts = append(ts, Tensor{Name: lmHeadName(h), Data: m.LMHead[h]})
		}
	}
	return ts
}

func blockName(h, l int, what string) string {
	return fmt.Sprintf("blocks.%d.layers.%d.%s", h, l, what)
}

func lmHeadName(h int) string { return fmt.Sprintf("lm_heads.%d.weight", h) }

// ParamData returns the single allocation holding every trainable value, in
// Tensors order.
func (m *Heads) ParamData() []float32 { return m.params }

// Layers are heads' blocks and output layers on a device (nn.Linear), what
// the trainer and the scorer compute with. Heads built for inference are
// uploaded (viewed where the device's memory is the host's); heads built for
// training have their master weights and gradients allocated on the device,
// where the optimiser updates them (Params), and ReadWeights copies the
// weights back into the heads' host values. One Layers serves one caller,
// as its device does.
type Layers struct {
	m      *Heads
	dev    tensor.Device
	train  bool           // built for training: the master weights are w, b and lmw
	blocks [][]*nn.Linear // [head][block]
	lm     []*nn.Linear   // [head]; one layer for all with SharedLMHead
	// Training only: the master weights' tensors on the device (w, b per
	// head and block, and each head's own lm_head: none with SharedLMHead)
	// and their gradients.
	w, b, gw, gb [][]tensor.Tensor
	lmw, glm     []tensor.Tensor
}

// Param is one trainable tensor on a device under its vLLM name: its
// master weights and the gradient a backward pass accumulates into.
type Param struct {
	Name       string
	Data, Grad tensor.Tensor
}

// On returns m's layers on dev: for heads built for training, the master
// weights uploaded to dev from m's values (on the CPU device, m's values
// themselves), with zeroed gradients.
func (m *Heads) On(dev tensor.Device) (*Layers, error) { return m.on(dev, m.trainable) }

// on returns m's layers on dev, for training (master weights and
// gradients on dev) or for inference (uploaded).
func (m *Heads) on(dev tensor.Device, train bool) (*Layers, error) {
	H, V := m.Hidden, m.Vocab
	n := &Layers{m: m, dev: dev, train: train, blocks: make([][]*nn.Linear, m.Heads), lm: make([]*nn.Linear, m.Heads)}
	var al *tensor.Allocator
	// master returns a trainable layer over v [rows, cols] and bias b
	// (nil: none) uploaded to the device, with their tensors: a copy the
	// optimiser updates on a device whose memory is not the host's, the
	// host values themselves on the CPU device (no second copy of the
	// weights); either way the trainer reads them back through the device
	// (ReadWeights).
	master := func(v []float32, rows, cols int, b []float32) (*nn.Linear, tensor.Tensor, tensor.Tensor, error) {
		wt, err := dev.Upload(tensor.F32Matrix(v, rows, cols))
		if err != nil {
			return nil, wt, tensor.Tensor{}, err
		}
		var bt tensor.Tensor
		if b != nil {
			if bt, err = dev.Upload(tensor.F32Matrix(b, 1, rows)); err != nil {
				return nil, wt, bt, err
			}
		}
		l, err := nn.NewLinearOf(wt, bt)
		return l, wt, bt, err
	}
	if train {
		al = &tensor.Allocator{Dev: dev}
		n.w, n.b, n.gw, n.gb = make([][]tensor.Tensor, m.Heads), make([][]tensor.Tensor, m.Heads), make([][]tensor.Tensor, m.Heads), make([][]tensor.Tensor, m.Heads)
		if !m.SharedLMHead {
			n.lmw, n.glm = make([]tensor.Tensor, m.Heads), make([]tensor.Tensor, m.Heads)
		}
	}
	var err error
	for h := range m.Heads {
		if len(m.W[h]) != m.Layers || len(m.B[h]) != m.Layers {
			return nil, fmt.Errorf("medusa: head %d has %d weight and %d bias blocks, want %d", h, len(m.W[h]), len(m.B[h]), m.Layers)
		}
		n.blocks[h] = make([]*nn.Linear, m.Layers)
		if train {
			n.w[h], n.b[h], n.gw[h], n.gb[h] = make([]tensor.Tensor, m.Layers), make([]tensor.Tensor, m.Layers), make([]tensor.Tensor, m.Layers), make([]tensor.Tensor, m.Layers)
		}
		for l := range m.Layers {
			if train {
				n.blocks[h][l], n.w[h][l], n.b[h][l], err = master(m.W[h][l], H, H, m.B[h][l])
				n.gw[h][l], n.gb[h][l] = al.F32(H, H), al.F32(1, H)
			} else {
				n.blocks[h][l], err = nn.NewLinear(dev, tensor.F32Matrix(m.W[h][l], H, H), m.B[h][l])
			}
			if err != nil {
				return nil, fmt.Errorf("medusa: head %d block %d: %w", h, l, err)
			}
		}
		if len(m.LMHead[h]) != V*H {
			return nil, fmt.Errorf("medusa: head %d's lm_head has %d values, want vocab %d x hidden %d", h, len(m.LMHead[h]), V, H)
		}
		switch {
		case h > 0 && &m.LMHead[h][0] == &m.LMHead[0][0]:
			n.lm[h] = n.lm[0]
		case train && !m.SharedLMHead:
			n.lm[h], n.lmw[h], _, err = master(m.LMHead[h], V, H, nil)
			n.glm[h] = al.F32(V, H)
		default:
			// Inference, or the target's lm_head shared and frozen.
			n.lm[h], err = nn.NewLinear(dev, tensor.F32Matrix(m.LMHead[h], V, H), nil)
		}
		if err != nil {
			return nil, fmt.Errorf("medusa: head %d's lm_head: %w", h, err)
		}
	}
	if al != nil && al.Err != nil {
		return nil, fmt.Errorf("medusa: the heads' training weights and gradients: %w", al.Err)
	}
	return n, nil
}

// Params lists the trainable tensors on the device with their gradients,
// under their vLLM names, in the order of Heads.Tensors: none for layers
// built for inference.
func (n *Layers) Params() []Param {
	m := n.m
	if !n.train {
		return nil
	}
	var ps []Param
	for h := range m.Heads {
		for l := range m.Layers {
			ps = append(ps,
				Param{Name: blockName(h, l, "weight"), Data: n.w[h][l], Grad: n.gw[h][l]},
				Param{Name: blockName(h, l, "bias"), Data: n.b[h][l], Grad: n.gb[h][l]})
		}
		if n.lmw != nil {
			ps = append(ps, Param{Name: lmHeadName(h), Data: n.lmw[h], Grad: n.glm[h]})
		}
	}
	return ps
}

// ZeroGrad clears every gradient (layers built for training).
func (n *Layers) ZeroGrad() {
	for _, p := range n.Params() {
		n.dev.Zero(p.Grad)
	}
}

// ReadWeights copies the master weights from the device into the heads'
// host values (layers built for training; a no-op otherwise), for an export
// or a caller that reads them.
func (n *Layers) ReadWeights() {
	ts := n.m.Tensors()
	for i, p := range n.Params() {
		n.dev.Read(ts[i].Data, p.Data)
	}
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

// NewScorer allocates a scorer of the first heads heads on dev, over the
// heads' host values (uploaded; for a trainer's heads, the values
// Layers.ReadWeights last read back from its device).
func (m *Heads) NewScorer(dev tensor.Device, heads int) (*Scorer, error) {
	if heads < 1 || heads > m.Heads {
		return nil, fmt.Errorf("medusa: scoring %d of %d heads", heads, m.Heads)
	}
	n, err := m.on(dev, false) // inference: the heads' host values, uploaded
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
