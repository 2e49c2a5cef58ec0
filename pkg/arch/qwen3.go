package arch

// Qwen3 is Qwen3ForCausalLM: per-head RMSNorms on queries and keys before
// RoPE, biases only with attention_bias, head_dim 128 by default, and
// sliding-window layers refused.
func Qwen3() Family {
	return Family{
		ModelType: "qwen3", Architecture: "Qwen3ForCausalLM",
		DefaultHeadDim: 128, DefaultMaxPositions: 32768,
		QKVBias: ConfigBias, OBias: ConfigBias, QKNorm: true,
		Activation: "silu", ActivationKey: "hidden_act", Sliding: SlidingOff, Buffers: rotaryBuffers(),
	}
}
