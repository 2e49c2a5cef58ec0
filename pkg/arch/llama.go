package arch

// rotaryBuffers are the rotary embedding's inverse frequencies that older
// Transformers saved with the weights (model.layers.N.self_attn.rotary_emb.
// inv_freq): computed from rope_theta and rope_scaling, not learned, and
// ignored on loading as current Transformers ignores them.
func rotaryBuffers() []string { return []string{".rotary_emb.inv_freq"} }

// Llama is LlamaForCausalLM (Llama 2 and 3, and most fine-tunes of them): no
// biases unless attention_bias, SiLU, no sliding window.
func Llama() Family {
	return Family{
		ModelType: "llama", Architecture: "LlamaForCausalLM",
		DefaultMaxPositions: 2048,
		QKVBias:             ConfigBias, OBias: ConfigBias,
		Activation: "silu", ActivationKey: "hidden_act", Sliding: NoSliding, Buffers: rotaryBuffers(),
	}
}
