package checkpoint

import "github.com/drafter-ai/drafter/pkg/arch"

// Family returns the architecture family of c.ModelType; ok is false for a
// model_type drafter does not support (only a Config built by hand can have
// one: LoadConfig refuses it).
func (c *Config) Family() (f arch.Family, ok bool) {
	return arch.Lookup(c.ModelType)
}

// Dims returns what decides the tensors besides the family.
func (c *Config) Dims() arch.Dims {
	return arch.Dims{
		Hidden: c.HiddenSize, Intermediate: c.IntermediateSize, Layers: c.NumLayers,
		Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim, Vocab: c.VocabSize,
		TiedEmbeddings: c.TieWordEmbeddings, QKVBias: c.AttentionBias, OBias: c.OProjBias,
		Experts: c.Experts, ExpertIntermediate: c.ExpertIntermediate, Sparse: c.Sparse, SharedIntermediate: c.SharedIntermediate,
		MXFP4: c.MXFP4, QLoraRank: c.QLoraRank, KVLoraRank: c.KVLoraRank, QKNope: c.QKNope, QKRope: c.QKRope, VHead: c.VHead,
	}
}

// Tensors lists every tensor the model needs (arch.Family.Tensors), nil for
// an unsupported model_type.
func (c *Config) Tensors() []arch.Tensor {
	f, ok := c.Family()
	if !ok {
		return nil
	}
	return f.Tensors(c.Dims())
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
// embedding is counted once), as Transformers counts them: the buffers a
// checkpoint stores beside them (DeepSeek's e_score_correction_bias), which
// the loaded model holds, are not parameters, and an MXFP4 matrix counts
// its values, not its scales.
func (c *Config) NumParams() int64 {
	var n int64
	for _, t := range c.Tensors() {
		if t.Role == arch.RouterBias || t.Role == arch.ExpertsGateUpScales || t.Role == arch.ExpertsDownScales {
			continue
		}
		if mxfp4Bytes(c, t.Role) { // blocks: two values a byte
			n += 2 * int64(t.Shape[0]*t.Shape[1]*t.Shape[2]*t.Shape[3])
			continue
		}
		p := int64(1)
		for _, d := range t.Shape {
			p *= int64(d)
		}
		n += p
	}
	return n
}
