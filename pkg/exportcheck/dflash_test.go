package exportcheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// The DFlash and DSpark fixtures are written by hand from the key and tensor
// lists of methods.md sections 3 and 4 (z-lab's and DeepSpec's native
// layouts, speculators' configs), not by drafter's exporters: the rules
// under test are this package's, and the exporters are written elsewhere.
//
// The tiny draft: hidden 8, 2 heads of 4 (1 kv head), intermediate 12,
// vocabulary 16 (mask token 15), 2 decoder layers, block 4, for a target of
// 8 layers whose outputs 1 and 4 (hidden_states 2 and 5) are the features.
const (
	tH, tNQ, tNKV, tHD, tI, tV, tLayers = 8, 2, 1, 4, 12, 16, 2
	tTarget, tBlock, tMask, tRank       = 8, 4, 15, 3
)

// tHF are the feature layers as hidden_states indices; tOut as layer outputs.
var tHF, tOut = []int{2, 5}, []int{1, 4}

// The four block-drafter layouts the tests build.
const (
	dflashNativeL = "dflash native"
	dflashSpecsL  = "dflash speculators"
	dsparkNativeL = "dspark native"
	dsparkSpecsL  = "dspark speculators"
)

var blockLayouts = []string{dflashNativeL, dflashSpecsL, dsparkNativeL, dsparkSpecsL}

// geometryKeys are the Qwen3 geometry every block config carries.
func geometryKeys() map[string]any {
	return map[string]any{
		"model_type": "qwen3", "hidden_size": tH, "num_hidden_layers": tLayers, "num_attention_heads": tNQ,
		"num_key_value_heads": tNKV, "head_dim": tHD, "intermediate_size": tI, "rms_norm_eps": 1e-6,
		"rope_theta": 1e6, "max_position_embeddings": 64, "vocab_size": tV, "hidden_act": "silu",
		"layer_types": []string{"full_attention", "full_attention"}, "tie_word_embeddings": false,
	}
}

// blockConfig is a correct config.json for layout.
func blockConfig(layout string) map[string]any {
	m := map[string]any{}
	switch layout {
	case dflashNativeL, dsparkNativeL:
		m = geometryKeys()
		m["num_target_layers"], m["block_size"] = tTarget, tBlock
		if layout == dflashNativeL {
			m["architectures"] = []string{"DFlashDraftModel"}
			m["dflash_config"] = map[string]any{"mask_token_id": tMask, "target_layer_ids": tOut}
		} else {
			m["architectures"] = []string{"Qwen3DSparkModel"}
			m["mask_token_id"], m["target_layer_ids"], m["num_anchors"] = tMask, tOut, 512
			m["markov_rank"], m["markov_head_type"] = tRank, "vanilla"
			m["enable_confidence_head"], m["confidence_head_with_markov"] = true, true
		}
	case dflashSpecsL, dsparkSpecsL:
		tlc := geometryKeys()
		tlc["architectures"] = []string{"Qwen3ForCausalLM"}
		m["transformer_layer_config"] = tlc
		m["aux_hidden_state_layer_ids"], m["mask_token_id"], m["block_size"] = tHF, tMask, tBlock
		m["draft_vocab_size"], m["sliding_window_non_causal"] = tV, true
		drafts := tBlock - 1
		m["speculators_model_type"], m["sample_from_anchor"] = "dflash", false
		if layout == dsparkSpecsL {
			drafts = tBlock
			m["speculators_model_type"], m["sample_from_anchor"] = "dspark", true
			m["markov_rank"], m["markov_head_type"] = tRank, "vanilla"
			m["enable_confidence_head"], m["confidence_head_with_markov"] = true, true
		}
		m["speculators_config"] = map[string]any{
			"algorithm":        m["speculators_model_type"],
			"proposal_methods": []any{map[string]any{"proposal_type": "greedy", "speculative_tokens": drafts}},
			"verifier":         map[string]any{"name_or_path": "tiny-target"},
		}
	}
	return m
}

// blockTensors is a correct weights file for layout, by name and shape.
func blockTensors(layout string) map[string][]int {
	ts := map[string][]int{
		"fc.weight": {tH, len(tOut) * tH}, "hidden_norm.weight": {tH}, "norm.weight": {tH},
	}
	for i := range tLayers {
		p := fmt.Sprintf("layers.%d.", i)
		for n, s := range map[string][]int{
			"input_layernorm.weight": {tH}, "post_attention_layernorm.weight": {tH},
			"self_attn.q_proj.weight": {tNQ * tHD, tH}, "self_attn.k_proj.weight": {tNKV * tHD, tH},
			"self_attn.v_proj.weight": {tNKV * tHD, tH}, "self_attn.o_proj.weight": {tH, tNQ * tHD},
			"self_attn.q_norm.weight": {tHD}, "self_attn.k_norm.weight": {tHD},
			"mlp.gate_proj.weight": {tI, tH}, "mlp.up_proj.weight": {tI, tH}, "mlp.down_proj.weight": {tH, tI},
		} {
			ts[p+n] = s
		}
	}
	if layout == dsparkNativeL || layout == dsparkSpecsL {
		ts["embed_tokens.weight"], ts["lm_head.weight"] = []int{tV, tH}, []int{tV, tH}
		ts["markov_head.markov_w1.weight"], ts["markov_head.markov_w2.weight"] = []int{tV, tRank}, []int{tV, tRank}
		ts["confidence_head.proj.weight"], ts["confidence_head.proj.bias"] = []int{1, tH + tRank}, []int{1}
	}
	return ts
}

// writeJSON writes v as JSON to path.
func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeTensors writes F32 tensors of the shapes given to dir/model.safetensors.
func writeTensors(t *testing.T, dir string, shapes map[string][]int) {
	t.Helper()
	var list []safetensors.Tensor
	for n, s := range shapes {
		size := 1
		for _, d := range s {
			size *= d
		}
		v := make([]float32, size)
		for i := range v {
			v[i] = float32(i%5)/5 - 0.4
		}
		list = append(list, safetensors.F32Tensor(n, s, v))
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), list, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
}

// blockExport writes a correct export of layout to root/<method>/ and
// returns the folder; edit, when not nil, changes the config and tensors
// before they are written.
func blockExport(t *testing.T, root, layout string, edit func(cfg map[string]any, ts map[string][]int)) string {
	t.Helper()
	cfg, ts := blockConfig(layout), blockTensors(layout)
	if edit != nil {
		edit(cfg, ts)
	}
	dir := filepath.Join(root, strings.Fields(layout)[0])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(dir, configFile), cfg)
	writeTensors(t, dir, ts)
	return dir
}

// blockProvenance is the drafter.json these checks read for a block
// drafter (the fields the DFlash and DSpark trainers are expected to
// record), for layout.
func blockProvenance(layout string) map[string]any {
	p := map[string]any{
		"method": strings.Fields(layout)[0], "target_num_hidden_layers": tTarget, "feature_layers": tHF,
		"block_size": tBlock, "mask_token_id": tMask, "causal": false,
		"sample_from_anchor": strings.HasPrefix(layout, "dspark"),
	}
	if strings.HasPrefix(layout, "dspark") {
		p["markov_rank"], p["enable_confidence_head"], p["confidence_head_with_markov"] = tRank, true, true
	}
	return p
}

// withProvenance writes drafter.json beside the export in dir (in its
// parent, where drafter train writes it), edited by edit when not nil.
func withProvenance(t *testing.T, dir, layout string, edit func(p map[string]any)) {
	t.Helper()
	p := blockProvenance(layout)
	if edit != nil {
		edit(p)
	}
	writeJSON(t, filepath.Join(filepath.Dir(dir), "drafter.json"), p)
}

// loaders are the engines check-export checks each block layout for.
var loaders = map[string][]Engine{
	dflashNativeL: {VLLM, SGLang, TRTLLM},
	dflashSpecsL:  {VLLM},
	dsparkNativeL: {VLLM, SGLang},
	dsparkSpecsL:  {VLLM},
}

func TestBlockDraftersPass(t *testing.T) {
	for _, layout := range blockLayouts {
		for _, prov := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/drafter.json=%v", layout, prov), func(t *testing.T) {
				dir := blockExport(t, t.TempDir(), layout, nil)
				if prov {
					withProvenance(t, dir, layout, nil)
				}
				r := check(t, dir)
				passes(t, r)
				f := strings.Fields(layout)
				if len(r.Exports) != 1 || r.Exports[0].Method != f[0] || r.Exports[0].Layout != f[1] {
					t.Fatalf("exports %+v, want one %s", r.Exports, layout)
				}
				if !slices.Equal(r.Exports[0].Engines, loaders[layout]) {
					t.Fatalf("checked for %v, want %v", r.Exports[0].Engines, loaders[layout])
				}
				// Each engine on its own: those that load the layout pass,
				// the others are an error saying why.
				for _, e := range Engines() {
					r := check(t, dir, e)
					if slices.Contains(loaders[layout], e) {
						passes(t, r)
					} else if !r.Failed() {
						t.Fatalf("%s asked for by name on a layout it does not load: no error", e)
					}
				}
				// The training run's folder (drafter.json and the export
				// beneath) is found and checked too.
				if prov {
					passes(t, check(t, filepath.Dir(dir)))
				}
			})
		}
	}
}

func TestTRTLLMRulesForDSparkReportedUnverified(t *testing.T) {
	dir := blockExport(t, t.TempDir(), dsparkNativeL, nil)
	caught(t, check(t, dir, TRTLLM), TRTLLM, "", "not read", "unverified")
	// For DFlash it names what it cannot check and what to pass instead.
	dir = blockExport(t, t.TempDir(), dflashNativeL, nil)
	withProvenance(t, dir, dflashNativeL, nil)
	r := check(t, dir, TRTLLM)
	passes(t, r)
	if !slices.ContainsFunc(r.Findings, func(f Finding) bool {
		return f.Level == Note && strings.Contains(f.Msg, "not verified") && strings.Contains(f.Msg, "[1 4]") && strings.Contains(f.Msg, "max_draft_len 3")
	}) {
		t.Fatalf("no note on TensorRT-LLM's unverified reading:\n%s", strings.Join(r.Lines(), "\n"))
	}
}

// TestTargetLayerIDsOffByOne writes each spelling one off in both
// directions beside a drafter.json that records the trained hidden_states.
func TestTargetLayerIDsOffByOne(t *testing.T) {
	for _, c := range []struct {
		layout, key string
		engines     []Engine
		set         func(cfg map[string]any, ids []int)
		ids         []int // the ids as written (tHF or tOut shifted)
	}{
		{dflashNativeL, "dflash_config.target_layer_ids", []Engine{VLLM, SGLang},
			func(cfg map[string]any, ids []int) { cfg["dflash_config"].(map[string]any)["target_layer_ids"] = ids }, tOut},
		// SGLang's DSpark worker's capture mapping was not read: vLLM only.
		{dsparkNativeL, "target_layer_ids", []Engine{VLLM},
			func(cfg map[string]any, ids []int) { cfg["target_layer_ids"] = ids }, tOut},
		{dflashSpecsL, "aux_hidden_state_layer_ids", []Engine{VLLM},
			func(cfg map[string]any, ids []int) { cfg["aux_hidden_state_layer_ids"] = ids }, tHF},
		{dsparkSpecsL, "aux_hidden_state_layer_ids", []Engine{VLLM},
			func(cfg map[string]any, ids []int) { cfg["aux_hidden_state_layer_ids"] = ids }, tHF},
	} {
		for _, d := range []int{+1, -1} {
			t.Run(fmt.Sprintf("%s/%+d", c.layout, d), func(t *testing.T) {
				written := shift(c.ids, d)
				dir := blockExport(t, t.TempDir(), c.layout, func(cfg map[string]any, _ map[string][]int) { c.set(cfg, written) })
				withProvenance(t, dir, c.layout, nil)
				r := check(t, dir)
				for _, e := range c.engines {
					caught(t, r, e, c.key, fmt.Sprintf("captures hidden_states %v", shift(tHF, d)), fmt.Sprintf("describes %v", tHF), fmt.Sprintf("off by %+d", d))
				}
			})
		}
	}
}

// TestLayerIDsEnginesDisagree: a native DFlash config that also carries the
// EAGLE-3 key, written in the output-of-layer spelling: vLLM captures by it
// (verbatim hidden_states), SGLang by dflash_config; no drafter.json needed.
func TestLayerIDsEnginesDisagree(t *testing.T) {
	dir := blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) {
		cfg["eagle_aux_hidden_state_layer_ids"] = tOut
	})
	r := check(t, dir)
	caught(t, r, VLLM, "eagle_aux_hidden_state_layer_ids", "captures hidden_states [1 4]", "describes [2 5]", "off by -1")
	if slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Level == Error && slices.Contains(f.Engines, SGLang) }) {
		t.Fatalf("SGLang reads dflash_config's ids:\n%s", strings.Join(r.Lines(), "\n"))
	}
}

func TestLayerIDsAbsentUsesDefaults(t *testing.T) {
	// Without ids, z-lab and SGLang take build_target_layer_ids(L, n)
	// (outputs [1, 5] for L=8, n=2, hidden_states [2 6]: trained here), but
	// vLLM falls back to the target's EAGLE-3 default (2, L//2, L-3) =
	// [2 4 5]: caught for vLLM only.
	dir := blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) {
		delete(cfg["dflash_config"].(map[string]any), "target_layer_ids")
	})
	withProvenance(t, dir, dflashNativeL, func(p map[string]any) { p["feature_layers"] = []int{2, 6} })
	r := check(t, dir)
	caught(t, r, VLLM, "dflash_config.target_layer_ids", "captures hidden_states [2 4 5]", "describes [2 6]")
	// The same export beside a run that trained other layers: SGLang's
	// default is caught too, and says where it comes from.
	withProvenance(t, dir, dflashNativeL, nil)
	caught(t, check(t, dir), SGLang, "dflash_config.target_layer_ids", "captures hidden_states [2 6]", "build_target_layer_ids(num_target_layers 8, 2 draft layers)", "describes [2 5]")
	if slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Level == Error && slices.Contains(f.Engines, SGLang) }) {
		t.Fatalf("SGLang's default is the trained layers:\n%s", strings.Join(r.Lines(), "\n"))
	}
}

func TestNumTargetLayersAbsentForSGLang(t *testing.T) {
	dir := blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) { delete(cfg, "num_target_layers") })
	withProvenance(t, dir, dflashNativeL, nil)
	r := check(t, dir, SGLang)
	caught(t, r, SGLang, "num_target_layers", "draft's num_hidden_layers (2)", "the target has 8")
	// Its range check then refuses output 4 of a "2-layer" target.
	caught(t, r, SGLang, "dflash_config.target_layer_ids", "outside [0, 2)")
}

func TestNumTargetLayersAgainstDrafterJSON(t *testing.T) {
	dir := blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) { cfg["num_target_layers"] = 36 })
	withProvenance(t, dir, dflashNativeL, nil)
	caught(t, check(t, dir), SGLang, "num_target_layers", "36", "records a target of 8 layers")
}

func TestDeepSpecEmbeddingID(t *testing.T) {
	// DeepSpec allows -1 (the embedding output, hidden_states 0): vLLM
	// captures hidden_states 0 as trained.
	dir := blockExport(t, t.TempDir(), dsparkNativeL, func(cfg map[string]any, _ map[string][]int) { cfg["target_layer_ids"] = []int{-1, 4} })
	withProvenance(t, dir, dsparkNativeL, func(p map[string]any) { p["feature_layers"] = []int{0, 5} })
	passes(t, check(t, dir))
	// Written beside a run that trained on hidden_states 1: off by one.
	withProvenance(t, dir, dsparkNativeL, func(p map[string]any) { p["feature_layers"] = []int{1, 5} })
	caught(t, check(t, dir), VLLM, "target_layer_ids", "captures hidden_states [0 5]", "describes [1 5]")
	// The z-lab spelling has no -1: SGLang's DFlash parser refuses it.
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) {
		cfg["dflash_config"].(map[string]any)["target_layer_ids"] = []int{-1, 4}
	})
	r := check(t, dir)
	caught(t, r, SGLang, "dflash_config.target_layer_ids", "id -1 outside [0, 8)")
	caught(t, r, VLLM, "dflash_config.target_layer_ids", "outside")
}

func TestMaskTokenID(t *testing.T) {
	dir := blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) {
		cfg["dflash_config"].(map[string]any)["mask_token_id"] = tV
	})
	r := check(t, dir)
	for _, e := range Engines() {
		caught(t, r, e, "dflash_config.mask_token_id", "16 is outside the vocabulary [0, 16)")
	}
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) {
		delete(cfg["dflash_config"].(map[string]any), "mask_token_id")
	})
	r = check(t, dir)
	caught(t, r, SGLang, "dflash_config.mask_token_id", "absent", "<|MASK|>")
	caught(t, r, VLLM, "dflash_config.mask_token_id", "absent")
	caught(t, r, TRTLLM, "dflash_config.mask_token_id", "absent", "DFlashDecodingConfig.mask_token_id")
	// Present but another row than the one trained.
	dir = blockExport(t, t.TempDir(), dsparkNativeL, func(cfg map[string]any, _ map[string][]int) { cfg["mask_token_id"] = 14 })
	withProvenance(t, dir, dsparkNativeL, nil)
	caught(t, check(t, dir), VLLM, "mask_token_id", "records mask_token_id 15")
	dir = blockExport(t, t.TempDir(), dflashSpecsL, func(cfg map[string]any, _ map[string][]int) { delete(cfg, "mask_token_id") })
	caught(t, check(t, dir), VLLM, "mask_token_id", "KeyError")
	dir = blockExport(t, t.TempDir(), dflashSpecsL, func(cfg map[string]any, _ map[string][]int) { cfg["mask_token_id"] = -1 })
	caught(t, check(t, dir), VLLM, "mask_token_id", "-1 is outside the vocabulary")
}

func TestBlockSizeMissing(t *testing.T) {
	dir := blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) { delete(cfg, "block_size") })
	withProvenance(t, dir, dflashNativeL, nil)
	r := check(t, dir)
	caught(t, r, SGLang, "block_size", "SGLang runs blocks of 16", "describes 4")
	caught(t, r, VLLM, "block_size", "absent", "z-lab's DFlashDraftModel")
	// Without drafter.json nothing says which block was trained.
	os.Remove(filepath.Join(filepath.Dir(dir), "drafter.json"))
	caught(t, check(t, dir), SGLang, "block_size", "absent everywhere", "16")
	// Only in dflash_config: SGLang reads it, z-lab does not.
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) {
		delete(cfg, "block_size")
		cfg["dflash_config"].(map[string]any)["block_size"] = tBlock
	})
	r = check(t, dir)
	caught(t, r, VLLM, "block_size", "only in dflash_config")
	if slices.ContainsFunc(r.Findings, func(f Finding) bool { return strings.Contains(f.Msg, "SGLang runs blocks") }) {
		t.Fatalf("SGLang reads dflash_config.block_size:\n%s", strings.Join(r.Lines(), "\n"))
	}
	// DSpark's reference is DeepSpec's config.
	dir = blockExport(t, t.TempDir(), dsparkNativeL, func(cfg map[string]any, _ map[string][]int) { delete(cfg, "block_size") })
	withProvenance(t, dir, dsparkNativeL, nil)
	r = check(t, dir)
	caught(t, r, VLLM, "block_size", "absent", "DeepSpec's build_draft_config")
	caught(t, r, SGLang, "block_size", "Qwen3DSparkModel refuses the config")
	// The two spellings disagreeing.
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) {
		cfg["dflash_config"].(map[string]any)["block_size"] = 8
	})
	caught(t, check(t, dir), SGLang, "dflash_config.block_size", "8, but the top-level block_size is 4")
	// Speculators: the default num_speculative_tokens against the block.
	dir = blockExport(t, t.TempDir(), dsparkSpecsL, func(cfg map[string]any, _ map[string][]int) {
		cfg["speculators_config"].(map[string]any)["proposal_methods"] = []any{map[string]any{"speculative_tokens": tBlock - 1}}
	})
	caught(t, check(t, dir), VLLM, "speculators_config.proposal_methods[0].speculative_tokens", "3, but block_size 4", "drafts 4 tokens")
}

func TestCausalFlagAgainstDrafterJSON(t *testing.T) {
	// Trained with a causal block mask; the native config says nothing, so
	// vLLM and SGLang run full-attention layers bidirectional.
	dir := blockExport(t, t.TempDir(), dflashNativeL, nil)
	withProvenance(t, dir, dflashNativeL, func(p map[string]any) { p["causal"] = true })
	r := check(t, dir)
	caught(t, r, VLLM, "dflash_config.causal", "runs layer 0's block attention bidirectional", "describes causal")
	caught(t, r, SGLang, "dflash_config.causal", "bidirectional", "reads no causal flag")
	// Written in dflash_config: vLLM follows it, SGLang does not.
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) {
		cfg["dflash_config"].(map[string]any)["causal"] = true
	})
	withProvenance(t, dir, dflashNativeL, func(p map[string]any) { p["causal"] = true })
	r = check(t, dir)
	caught(t, r, SGLang, "dflash_config.causal", "bidirectional", "describes causal")
	if slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Level == Error && slices.Contains(f.Engines, VLLM) }) {
		t.Fatalf("vLLM applies dflash_config.causal:\n%s", strings.Join(r.Lines(), "\n"))
	}
	// Trained bidirectional but the flag says causal.
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) {
		cfg["dflash_config"].(map[string]any)["causal"] = true
	})
	withProvenance(t, dir, dflashNativeL, nil)
	caught(t, check(t, dir), VLLM, "dflash_config.causal", "runs layer 0's block attention causal", "describes bidirectional")
	// is_causal, read first by vLLM and ignored by SGLang, states the
	// export's mask without drafter.json.
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) { cfg["is_causal"] = true })
	r = check(t, dir)
	caught(t, r, SGLang, "dflash_config.causal", "bidirectional", "describes causal (is_causal)")
	if slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Level == Error && slices.Contains(f.Engines, VLLM) }) {
		t.Fatalf("vLLM reads is_causal:\n%s", strings.Join(r.Lines(), "\n"))
	}
	// Speculators: sliding_window_non_causal false (the speculators
	// default) makes vLLM's update_dflash write causal for every layer.
	for _, layout := range []string{dflashSpecsL, dsparkSpecsL} {
		dir = blockExport(t, t.TempDir(), layout, func(cfg map[string]any, _ map[string][]int) { cfg["sliding_window_non_causal"] = false })
		withProvenance(t, dir, layout, nil)
		caught(t, check(t, dir), VLLM, "sliding_window_non_causal", "runs layer 0's block attention causal", "update_dflash")
	}
}

func TestDFlashExportWithDSparkLabels(t *testing.T) {
	// sample_from_anchor in a z-lab config.
	dir := blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) {
		cfg["dflash_config"].(map[string]any)["sample_from_anchor"] = true
	})
	r := check(t, dir)
	caught(t, r, VLLM, "dflash_config.sample_from_anchor", "laid out as dflash", "belong to dspark")
	// DSpark's heads shipped in a DFlash export.
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(_ map[string]any, ts map[string][]int) {
		ts["markov_head.markov_w1.weight"], ts["markov_head.markov_w2.weight"] = []int{tV, tRank}, []int{tV, tRank}
	})
	r = check(t, dir)
	caught(t, r, SGLang, "markov_head.markov_w1.weight", "belong to dspark")
	caught(t, r, VLLM, "markov_head.markov_w1.weight", "DSpark head in a DFlash export", "refuses")
	caught(t, r, SGLang, "markov_head.markov_w2.weight", "DSpark head in a DFlash export", "without a word")
	// drafter.json says the run trained DSpark.
	dir = blockExport(t, t.TempDir(), dflashNativeL, nil)
	withProvenance(t, dir, dflashNativeL, func(p map[string]any) { p["method"], p["sample_from_anchor"] = "dspark", true })
	r = check(t, dir)
	caught(t, r, VLLM, "architectures", "drafts with DFlash's labels", "describes DSpark's shifted labels")
	caught(t, r, SGLang, "architectures", "drafts with DFlash's labels")
	// Speculators DFlash with the DSpark flag: update_dflash never reads it.
	dir = blockExport(t, t.TempDir(), dflashSpecsL, func(cfg map[string]any, _ map[string][]int) { cfg["sample_from_anchor"] = true })
	caught(t, check(t, dir), VLLM, "sample_from_anchor", "belong to dspark")
	withProvenance(t, dir, dflashSpecsL, func(p map[string]any) { p["sample_from_anchor"] = true })
	caught(t, check(t, dir), VLLM, "sample_from_anchor", "drafts with DFlash's labels", "never reads sample_from_anchor")
}

func TestDSparkExportWithDFlashLabels(t *testing.T) {
	// dspark_bonus_anchor true: vLLM runs DFlash's 1+N block.
	dir := blockExport(t, t.TempDir(), dsparkNativeL, func(cfg map[string]any, _ map[string][]int) { cfg["dspark_bonus_anchor"] = true })
	r := check(t, dir)
	caught(t, r, VLLM, "dspark_bonus_anchor", "laid out as dspark", "belong to dflash")
	caught(t, r, VLLM, "dspark_bonus_anchor", "drafts with DFlash's labels", "describes DSpark's shifted labels")
	// A DSpark config from a run drafter.json records as DFlash.
	dir = blockExport(t, t.TempDir(), dsparkNativeL, nil)
	withProvenance(t, dir, dsparkNativeL, func(p map[string]any) { p["method"], p["sample_from_anchor"] = "dflash", false })
	caught(t, check(t, dir), VLLM, "dspark_bonus_anchor", "drafts with DSpark's shifted labels", "describes DFlash's labels")
	// Speculators DSpark written with DFlash's flag.
	dir = blockExport(t, t.TempDir(), dsparkSpecsL, func(cfg map[string]any, _ map[string][]int) {
		cfg["sample_from_anchor"] = false
		cfg["speculators_config"].(map[string]any)["proposal_methods"] = []any{map[string]any{"speculative_tokens": tBlock - 1}}
	})
	caught(t, check(t, dir), VLLM, "sample_from_anchor", "laid out as dspark", "sample_from_anchor false")
	// Absent: vLLM builds disagree.
	dir = blockExport(t, t.TempDir(), dsparkSpecsL, func(cfg map[string]any, _ map[string][]int) { delete(cfg, "sample_from_anchor") })
	caught(t, check(t, dir), VLLM, "sample_from_anchor", "absent", "#48639")
}

func TestBlockTensorMissingOrExtra(t *testing.T) {
	for _, layout := range []string{dflashNativeL, dsparkNativeL, dflashSpecsL} {
		dir := blockExport(t, t.TempDir(), layout, func(_ map[string]any, ts map[string][]int) {
			delete(ts, "layers.1.mlp.down_proj.weight")
			ts["layers.0.self_attn.rotary_emb.inv_freq"] = []int{tHD / 2}
		})
		r := check(t, dir)
		caught(t, r, VLLM, "layers.1.mlp.down_proj.weight", "missing", "keeps its initial value")
		caught(t, r, VLLM, "layers.0.self_attn.rotary_emb.inv_freq", "refuses")
		if layout == dflashNativeL {
			caught(t, r, SGLang, "layers.1.mlp.down_proj.weight", "missing")
			caught(t, r, SGLang, "layers.0.self_attn.rotary_emb.inv_freq", "skips it without a word")
		}
	}
	// A layer more in the file than the config builds.
	dir := blockExport(t, t.TempDir(), dflashNativeL, func(_ map[string]any, ts map[string][]int) { ts["layers.2.input_layernorm.weight"] = []int{tH} })
	caught(t, check(t, dir), SGLang, "layers.2.input_layernorm.weight", "without a word")
	// SGLang has no own embedding or lm_head for a DFlash draft: a
	// full-vocabulary copy is noted, a reduced vocabulary is an error.
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(_ map[string]any, ts map[string][]int) { ts["lm_head.weight"] = []int{tV, tH} })
	r := check(t, dir)
	passes(t, r)
	if !slices.ContainsFunc(r.Findings, func(f Finding) bool {
		return f.Level == Note && f.Key == "lm_head.weight" && strings.Contains(f.Msg, "target's frozen copy")
	}) {
		t.Fatalf("no note on SGLang's own lm_head:\n%s", strings.Join(r.Lines(), "\n"))
	}
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, ts map[string][]int) {
		cfg["draft_vocab_size"] = 10
		ts["lm_head.weight"], ts["d2t"] = []int{10, tH}, []int{10}
	})
	r = check(t, dir)
	caught(t, r, SGLang, "lm_head.weight", "10-token")
	caught(t, r, VLLM, "d2t", "type F32", "integer")
	if slices.ContainsFunc(r.Findings, func(f Finding) bool {
		return f.Level == Error && slices.Contains(f.Engines, VLLM) && f.Key != "d2t"
	}) {
		t.Fatalf("vLLM loads an own lm_head and d2t:\n%s", strings.Join(r.Lines(), "\n"))
	}
	// A reduced vocabulary without d2t: vLLM reads draft id i as target id i.
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, ts map[string][]int) {
		cfg["draft_vocab_size"] = 10
		ts["lm_head.weight"] = []int{10, tH}
	})
	caught(t, check(t, dir), VLLM, "d2t", "missing", "draft_vocab_size 10 differs from vocab_size 16")
}

func TestBlockTensorWrongShape(t *testing.T) {
	// fc sized for 3 features, the config's ids name 2.
	dir := blockExport(t, t.TempDir(), dflashNativeL, func(_ map[string]any, ts map[string][]int) { ts["fc.weight"] = []int{tH, 3 * tH} })
	r := check(t, dir)
	for _, e := range []Engine{VLLM, SGLang} {
		caught(t, r, e, "fc.weight", "shape [8, 24]", "[8, 16]")
	}
	dir = blockExport(t, t.TempDir(), dsparkSpecsL, func(_ map[string]any, ts map[string][]int) { ts["layers.0.self_attn.q_norm.weight"] = []int{tH} })
	caught(t, check(t, dir), VLLM, "layers.0.self_attn.q_norm.weight", "shape [8]", "[4]", "head_dim")
	// target_hidden_size: vLLM sizes fc by it, SGLang by hidden_size.
	dir = blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, ts map[string][]int) {
		cfg["target_hidden_size"] = 12
		ts["fc.weight"] = []int{tH, 2 * 12}
	})
	r = check(t, dir)
	caught(t, r, SGLang, "fc.weight", "shape [8, 24]", "[8, 16]")
	if slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Level == Error && slices.Contains(f.Engines, VLLM) }) {
		t.Fatalf("vLLM sizes fc by target_hidden_size:\n%s", strings.Join(r.Lines(), "\n"))
	}
}

func TestLayerIDsOutsideTarget(t *testing.T) {
	// Output 8 of an 8-layer target does not exist (outputs are 0..7).
	dir := blockExport(t, t.TempDir(), dflashNativeL, func(cfg map[string]any, _ map[string][]int) {
		cfg["dflash_config"].(map[string]any)["target_layer_ids"] = []int{1, 8}
	})
	r := check(t, dir)
	caught(t, r, SGLang, "dflash_config.target_layer_ids", "id 8 outside [0, 8)")
	caught(t, r, VLLM, "dflash_config.target_layer_ids", "outside", "8 layers")
}

func TestMaskEmbedding(t *testing.T) {
	// A trained mask row shipped as a tensor: vLLM and SGLang both drop it.
	dir := blockExport(t, t.TempDir(), dflashNativeL, func(_ map[string]any, ts map[string][]int) { ts["mask_embedding"] = []int{tH} })
	r := check(t, dir)
	for _, e := range []Engine{VLLM, SGLang} {
		caught(t, r, e, "mask_embedding", "drops it without a word", "mask_embedding.pt")
	}
	// Shipped as vLLM's mask_embedding.pt: SGLang still never reads it.
	dir = blockExport(t, t.TempDir(), dflashNativeL, nil)
	if err := os.WriteFile(filepath.Join(dir, "mask_embedding.pt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = check(t, dir)
	caught(t, r, SGLang, "", "never reads mask_embedding.pt")
	if slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Level == Error && slices.Contains(f.Engines, VLLM) }) {
		t.Fatalf("vLLM reads mask_embedding.pt:\n%s", strings.Join(r.Lines(), "\n"))
	}
}
