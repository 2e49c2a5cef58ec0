package arch

// Qwen2 is Qwen2ForCausalLM (Qwen2 and Qwen2.5): q/k/v biases whatever
// attention_bias says, no o_proj bias, and sliding-window layers refused.
func Qwen2() Family {
	return Family{
		ModelType: "qwen2", Architecture: "Qwen2ForCausalLM",
		DefaultMaxPositions: 32768,
		QKVBias:             AlwaysBias, OBias: NoBias,
		Activation: "silu", ActivationKey: "hidden_act", Sliding: SlidingOff, Buffers: rotaryBuffers(),
	}
}
