package model

import (
	"fmt"
	"slices"

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

// bindings lists every tensor of the model, in checkpoint naming. This is the
// one place that knows tensor names.
func (m *Model) bindings() []binding {
	cfg := m.Config
	h, v, hd := m.h, m.vocab, m.hd
	// Which biases exist is fixed by the architecture and config, exactly as
	// Transformers builds the modules: Qwen2 always has q/k/v biases and never
	// an o_proj bias; Llama, Mistral and Qwen3 have all four iff
	// attention_bias; Llama's MLP has biases iff mlp_bias.
	qkvBias := cfg.AttentionBias || cfg.ModelType == "qwen2"
	oBias := cfg.AttentionBias && cfg.ModelType != "qwen2"
	mlpBias, _ := cfg.Raw["mlp_bias"].(bool)
	qkNorm := cfg.QKNorm || cfg.ModelType == "qwen3"

	b := []binding{{name: "model.embed_tokens.weight", shape: []int{v, h}, dst: &m.Embed}}
	// Biases are listed after the weights of their group so that q/k/v and
	// gate/up weights lie back to back in the arena and can be multiplied as
	// one matrix (see fuse).
	var biases []binding
	lin := func(name string, l *Linear, in, out int, bias bool) {
		l.In, l.Out = in, out
		b = append(b, binding{name: name + ".weight", shape: []int{out, in}, dst: &l.W})
		if bias {
			biases = append(biases, binding{name: name + ".bias", shape: []int{out}, dst: &l.B})
		}
	}
	flush := func() {
		b = append(b, biases...)
		biases = biases[:0]
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		b = append(b, binding{name: p + "input_layernorm.weight", shape: []int{h}, dst: &l.AttnNorm})
		lin(p+"self_attn.q_proj", &l.Attn.Q, h, m.qDim, qkvBias)
		lin(p+"self_attn.k_proj", &l.Attn.K, h, m.kvDim, qkvBias)
		lin(p+"self_attn.v_proj", &l.Attn.V, h, m.kvDim, qkvBias)
		flush()
		lin(p+"self_attn.o_proj", &l.Attn.O, m.qDim, h, oBias)
		flush()
		if qkNorm {
			b = append(b, binding{name: p + "self_attn.q_norm.weight", shape: []int{hd}, dst: &l.Attn.QNorm},
				binding{name: p + "self_attn.k_norm.weight", shape: []int{hd}, dst: &l.Attn.KNorm})
		}
		b = append(b, binding{name: p + "post_attention_layernorm.weight", shape: []int{h}, dst: &l.MLPNorm})
		lin(p+"mlp.gate_proj", &l.MLP.Gate, h, m.inter, mlpBias)
		lin(p+"mlp.up_proj", &l.MLP.Up, h, m.inter, mlpBias)
		flush()
		lin(p+"mlp.down_proj", &l.MLP.Down, m.inter, h, mlpBias)
		flush()
	}
	b = append(b, binding{name: "model.norm.weight", shape: []int{h}, dst: &m.Norm})
	if !cfg.TieWordEmbeddings {
		b = append(b, binding{name: "lm_head.weight", shape: []int{v, h}, dst: &m.LMHead})
	}
	return b
}

// FromWeights builds a model from a parsed config and a tensor store. Every
// tensor the config implies must be present with exactly the implied shape;
// all weights are converted into one float32 allocation.
func FromWeights(cfg *checkpoint.Config, w WeightSource, be tensor.Backend) (*Model, error) {
	m, err := newModel(cfg, be)
	if err != nil {
		return nil, err
	}
	m.Layers = make([]Layer, cfg.NumLayers)
	binds := m.bindings()
	total := 0
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
		total += info.NumElements()
	}
	arena := make([]float32, total)
	off := 0
	for _, b := range binds {
		n := product(b.shape)
		dst := arena[off : off+n]
		off += n
		if err := w.Float32Into(b.name, dst); err != nil {
			m.Close()
			return nil, fmt.Errorf("model: loading weights: %w", err)
		}
		*b.dst = dst
	}
	if cfg.TieWordEmbeddings {
		m.LMHead = m.Embed
	}
	m.fuse()
	return m, nil
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
