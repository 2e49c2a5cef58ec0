package arch

// gemma is what Gemma-2 and Gemma-3 share: the embedding scaled by
// √hidden_size, RMSNorm weights stored as offsets from 1, four norms per
// layer, a GELU-tanh gated MLP read from hidden_activation, scores scaled by
// query_pre_attn_scalar^-½, sliding layers interleaved with global ones by
// layer_types, no biases unless attention_bias, tied embeddings by default.
func gemma() Family {
	return Family{
		DefaultHeadDim: 256, DefaultMaxPositions: 8192, DefaultTied: true,
		QKVBias: ConfigBias, OBias: ConfigBias,
		Activation: "gelu_pytorch_tanh", ActivationKey: "hidden_activation",
		Sliding: SlidingLayerTypes, DefaultSlidingWindow: 4096, Buffers: rotaryBuffers(),
		EmbedScale: ScaleSqrtHidden, NormOffset: 1, SandwichNorms: true,
		QueryPreAttnScalar: true, DefaultQueryPreAttnScalar: 256,
		Softcaps: true,
	}
}

// Gemma2 is Gemma2ForCausalLM: every other layer slides (layer 0 first),
// attention scores capped at 50 and final logits at 30 unless config.json
// says otherwise.
func Gemma2() Family {
	f := gemma()
	f.ModelType, f.Architecture = "gemma2", "Gemma2ForCausalLM"
	f.SlidingPeriod = 2
	f.DefaultAttnSoftcap, f.DefaultFinalSoftcap = 50, 30
	return f
}

// Gemma3Text is Gemma3ForCausalLM (the text-only Gemma-3 checkpoints,
// model_type gemma3_text): Gemma-2's layers plus per-head q/k RMSNorms
// (offset from 1 as well), five sliding layers to one global by default, the
// sliding layers on their own RoPE base (rope_local_base_freq, default
// 10000) and the global ones on rope_theta (default 1000000) with
// rope_scaling; no soft-capping unless config.json sets it.
func Gemma3Text() Family {
	f := gemma()
	f.ModelType, f.Architecture = "gemma3_text", "Gemma3ForCausalLM"
	f.DefaultMaxPositions = 131072
	f.QKNorm = true
	f.SlidingPeriod = 6
	f.LocalRope = true
	f.DefaultRopeTheta = 1000000
	return f
}
