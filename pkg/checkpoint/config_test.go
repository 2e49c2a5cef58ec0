package checkpoint

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

func TestConfigFixtures(t *testing.T) {
	type want struct {
		modelType                     string
		hidden, inter, layers, heads  int
		kv, headDim, maxPos, vocab    int
		eps, theta                    float64
		rope                          *RopeScaling
		tied, qkvBias, oBias, qkNorm  bool
		sliding                       int
		bos, eos                      string
		hasQBias, hasONorm, hasLMHead bool
	}
	cases := map[string]want{
		"llama3_rope.json": {"llama", 64, 128, 4, 4, 2, 16, 131072, 256, 1e-5, 500000,
			&RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192},
			true, false, false, false, 0, "[1]", "[2 3 4]", false, false, false},
		// No head_dim, num_key_value_heads, max_position_embeddings, rms_norm_eps or
		// rope_theta: HF LlamaConfig defaults (hidden/heads, heads, 2048, 1e-6, 10000).
		"linear_rope.json": {"llama", 32, 64, 2, 4, 4, 8, 2048, 100, 1e-6, 10000,
			&RopeScaling{Type: "linear", Factor: 2},
			false, false, false, false, 0, "[]", "[2]", false, false, true},
		// Qwen2 has q/k/v bias without an attention_bias key, and no o_proj bias.
		"qwen2.json": {"qwen2", 32, 48, 3, 4, 2, 8, 32768, 120, 1e-6, 1e6, nil,
			false, true, false, false, 0, "[100]", "[101]", true, false, true},
		"qwen3.json": {"qwen3", 32, 48, 4, 4, 2, 16, 40960, 120, 1e-6, 1e6, nil,
			true, false, false, true, 0, "[100]", "[101]", false, true, false},
		"mistral.json": {"mistral", 32, 64, 2, 4, 1, 8, 32768, 64, 1e-5, 10000, nil,
			false, false, false, false, 4096, "[1]", "[2]", false, false, true},
		// Mistral with no head_dim and sliding_window null: 48/6 = 8, no window.
		"no_head_dim.json": {"mistral", 48, 64, 2, 6, 2, 8, 131072, 64, 1e-6, 10000, nil,
			false, false, false, false, 0, "[]", "[]", false, false, true},
	}
	for file, w := range cases {
		t.Run(file, func(t *testing.T) {
			c, err := LoadConfig(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			got := want{c.ModelType, c.HiddenSize, c.IntermediateSize, c.NumLayers, c.NumHeads,
				c.NumKVHeads, c.HeadDim, c.MaxPositions, c.VocabSize, c.RMSNormEps, c.RopeTheta, c.RopeScaling,
				c.TieWordEmbeddings, c.AttentionBias, c.OProjBias, c.QKNorm, c.SlidingWindow,
				fmt.Sprint(nonNil(c.BOS)), fmt.Sprint(nonNil(c.EOS)), false, false, false}
			shapes := c.TensorShapes()
			_, got.hasQBias = shapes["model.layers.0.self_attn.q_proj.bias"]
			_, got.hasONorm = shapes["model.layers.0.self_attn.q_norm.weight"]
			_, got.hasLMHead = shapes["lm_head.weight"]
			if !reflect.DeepEqual(got, w) {
				t.Fatalf("\n got %+v %+v\nwant %+v %+v", got, got.rope, w, w.rope)
			}
			if c.Raw["model_type"] != c.ModelType {
				t.Fatalf("raw map lost model_type: %v", c.Raw["model_type"])
			}
		})
	}
}

func nonNil(v []int) []int {
	if v == nil {
		return []int{}
	}
	return v
}

func TestTensorShapesByHand(t *testing.T) {
	c, err := LoadConfig("testdata/qwen2.json")
	if err != nil {
		t.Fatal(err)
	}
	// hidden 32, 4 heads of 8 (q width 32), 2 KV heads (kv width 16), intermediate 48.
	s := c.TensorShapes()
	for name, shape := range map[string]string{
		"model.embed_tokens.weight":                      "[120 32]",
		"model.layers.2.self_attn.q_proj.weight":         "[32 32]",
		"model.layers.2.self_attn.k_proj.weight":         "[16 32]",
		"model.layers.2.self_attn.v_proj.bias":           "[16]",
		"model.layers.2.self_attn.o_proj.weight":         "[32 32]",
		"model.layers.0.mlp.down_proj.weight":            "[32 48]",
		"model.layers.0.mlp.gate_proj.weight":            "[48 32]",
		"model.layers.1.post_attention_layernorm.weight": "[32]",
		"lm_head.weight":                                 "[120 32]",
	} {
		if fmt.Sprint(s[name]) != shape {
			t.Fatalf("%s: %v, want %s", name, s[name], shape)
		}
	}
	if _, ok := s["model.layers.0.self_attn.o_proj.bias"]; ok {
		t.Fatal("qwen2 has no o_proj bias")
	}
	// 3 layers x (norm 2 + q/k/v/o 4 + q/k/v bias 3 + mlp 3) + embed + norm + lm_head.
	if len(s) != 3*12+3 {
		t.Fatalf("%d tensors", len(s))
	}
	// Hand count: embed and lm_head 2*120*32; per layer 2*32 norms, 32*32*2 (q, o),
	// 16*32*2 (k, v), 32+16+16 bias, 3*48*32 MLP; final norm 32.
	perLayer := 2*32 + 2*32*32 + 2*16*32 + 64 + 3*48*32
	if want := int64(2*120*32 + 3*perLayer + 32); c.NumParams() != want {
		t.Fatalf("NumParams %d, want %d", c.NumParams(), want)
	}
}

func TestEAGLE3Layers(t *testing.T) {
	for _, c := range []struct {
		l     int
		want  string
		draft string
	}{{32, "[2 16 29]", "[2 16 29]"}, {28, "[2 14 25]", "[2 14 25]"}, {7, "[2 3 4]", "[2 3 4]"},
		{6, "[2 3 3]", "[1 3 6]"}, {5, "[2 2 2]", "[1 3 5]"}} {
		cfg := &Config{NumLayers: c.l}
		if got := fmt.Sprint(cfg.EAGLE3Layers()); got != c.want {
			t.Fatalf("L=%d: %s, want %s", c.l, got, c.want)
		}
		if got := fmt.Sprint(cfg.EAGLE3DraftLayers()); got != c.draft {
			t.Fatalf("L=%d: draft layers %s, want %s", c.l, got, c.draft)
		}
	}
}

// writeConfig writes the llama3_rope fixture with edits applied (a nil value deletes
// the key) and returns its path.
func writeConfig(t *testing.T, edit map[string]any) string {
	t.Helper()
	m := testutil.ReadJSON(t, "testdata/llama3_rope.json")
	for k, v := range edit {
		if v == nil {
			delete(m, k)
		} else if v == "null" {
			m[k] = nil
		} else {
			m[k] = v
		}
	}
	out, _ := json.Marshal(m)
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		edit map[string]any
		want []string
	}{
		{"unknown model_type", map[string]any{"model_type": "gemma2"}, []string{`"model_type"`, `"gemma2" is not supported`, "llama, mistral, qwen2, qwen3"}},
		{"missing model_type", map[string]any{"model_type": nil}, []string{`"model_type"`, "missing", "llama, mistral, qwen2, qwen3"}},
		{"architecture", map[string]any{"architectures": []string{"LlamaForSequenceClassification"}}, []string{`"architectures"`, "LlamaForSequenceClassification", "LlamaForCausalLM, MistralForCausalLM"}},
		{"arch mismatch", map[string]any{"architectures": []string{"Qwen2ForCausalLM"}}, []string{`"Qwen2ForCausalLM" is not supported for model_type "llama"`}},
		{"yarn", map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4}}, []string{`"rope_scaling"`, `"yarn" is not supported`, "llama3, linear"}},
		{"dynamic via type", map[string]any{"rope_scaling": map[string]any{"type": "dynamic", "factor": 2}}, []string{`"dynamic" is not supported`}},
		{"llama3 missing field", map[string]any{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4}}, []string{"llama3 scaling needs original_max_position_embeddings"}},
		{"linear small factor", map[string]any{"rope_scaling": map[string]any{"rope_type": "linear", "factor": 0.5}}, []string{"factor must be at least 1"}},
		{"types disagree", map[string]any{"rope_scaling": map[string]any{"rope_type": "linear", "type": "llama3", "factor": 2}}, []string{"disagree"}},
		{"kv not dividing", map[string]any{"num_key_value_heads": 3}, []string{`"num_key_value_heads"`, "3 does not divide num_attention_heads 4"}},
		{"zero hidden", map[string]any{"hidden_size": 0}, []string{`"hidden_size"`, "positive", "got 0"}},
		{"missing vocab", map[string]any{"vocab_size": nil}, []string{`"vocab_size"`, "missing"}},
		{"string layers", map[string]any{"num_hidden_layers": "4"}, []string{`"num_hidden_layers"`, "expected an integer"}},
		{"fractional heads", map[string]any{"num_attention_heads": 4.5}, []string{`"num_attention_heads"`, "expected an integer"}},
		{"odd head_dim", map[string]any{"head_dim": 15}, []string{`"head_dim"`, "even", "15"}},
		{"gelu", map[string]any{"hidden_act": "gelu"}, []string{`"hidden_act"`, `"gelu" is not supported`}},
		{"mlp bias", map[string]any{"mlp_bias": true}, []string{`"mlp_bias"`, "not supported"}},
		{"eos out of vocab", map[string]any{"eos_token_id": []int{2, 256}}, []string{`"eos_token_id"`, "256 is outside the vocabulary (vocab_size 256)"}},
		{"negative bos", map[string]any{"bos_token_id": -1}, []string{`"bos_token_id"`, "non-negative"}},
		{"eps zero", map[string]any{"rms_norm_eps": 0}, []string{`"rms_norm_eps"`, "positive"}},
		{"bad tie", map[string]any{"tie_word_embeddings": "yes"}, []string{`"tie_word_embeddings"`, "true or false"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeConfig(t, c.edit)
			_, err := LoadConfig(p)
			testutil.WantErr(t, err, append([]string{p}, c.want...)...)
		})
	}
	t.Run("qwen2 sliding", func(t *testing.T) {
		b, _ := os.ReadFile("testdata/qwen2.json")
		p := filepath.Join(t.TempDir(), "config.json")
		os.WriteFile(p, []byte(strings.Replace(string(b), `"use_sliding_window": false`, `"use_sliding_window": true`, 1)), 0o644)
		_, err := LoadConfig(p)
		testutil.WantErr(t, err, p, `"use_sliding_window"`, "not supported")
	})
	t.Run("invalid json", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "config.json")
		os.WriteFile(p, []byte(`{"model_type": "llama",`), 0o644)
		_, err := LoadConfig(p)
		testutil.WantErr(t, err, p, "invalid JSON")
	})
	t.Run("missing file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "config.json")
		_, err := LoadConfig(p)
		testutil.WantErr(t, err, p, "missing")
	})
	t.Run("rope null and default", func(t *testing.T) {
		for _, v := range []any{"null", map[string]any{"rope_type": "default"}} {
			c, err := LoadConfig(writeConfig(t, map[string]any{"rope_scaling": v}))
			if err != nil || c.RopeScaling != nil {
				t.Fatalf("%v: %+v %v", v, c.RopeScaling, err)
			}
		}
	})
	t.Run("transformers 5 rope_parameters", func(t *testing.T) {
		c, err := LoadConfig(writeConfig(t, map[string]any{"rope_scaling": nil, "rope_theta": nil,
			"rope_parameters": map[string]any{"rope_type": "linear", "factor": 4, "rope_theta": 123456}}))
		if err != nil || c.RopeTheta != 123456 || c.RopeScaling == nil || c.RopeScaling.Factor != 4 {
			t.Fatalf("%+v %v", c, err)
		}
	})
}

func TestGenerationConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "generation_config.json")
	os.WriteFile(p, []byte(`{"bos_token_id": 1, "eos_token_id": [2, 7], "do_sample": true, "temperature": 0.6, "top_p": 0.9}`), 0o644)
	g, err := LoadGenerationConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(g.EOS) != "[2 7]" || fmt.Sprint(g.BOS) != "[1]" || !g.DoSample || g.Temperature != 0.6 || g.TopP != 0.9 ||
		!g.HasEOS || !g.HasDoSample || !g.HasTemperature || !g.HasTopP || g.HasTopK || g.TopK != 50 || g.HasRepetitionPenalty {
		t.Fatalf("%+v", g)
	}
	os.WriteFile(p, []byte(`{"eos_token_id": 2, "top_k": 20}`), 0o644)
	g, err = LoadGenerationConfig(p)
	if err != nil || fmt.Sprint(g.EOS) != "[2]" || g.TopK != 20 || !g.HasTopK || g.HasTemperature || g.Temperature != 1 || g.DoSample {
		t.Fatalf("%+v %v", g, err)
	}
	os.WriteFile(p, []byte(`{"top_p": 1.5}`), 0o644)
	_, err = LoadGenerationConfig(p)
	testutil.WantErr(t, err, p, `"top_p"`, "[0, 1]")
	os.WriteFile(p, []byte(`{"eos_token_id": "2"}`), 0o644)
	_, err = LoadGenerationConfig(p)
	testutil.WantErr(t, err, p, `"eos_token_id"`)
}
