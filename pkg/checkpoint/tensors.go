package checkpoint

import "fmt"

// TensorSpec is one tensor the architecture needs: its checkpoint name and shape.
type TensorSpec struct {
	Name  string
	Shape []int
}

// Tensors lists every tensor the model needs, in forward order: the embedding, each
// layer's tensors, the final norm, and lm_head.weight unless the embeddings are tied.
// Linear weights use the Hugging Face [out, in] layout.
func (c *Config) Tensors() []TensorSpec {
	h, q, kv := c.HiddenSize, c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	out := []TensorSpec{{"model.embed_tokens.weight", []int{c.VocabSize, h}}}
	for i := 0; i < c.NumLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		add := func(name string, shape ...int) { out = append(out, TensorSpec{p + name, shape}) }
		add("input_layernorm.weight", h)
		add("self_attn.q_proj.weight", q, h)
		add("self_attn.k_proj.weight", kv, h)
		add("self_attn.v_proj.weight", kv, h)
		if c.AttentionBias {
			add("self_attn.q_proj.bias", q)
			add("self_attn.k_proj.bias", kv)
			add("self_attn.v_proj.bias", kv)
		}
		if c.QKNorm {
			add("self_attn.q_norm.weight", c.HeadDim)
			add("self_attn.k_norm.weight", c.HeadDim)
		}
		add("self_attn.o_proj.weight", h, q)
		if c.OProjBias {
			add("self_attn.o_proj.bias", h)
		}
		add("post_attention_layernorm.weight", h)
		add("mlp.gate_proj.weight", c.IntermediateSize, h)
		add("mlp.up_proj.weight", c.IntermediateSize, h)
		add("mlp.down_proj.weight", h, c.IntermediateSize)
	}
	out = append(out, TensorSpec{"model.norm.weight", []int{h}})
	if !c.TieWordEmbeddings {
		out = append(out, TensorSpec{"lm_head.weight", []int{c.VocabSize, h}})
	}
	return out
}

// TensorShapes returns Tensors as a map from name to shape.
func (c *Config) TensorShapes() map[string][]int {
	ts := c.Tensors()
	m := make(map[string][]int, len(ts))
	for _, t := range ts {
		m[t.Name] = t.Shape
	}
	return m
}

// NumParams returns the number of parameters of the tensors in Tensors (a tied
// embedding is counted once).
func (c *Config) NumParams() int64 {
	var n int64
	for _, t := range c.Tensors() {
		p := int64(1)
		for _, d := range t.Shape {
			p *= int64(d)
		}
		n += p
	}
	return n
}
