package arch

// DeepseekV3 is DeepseekV3ForCausalLM (DeepSeek-V3, R1, and Kimi-K2, which
// shares its architecture): multi-head latent attention (queries through a
// low-rank q_a/q_b pair, keys and values from one compressed latent of
// kv_lora_rank values plus a rotary part shared by every head), the first
// first_k_dense_replace layers dense and the others a mixture of
// n_routed_experts experts with a shared expert, chosen by sigmoid scores
// within the best expert groups. The checkpoints' multi-token-prediction
// layers past num_hidden_layers are not run.
func DeepseekV3() Family {
	return Family{
		ModelType: "deepseek_v3", Architecture: "DeepseekV3ForCausalLM",
		DefaultMaxPositions: 4096,
		QKVBias:             NoBias, OBias: NoBias,
		Activation: "silu", ActivationKey: "hidden_act", Sliding: NoSliding, Buffers: rotaryBuffers(),
		MLA: true, ExtraLayersKey: "num_nextn_predict_layers",
		MoE: &MoE{
			Block: "mlp.", Gate: "gate_proj", Up: "up_proj", Down: "down_proj",
			ExpertsKeys: []string{"n_routed_experts", "num_local_experts"}, IntermediateKey: "moe_intermediate_size",
			NormTopKKey: "norm_topk_prob", DefaultNormTopK: true, FirstDenseKey: "first_k_dense_replace",
			SigmoidGroups: true, Shared: "shared_experts.",
		},
	}
}
