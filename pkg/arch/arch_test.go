package arch

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestSupportedListsEveryFamily: the supported list, the lookup and the
// architectures names come from the same table.
func TestSupportedListsEveryFamily(t *testing.T) {
	if got, want := Supported(), "llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3, mixtral, qwen3_moe, deepseek_v3, gpt_oss"; got != want {
		t.Fatalf("Supported() = %q, want %q", got, want)
	}
	for _, f := range Families() {
		g, ok := Lookup(f.ModelType)
		if !ok || g.Architecture != f.Architecture {
			t.Errorf("Lookup(%q) = %v, %v", f.ModelType, g.Architecture, ok)
		}
		if !strings.Contains(SupportedArchitectures(), f.Architecture) {
			t.Errorf("SupportedArchitectures() %q lacks %s", SupportedArchitectures(), f.Architecture)
		}
	}
	if _, ok := Lookup("nemotron"); ok {
		t.Fatal("nemotron is not a family yet")
	}
}

// TestTensorsHooks: biases follow the dims, q/k norms the family, sandwich
// norms rename the MLP's input norm and add the two output norms, and a tied
// model has no lm_head.
func TestTensorsHooks(t *testing.T) {
	d := Dims{Hidden: 8, Intermediate: 12, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 4, Vocab: 10, TiedEmbeddings: true, QKVBias: true}
	f := Qwen3()
	f.SandwichNorms = true
	var names []string
	for _, x := range f.Tensors(d) {
		if x.Layer == 1 || x.Layer == -1 {
			names = append(names, fmt.Sprintf("%s%v", x.Name, x.Shape))
		}
	}
	want := []string{"model.embed_tokens.weight[10 8]",
		"model.layers.1.input_layernorm.weight[8]", "model.layers.1.self_attn.q_proj.weight[8 8]",
		"model.layers.1.self_attn.k_proj.weight[4 8]", "model.layers.1.self_attn.v_proj.weight[4 8]",
		"model.layers.1.self_attn.q_proj.bias[8]", "model.layers.1.self_attn.k_proj.bias[4]", "model.layers.1.self_attn.v_proj.bias[4]",
		"model.layers.1.self_attn.o_proj.weight[8 8]", "model.layers.1.self_attn.q_norm.weight[4]", "model.layers.1.self_attn.k_norm.weight[4]",
		"model.layers.1.post_attention_layernorm.weight[8]", "model.layers.1.pre_feedforward_layernorm.weight[8]",
		"model.layers.1.post_feedforward_layernorm.weight[8]",
		"model.layers.1.mlp.gate_proj.weight[12 8]", "model.layers.1.mlp.up_proj.weight[12 8]", "model.layers.1.mlp.down_proj.weight[8 12]",
		"model.norm.weight[8]"}
	if !slices.Equal(names, want) {
		t.Fatalf("tensors\n got %v\nwant %v", names, want)
	}
}

func TestBiasRules(t *testing.T) {
	for _, c := range []struct {
		b          Bias
		off, on    bool
		familyName string
	}{{NoBias, false, false, "mistral"}, {AlwaysBias, true, true, "qwen2 q/k/v"}, {ConfigBias, false, true, "llama"}} {
		if c.b.Present(false) != c.off || c.b.Present(true) != c.on {
			t.Errorf("%s rule: Present(false)=%v Present(true)=%v", c.familyName, c.b.Present(false), c.b.Present(true))
		}
	}
}

func TestLayerOf(t *testing.T) {
	if l, rest, ok := LayerOf("model.layers.12.mlp.up_proj.weight"); !ok || l != 12 || rest != "mlp.up_proj.weight" {
		t.Fatalf("LayerOf: %d %q %v", l, rest, ok)
	}
	for _, name := range []string{"model.norm.weight", "model.layers.x.mlp", "model.layers.-1.a", "model.layers.3"} {
		if _, _, ok := LayerOf(name); ok {
			t.Errorf("LayerOf(%q) accepted", name)
		}
	}
	if LayerPattern(4, "*") != "model.layers.4.*" || LayerPattern(-1, "mlp.bias") != "model.layers.*.mlp.bias" {
		t.Fatal("LayerPattern")
	}
	if f := Llama(); !f.IsBuffer("model.layers.0.self_attn.rotary_emb.inv_freq") || f.IsBuffer("model.norm.weight") {
		t.Fatal("IsBuffer")
	}
}
