package arch

// Phi3 is Phi3ForCausalLM (Phi-3, Phi-3.5 and Phi-4 text models): q/k/v in
// one qkv_proj matrix and gate/up in one gate_up_proj, no biases, SiLU,
// partial rotary embeddings (partial_rotary_factor) with LongRoPE scaling
// where the config has it, and sliding_window (none by default) on every
// layer.
func Phi3() Family {
	return Family{
		ModelType: "phi3", Architecture: "Phi3ForCausalLM",
		DefaultMaxPositions: 4096,
		QKVBias:             NoBias, OBias: NoBias, FusedQKV: true, FusedGateUp: true, PartialRotary: true,
		Activation: "silu", ActivationKey: "hidden_act", Sliding: SlidingAllLayers, Buffers: rotaryBuffers(),
	}
}
