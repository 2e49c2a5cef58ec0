package model

import (
	"fmt"
	"slices"

	"github.com/drafter-ai/drafter/pkg/arch"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Load opens the Hugging Face checkpoint directory dir and loads its model
// onto be (tensor.CPU() when nil). The checkpoint files are closed before it
// returns: the weights are converted to float32 copies.
func Load(dir string, be tensor.Backend) (*Model, error) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	return FromWeights(ck.Config, ck.Weights, be)
}

// WeightSource is what the loader needs from a tensor store; a
// *safetensors.Set is one.
type WeightSource interface {
	Info(name string) (safetensors.Info, bool)
	Float32Into(name string, dst []float32) error
}

// binding ties one weight field to its checkpoint tensor name and the shape the
// config implies.
type binding struct {
	name  string
	shape []int
	dst   *[]float32
}

// bindings lists every tensor of the model in its family's order
// (arch.Family.Tensors, which keeps the weights of fused products adjacent),
// each with the field it fills.
func (m *Model) bindings() []binding {
	ts := m.fam.Tensors(m.Config.Dims())
	b := make([]binding, len(ts))
	for i, t := range ts {
		b[i] = binding{name: t.Name, shape: t.Shape, dst: m.field(t)}
	}
	return b
}

// field returns the weight field a tensor fills, and sets the sizes of the
// linear layer a weight belongs to. Roles without a field here (a family's
// extra norms) are refused by newModel before any binding.
func (m *Model) field(t arch.Tensor) *[]float32 {
	var l *Layer
	if t.Layer >= 0 {
		l = &m.Layers[t.Layer]
		if lin, bias := l.linear(t.Role); lin != nil {
			if bias {
				return &lin.B
			}
			lin.Out, lin.In = t.Shape[0], t.Shape[1]
			return &lin.W
		}
	}
	switch t.Role {
	case arch.Embed:
		return &m.Embed
	case arch.FinalNorm:
		return &m.Norm
	case arch.LMHead:
		return &m.LMHead
	case arch.AttnNorm:
		return &l.AttnNorm
	case arch.MLPNorm:
		return &l.MLPNorm
	case arch.QNorm:
		return &l.Attn.QNorm
	case arch.KNorm:
		return &l.Attn.KNorm
	}
	panic(fmt.Sprintf("model: tensor %s has role %d, which no weight field takes (newModel admits only families it implements)", t.Name, t.Role))
}

// linear returns the linear layer of l a projection role belongs to, and
// whether the role is its bias; nil for other roles.
func (l *Layer) linear(r arch.Role) (lin *Linear, bias bool) {
	switch r {
	case arch.QProj, arch.QBias:
		return &l.Attn.Q, r == arch.QBias
	case arch.KProj, arch.KBias:
		return &l.Attn.K, r == arch.KBias
	case arch.VProj, arch.VBias:
		return &l.Attn.V, r == arch.VBias
	case arch.OProj, arch.OProjBias:
		return &l.Attn.O, r == arch.OProjBias
	case arch.GateProj:
		return &l.MLP.Gate, false
	case arch.UpProj:
		return &l.MLP.Up, false
	case arch.DownProj:
		return &l.MLP.Down, false
	}
	return nil, false
}

// FromWeights builds a model from a parsed config and a tensor store. Every
// tensor the config implies must be present with exactly the implied shape;
// all weights are converted into one float32 allocation.
func FromWeights(cfg *checkpoint.Config, w WeightSource, be tensor.Backend) (*Model, error) {
	m, err := newModel(cfg, be)
	if err != nil {
		return nil, err
	}
	binds := m.bindings()
	for _, b := range binds {
		info, ok := w.Info(b.name)
		if !ok {
			m.Close()
			return nil, fmt.Errorf("model: checkpoint has no tensor %q (required by config.json: model_type %s, %d layers)", b.name, cfg.ModelType, cfg.NumLayers)
		}
		if !slices.Equal(info.Shape, b.shape) {
			m.Close()
			return nil, fmt.Errorf("model: tensor %q in %s has shape %s, config.json implies %s",
				b.name, info.File, safetensors.ShapeString(info.Shape), safetensors.ShapeString(b.shape))
		}
	}
	err = m.fill(binds, func(b binding, dst []float32) error { return w.Float32Into(b.name, dst) })
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("model: loading weights: %w", err)
	}
	return m, nil
}

// fill lays the weights of binds out back to back in one float32 allocation,
// in order (so that fuse finds q/k/v and gate/up adjacent), fills each with
// set, ties the output layer to the embedding when the config says so, and
// fuses.
func (m *Model) fill(binds []binding, set func(b binding, dst []float32) error) error {
	total := 0
	for _, b := range binds {
		total += product(b.shape)
	}
	arena := make([]float32, total)
	off := 0
	for _, b := range binds {
		n := product(b.shape)
		dst := arena[off : off+n]
		off += n
		if err := set(b, dst); err != nil {
			return err
		}
		*b.dst = dst
	}
	if m.Config.TieWordEmbeddings {
		m.LMHead = m.Embed
	}
	m.fuse()
	return nil
}

// fuse sets each layer's fused q/k/v and gate/up matrices when the weights lie
// back to back in memory (as both loaders lay them out), so that decode runs
// one matrix-vector product where it would run three or two.
func (m *Model) fuse() {
	adjacent := func(parts ...[]float32) []float32 {
		whole := parts[0]
		for _, p := range parts[1:] {
			if cap(whole) < len(whole)+len(p) || &whole[:len(whole)+1][len(whole)] != &p[0] {
				return nil
			}
			whole = whole[:len(whole)+len(p)]
		}
		return whole
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		l.Attn.qkv = adjacent(l.Attn.Q.W, l.Attn.K.W, l.Attn.V.W)
		if l.MLP.Gate.B == nil && l.MLP.Up.B == nil {
			l.MLP.gateUp = adjacent(l.MLP.Gate.W, l.MLP.Up.W)
		}
	}
	m.transposeSmall()
}

// transposeMaxWeights is the most weight values (64 MiB of float32) for which
// a model keeps a transposed copy of its matrices.
const transposeMaxWeights = 1 << 24

// transposeSmall gives a small model's matrices a transposed copy for the
// products of a few rows, where the processor runs them fast
// (tensor.TransposedFast). On a model whose weights sit in the caches such
// products are bound by arithmetic and cache bandwidth, not memory, and the
// transposed kernels need no horizontal sums and share each weight load
// among four or eight rows: a decode step gets faster, and a speculative
// verification of several rows costs less than as many steps. Larger models
// are bound by memory bandwidth at these row counts, and would pay the copy
// for nothing.
func (m *Model) transposeSmall() {
	if !tensor.TransposedFast() {
		return
	}
	total := len(m.LMHead)
	for i := range m.Layers {
		l := &m.Layers[i]
		for _, lin := range []*Linear{&l.Attn.Q, &l.Attn.K, &l.Attn.V, &l.Attn.O, &l.MLP.Gate, &l.MLP.Up, &l.MLP.Down} {
			total += len(lin.W)
		}
	}
	if total > transposeMaxWeights {
		return
	}
	m.lmT = tensor.NewTransposed(m.LMHead, m.vocab, m.h)
	for i := range m.Layers {
		l := &m.Layers[i]
		// A fused matrix gets one transposed copy; its parts, which the
		// forward pass then never multiplies by alone, get none.
		lins := []*Linear{&l.Attn.O, &l.MLP.Down}
		if l.Attn.qkv != nil {
			l.Attn.qkvT = tensor.NewTransposed(l.Attn.qkv, m.qDim+2*m.kvDim, m.h)
		} else {
			lins = append(lins, &l.Attn.Q, &l.Attn.K, &l.Attn.V)
		}
		if l.MLP.gateUp != nil {
			l.MLP.gateUpT = tensor.NewTransposed(l.MLP.gateUp, 2*m.inter, m.h)
		} else {
			lins = append(lins, &l.MLP.Gate, &l.MLP.Up)
		}
		for _, lin := range lins {
			lin.wt = tensor.NewTransposed(lin.W, lin.Out, lin.In)
		}
	}
}

func product(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
