package checkpoint

import (
	"encoding/json"
	"fmt"
	"math"
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
		{"unknown model_type", map[string]any{"model_type": "nemotron"}, []string{`"model_type"`, `"nemotron" is not supported`, "llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3, mixtral, qwen3_moe, deepseek_v3, gpt_oss"}},
		{"missing model_type", map[string]any{"model_type": nil}, []string{`"model_type"`, "missing", "llama, mistral, qwen2, qwen3"}},
		{"architecture", map[string]any{"architectures": []string{"LlamaForSequenceClassification"}}, []string{`"architectures"`, "LlamaForSequenceClassification", "LlamaForCausalLM, MistralForCausalLM"}},
		{"arch mismatch", map[string]any{"architectures": []string{"Qwen2ForCausalLM"}}, []string{`"Qwen2ForCausalLM" is not supported for model_type "llama"`}},
		{"yarn without its original maximum", map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4}}, []string{`"rope_scaling"`, "yarn scaling needs original_max_position_embeddings"}},
		{"dynamic", map[string]any{"rope_scaling": map[string]any{"rope_type": "dynamic", "factor": 4}}, []string{`"rope_scaling"`, `"dynamic" is not supported`, "llama3, linear, longrope, yarn"}},
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

// TestGemmaConfigs reads Gemma configs as the Hub's Transformers 4
// checkpoints write them (gemma-2-2b-it, gemma-3-1b-it: no layer_types, the
// window pattern implied or given by sliding_window_pattern, the sliding
// layers' RoPE base in rope_local_base_freq) and as Transformers 5's
// save_pretrained does (layer_types, rope_parameters per layer type).
func TestGemmaConfigs(t *testing.T) {
	type want struct {
		theta, localTheta         float64
		scaling, localScaling     *RopeScaling
		scalar, attnCap, finalCap float64
		window                    int
		sliding                   []int // layers that slide
		tied                      bool
	}
	every := func(n, period int) []int {
		var s []int
		for i := 0; i < n; i++ {
			if (i+1)%period != 0 {
				s = append(s, i)
			}
		}
		return s
	}
	cases := map[string]want{
		"gemma2.json":         {10000, 0, nil, nil, 256, 50, 30, 4096, every(26, 2), true},
		"gemma3_text.json":    {1e6, 10000, nil, nil, 256, 0, 0, 512, every(26, 6), true},
		"gemma3_text_v5.json": {1e6, 10000, &RopeScaling{Type: "linear", Factor: 8}, nil, 24, 0, 20, 8, []int{0, 2}, true},
	}
	for file, w := range cases {
		t.Run(file, func(t *testing.T) {
			c, err := LoadConfig(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			var sliding []int
			for l, win := range c.Windows {
				if win != 0 {
					sliding = append(sliding, l)
					if win != w.window {
						t.Errorf("layer %d window %d, want %d", l, win, w.window)
					}
				}
			}
			got := want{c.RopeTheta, c.LocalRopeTheta, c.RopeScaling, c.LocalRopeScaling, c.QueryPreAttnScalar,
				c.AttnSoftcap, c.FinalSoftcap, c.SlidingWindow, sliding, c.TieWordEmbeddings}
			if !reflect.DeepEqual(got, w) {
				t.Errorf("got  %+v\nwant %+v", got, w)
			}
			if c.HiddenAct != "gelu_pytorch_tanh" || len(c.Windows) != c.NumLayers {
				t.Errorf("activation %q, %d windows for %d layers", c.HiddenAct, len(c.Windows), c.NumLayers)
			}
		})
	}
	// A layer type drafter does not know is refused by name and layer.
	p := writeConfig(t, map[string]any{"model_type": "gemma2", "architectures": []any{"Gemma2ForCausalLM"}, "num_hidden_layers": 2,
		"layer_types": []any{"sliding_attention", "chunked_attention"}})
	if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), `"layer_types": layer 1 is chunked_attention`) {
		t.Errorf("want layer 1's type refused, got %v", err)
	}
	p = writeConfig(t, map[string]any{"model_type": "gemma2", "architectures": []any{"Gemma2ForCausalLM"}, "hidden_activation": "gelu"})
	if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), `"hidden_activation": "gelu" is not supported`) {
		t.Errorf("want the activation refused, got %v", err)
	}
}

// TestPhi3Configs reads Phi-3-mini-128k's and Phi-4-mini's configs as the
// Hub has them (longrope scaling with its factors, original maxima at the
// top level, Phi-4-mini's partial_rotary_factor 0.75): the attention factor
// Transformers derives, √(1+ln 32/ln 4096), and the fused tensors.
func TestPhi3Configs(t *testing.T) {
	for file, rot := range map[string]int{"phi3_longrope.json": 96, "phi4_mini.json": 96} {
		c, err := LoadConfig(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		r := c.RopeScaling
		if c.RotaryDims != rot || r == nil || r.Type != "longrope" || r.OriginalMaxPositions != 4096 || r.Factor != 32 ||
			len(r.ShortFactor) != 48 || len(r.LongFactor) != 48 || r.LongFactor[1] != 1.6 {
			t.Fatalf("%s: rotary dims %d, scaling %+v", file, c.RotaryDims, r)
		}
		if want := math.Sqrt(1 + math.Log(32)/math.Log(4096)); math.Abs(r.AttnFactor-want) > 1e-15 {
			t.Errorf("%s: attention factor %v, want %v", file, r.AttnFactor, want)
		}
		for _, w := range c.Windows {
			if w != 262144 {
				t.Fatalf("%s: windows %v", file, c.Windows)
			}
		}
		shapes := c.TensorShapes()
		q, kv := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
		if s := shapes["model.layers.3.self_attn.qkv_proj.weight"]; !reflect.DeepEqual(s, []int{q + 2*kv, c.HiddenSize}) {
			t.Errorf("%s: qkv_proj shape %v", file, s)
		}
		if s := shapes["model.layers.3.mlp.gate_up_proj.weight"]; !reflect.DeepEqual(s, []int{2 * c.IntermediateSize, c.HiddenSize}) {
			t.Errorf("%s: gate_up_proj shape %v", file, s)
		}
		if _, ok := shapes["model.layers.3.self_attn.q_proj.weight"]; ok {
			t.Errorf("%s: lists q_proj beside qkv_proj", file)
		}
	}
	// partial_rotary_factor is refused where the family does not rotate part of a head.
	p := writeConfig(t, map[string]any{"partial_rotary_factor": 0.5})
	if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), `"partial_rotary_factor": 0.5 is not supported for model_type llama`) {
		t.Errorf("want partial_rotary_factor refused for llama, got %v", err)
	}
	// Factors of another length than rotary dims / 2.
	p = writeConfig(t, map[string]any{"model_type": "phi3", "architectures": []any{"Phi3ForCausalLM"}, "original_max_position_embeddings": 1024,
		"rope_scaling": map[string]any{"type": "longrope", "short_factor": []any{1, 1}, "long_factor": []any{1, 1}}})
	if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), "short_factor: expected a list of 8 numbers") {
		t.Errorf("want the factors' length refused, got %v", err)
	}
}

// TestMoEConfigs reads Mixtral-8x7B's and Qwen3-30B-A3B's configs as the
// Hub has them: their experts, the published parameter count of
// Mixtral-8x7B (46,702,792,704) from the tensors Tensors lists, and
// Qwen3-MoE's dense layers from mlp_only_layers and decoder_sparse_step.
func TestMoEConfigs(t *testing.T) {
	c, err := LoadConfig("testdata/mixtral.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Experts != 8 || c.TopK != 2 || c.ExpertIntermediate != 14336 || !c.NormTopK || c.Window(0) != 0 {
		t.Fatalf("mixtral: %d experts, top %d, width %d, renormalised %v, window %d", c.Experts, c.TopK, c.ExpertIntermediate, c.NormTopK, c.Window(0))
	}
	if n := c.NumParams(); n != 46702792704 {
		t.Errorf("mixtral-8x7b: %d parameters, want 46702792704", n)
	}
	shapes := c.TensorShapes()
	if s := shapes["model.layers.31.block_sparse_moe.experts.7.w2.weight"]; !reflect.DeepEqual(s, []int{4096, 14336}) {
		t.Errorf("mixtral expert 7's w2: %v", s)
	}
	if _, ok := shapes["model.layers.0.mlp.gate_proj.weight"]; ok {
		t.Error("mixtral lists a dense MLP")
	}
	c, err = LoadConfig("testdata/qwen3_moe.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Experts != 128 || c.TopK != 8 || c.ExpertIntermediate != 768 || !c.NormTopK || len(c.Sparse) != 48 || !c.Sparse[0] || !c.Sparse[47] {
		t.Fatalf("qwen3_moe: %d experts, top %d, width %d, renormalised %v, sparse %v", c.Experts, c.TopK, c.ExpertIntermediate, c.NormTopK, c.Sparse)
	}
	p := writeConfig(t, map[string]any{"model_type": "qwen3_moe", "architectures": []any{"Qwen3MoeForCausalLM"}, "num_experts": 4,
		"num_experts_per_tok": 2, "moe_intermediate_size": 8, "mlp_only_layers": []any{0}, "decoder_sparse_step": 2})
	c, err = LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, true, false, true}; !reflect.DeepEqual(c.Sparse, want) || c.NormTopK {
		t.Errorf("sparse layers %v (want %v), norm_topk_prob %v (absent: false)", c.Sparse, want, c.NormTopK)
	}
	if s := c.TensorShapes()["model.layers.0.mlp.gate_proj.weight"]; s == nil {
		t.Error("layer 0 in mlp_only_layers has no dense MLP")
	}
	for _, bad := range []map[string]any{
		{"num_experts_per_tok": 5},
		{"mlp_only_layers": []any{9}},
		{"num_experts": nil},
	} {
		e := map[string]any{"model_type": "qwen3_moe", "architectures": []any{"Qwen3MoeForCausalLM"}, "num_experts": 4,
			"num_experts_per_tok": 2, "moe_intermediate_size": 8}
		for k, v := range bad {
			e[k] = v
		}
		if _, err := LoadConfig(writeConfig(t, e)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestDeepseekV3Config reads DeepSeek-V3's config as the Hub has it: the
// latent attention's widths, yarn (factor 40, both mscales 1: attention
// factor 1), the group-limited routing, three dense layers, one shared
// expert, the multi-token-prediction layer to ignore, and the rotary
// width Transformers uses (qk_rope_head_dim).
func TestDeepseekV3Config(t *testing.T) {
	c, err := LoadConfig("testdata/deepseek_v3.json")
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(c.QLoraRank, c.KVLoraRank, c.QKNope, c.QKRope, c.VHead, c.RopeInterleave, c.HeadDim, c.RotaryDims,
		c.Experts, c.TopK, c.Groups, c.TopKGroups, c.RoutedScaling, c.SharedIntermediate, c.ExtraLayers, c.Sparse[2], c.Sparse[3])
	if want := "1536 512 128 64 128 true 64 64 256 8 8 4 2.5 2048 1 false true"; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	r := c.RopeScaling
	if r == nil || r.Type != "yarn" || r.Factor != 40 || r.OriginalMaxPositions != 4096 || r.AttnFactor != 1 || r.MScaleAll != 1 || r.BetaFast != 32 || !r.Truncate {
		t.Fatalf("rope scaling %+v", r)
	}
	shapes := c.TensorShapes()
	for name, want := range map[string][]int{
		"model.layers.0.self_attn.q_b_proj.weight":           {128 * 192, 1536},
		"model.layers.0.self_attn.kv_a_proj_with_mqa.weight": {576, 7168},
		"model.layers.0.self_attn.kv_b_proj.weight":          {128 * 256, 512},
		"model.layers.0.self_attn.o_proj.weight":             {7168, 128 * 128},
		"model.layers.0.mlp.gate_proj.weight":                {18432, 7168},
		"model.layers.3.mlp.gate.e_score_correction_bias":    {256},
		"model.layers.3.mlp.shared_experts.down_proj.weight": {7168, 2048},
		"model.layers.60.mlp.experts.255.up_proj.weight":     {2048, 7168},
	} {
		if !reflect.DeepEqual(shapes[name], want) {
			t.Errorf("%s: %v, want %v", name, shapes[name], want)
		}
	}
	if !extraLayer(c, "model.layers.61.eh_proj.weight") || extraLayer(c, "model.layers.62.eh_proj.weight") {
		t.Error("layer 61 (the MTP layer) must be ignored, layer 62 not")
	}
}

// TestPublishedParameterCounts: the tensors Tensors lists for real
// configs add up to the parameter counts their Hugging Face model cards
// give (an independent check of every family's tensor list and shapes).
func TestPublishedParameterCounts(t *testing.T) {
	for file, want := range map[string]int64{
		"mixtral.json":       46702792704, // Mixtral-8x7B
		"qwen3_moe.json":     30532122624, // Qwen3-30B-A3B
		"gemma2.json":        2614341888,  // gemma-2-2b
		"gemma3_text.json":   999885952,   // gemma-3-1b
		"phi3_longrope.json": 3821079552,  // Phi-3-mini-128k
	} {
		c, err := LoadConfig(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		if n := c.NumParams(); n != want {
			t.Errorf("%s: %d parameters, the model card says %d", file, n, want)
		}
	}
}
