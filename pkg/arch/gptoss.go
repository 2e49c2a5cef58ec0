package arch

// GptOss is GptOssForCausalLM (gpt-oss-20b, gpt-oss-120b): attention with
// biases and a learned sink per head, sliding layers alternating with
// global ones (layer_types), and every layer a mixture of
// num_local_experts experts stored stacked, with biases and gpt-oss's
// clamped SwiGLU, the top num_experts_per_tok router logits (the router
// has a bias) weighed by their softmax.
func GptOss() Family {
	return Family{
		ModelType: "gpt_oss", Architecture: "GptOssForCausalLM",
		DefaultMaxPositions: 131072,
		QKVBias:             ConfigBias, OBias: ConfigBias,
		Activation: "silu", ActivationKey: "hidden_act",
		Sliding: SlidingLayerTypes, SlidingPeriod: 2, DefaultSlidingWindow: 128, Buffers: rotaryBuffers(),
		AttnSinks: true,
		MoE: &MoE{
			Block: "mlp.", ExpertsKeys: []string{"num_local_experts", "num_experts"}, IntermediateKey: "intermediate_size",
			Stacked: true, Router: "router.", RouterBias: true, SoftmaxTopK: true, ClampedSwiGLU: true,
		},
	}
}
