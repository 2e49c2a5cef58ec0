package arch

// Mistral is MistralForCausalLM: Llama's layers without biases, 8 KV heads by
// default, and one sliding window (sliding_window) for every layer.
func Mistral() Family {
	return Family{
		ModelType: "mistral", Architecture: "MistralForCausalLM",
		DefaultKVHeads: 8, DefaultMaxPositions: 4096 * 32, DefaultSlidingWindow: 4096,
		QKVBias: NoBias, OBias: NoBias,
		Activation: "silu", ActivationKey: "hidden_act", Sliding: SlidingAllLayers, Buffers: rotaryBuffers(),
	}
}
