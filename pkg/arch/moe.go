package arch

// Mixtral is MixtralForCausalLM: Mistral's attention (its sliding window
// included) with every layer's MLP a mixture of num_local_experts SwiGLU
// experts (block_sparse_moe.experts.N.w1 gate, w3 up, w2 down) of
// intermediate_size, num_experts_per_tok chosen per token by the router's
// softmax and their probabilities renormalised to sum to one.
func Mixtral() Family {
	f := Mistral()
	f.ModelType, f.Architecture = "mixtral", "MixtralForCausalLM"
	f.DefaultSlidingWindow = 0
	f.MoE = &MoE{
		Block: "block_sparse_moe.", Gate: "w1", Up: "w3", Down: "w2",
		ExpertsKeys: []string{"num_local_experts"}, IntermediateKey: "intermediate_size",
		RenormalizeTopK: true,
	}
	return f
}

// Qwen3MoE is Qwen3MoeForCausalLM (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's
// attention with sparse layers of num_experts SwiGLU experts
// (mlp.experts.N.gate_proj, up_proj, down_proj) of moe_intermediate_size,
// the chosen experts' probabilities renormalised when norm_topk_prob, and
// the layers in mlp_only_layers (or off decoder_sparse_step) dense MLPs of
// intermediate_size.
func Qwen3MoE() Family {
	f := Qwen3()
	f.ModelType, f.Architecture = "qwen3_moe", "Qwen3MoeForCausalLM"
	f.MoE = &MoE{
		Block: "mlp.", Gate: "gate_proj", Up: "up_proj", Down: "down_proj",
		ExpertsKeys: []string{"num_experts", "num_local_experts"}, IntermediateKey: "moe_intermediate_size",
		NormTopKKey: "norm_topk_prob", SparseLayersKeys: true,
	}
	return f
}
