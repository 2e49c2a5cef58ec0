package exportcheck

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// The EAGLE-3 layouts. Which engine loads which:
//
//   - native (LlamaForCausalLMEagle3, decoder keys midlayer.*): vLLM
//     (llama_eagle3.py maps midlayer. to layers.0.), SGLang
//     (python/sglang/srt/models/llama_eagle3.py, EntryClass
//     LlamaForCausalLMEagle3) and TensorRT-LLM's PyTorch backend
//     (tensorrt_llm/_torch/models/modeling_speculative.py, Eagle3ForCausalLM).
//   - speculators (speculators_model_type eagle3, geometry nested in
//     transformer_layer_config, decoder keys layers.0.*): vLLM, whose
//     SpeculatorsConfig (transformers_utils/configs/speculators/base.py)
//     flattens it. SGLang and TensorRT-LLM read the draft's config.json as a
//     flat Llama config: hidden_size and the rest would come from
//     LlamaConfig's defaults.
var (
	eagle3Native      = layout{method: "eagle3", name: "native", loads: []Engine{VLLM, SGLang, TRTLLM}}
	eagle3Speculators = layout{method: "eagle3", name: "speculators", loads: []Engine{VLLM},
		why: map[Engine]string{
			SGLang: "SGLang reads an EAGLE-3 draft's config.json as a flat Llama config (LlamaForCausalLMEagle3 in python/sglang/srt/models/llama_eagle3.py): the speculators layout nests its geometry in transformer_layer_config, so SGLang would build the layer from LlamaConfig's defaults; serve the native layout (drafter train eagle3 --format native)",
			TRTLLM: "TensorRT-LLM's Eagle3ForCausalLM (tensorrt_llm/_torch/models/modeling_speculative.py) reads the draft's config.json as a flat Llama config: the speculators layout nests its geometry in transformer_layer_config; serve the native layout (drafter train eagle3 --format native)",
		}}
)

func init() {
	eagle3Native.check = checkEAGLE3
	eagle3Speculators.check = checkEAGLE3
	eagle3Native.why = map[Engine]string{}
}

// The EAGLE-3.1 switches and norm_before_residual, as the config keys name
// them.
const (
	keyNormBeforeResidual = "norm_before_residual"
	keyNormBeforeFC       = "norm_before_fc"
	keyFCNorm             = "fc_norm"
	keyNormOutput         = "norm_output"
	keyLayerIDs           = "eagle_aux_hidden_state_layer_ids"
)

// switches are the four norm switches of an EAGLE-3 layer.
type switches struct{ normBeforeResidual, normBeforeFC, fcNorm, normOutput bool }

func (s switches) get(key string) bool {
	switch key {
	case keyNormBeforeResidual:
		return s.normBeforeResidual
	case keyNormBeforeFC:
		return s.normBeforeFC
	case keyFCNorm:
		return s.fcNorm
	}
	return s.normOutput
}

// e3view is what one engine builds from an EAGLE-3 export's config.json.
type e3view struct {
	engine Engine
	// Geometry: draft hidden H, intermediate I, heads, kv heads, head dim,
	// target vocabulary V, draft vocabulary N, target hidden TH, decoder
	// layers; tie is tie_word_embeddings.
	H, I, nq, nkv, hd, V, N, TH, layers int
	tie                                 bool
	// numAux is the number of target features fc's input holds.
	numAux int
	sw     switches
	// ids are the Hugging Face hidden_states indices the engine captures
	// from the draft's config, nil when it takes its own default (then
	// idsDefault says what it is) ; idsKey names the key read.
	ids    []int
	idsKey string
	// captured is the number of features the engine captures.
	captured int
}

// llamaDefaults are transformers' LlamaConfig defaults, which every engine
// gets for a key an EAGLE-3 config.json lacks (the engines parse it into a
// LlamaConfig or PretrainedConfig and read attributes).
var llamaDefaults = map[string]int{
	"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
	"vocab_size": 32000, "num_hidden_layers": 32,
}

// checkEAGLE3 checks an EAGLE-3 export folder for c.engines.
func checkEAGLE3(c *checker) {
	cfgPath := filepath.Join(c.dir, configFile)
	top, err := readConfig(cfgPath)
	if err != nil {
		c.add(Error, c.engines, cfgPath, "", err.Error())
		return
	}
	speculatorsLayout := top.has("speculators_model_type")
	w, err := openWeights(c.dir, true)
	if err != nil {
		c.add(Error, c.engines, c.dir, "", "weights: "+err.Error())
		return
	}
	defer w.close()
	if speculatorsLayout {
		c.speculatorsConfig(cfgPath, top)
	}
	described := c.describedSwitches(cfgPath, top, w)
	if described.fcNorm && described.normBeforeFC {
		c.add(Error, c.engines, cfgPath, keyFCNorm+"+"+keyNormBeforeFC,
			"both true: they are two exclusive recipes (speculators' Eagle3SpeculatorConfig refuses the pair, methods.md section 1), and the engines apply them differently: vLLM's combine_hidden_states (llama_eagle3.py) runs input_norm then fc_norm, TensorRT-LLM's apply_eagle3_fc (modeling_speculative.py) only fc_norm")
	}
	L := c.prov.targetLayers()
	if L == 0 {
		L = c.targetLayers
	}
	for _, e := range c.engines {
		v := c.view(e, cfgPath, top, speculatorsLayout)
		c.eagle3Switches(v, cfgPath, top, described, speculatorsLayout)
		c.eagle3LayerIDs(v, cfgPath, top, L)
		c.eagle3Tensors(v, cfgPath, top, w, speculatorsLayout)
		c.eagle3Vocab(v, w)
	}
}

// geometryBlock is the object an engine reads the layer's geometry from:
// the config itself, or the speculators layout's transformer_layer_config
// (vLLM's SpeculatorsConfig.extract_transformers_pre_trained_config starts
// from it).
func geometryBlock(top object, speculatorsLayout bool) object {
	if speculatorsLayout {
		return top.obj("transformer_layer_config")
	}
	return top
}

// view resolves the config as engine e does, noting every key it defaults.
func (c *checker) view(e Engine, cfgPath string, top object, speculatorsLayout bool) *e3view {
	es := []Engine{e}
	geo := geometryBlock(top, speculatorsLayout)
	where := ""
	if speculatorsLayout {
		where = "transformer_layer_config."
	}
	geoInt := func(key string, def int, defDesc string) int {
		if !geo.has(key) {
			c.add(Note, es, cfgPath, where+key, fmt.Sprintf("absent: the engine uses %s (%d)", defDesc, def))
			return def
		}
		n, ok := integer(geo[key])
		if !ok || n <= 0 {
			c.add(Error, es, cfgPath, where+key, fmt.Sprintf("%v is not a positive integer", geo[key]))
			return def
		}
		return n
	}
	v := &e3view{engine: e}
	v.H = geoInt("hidden_size", llamaDefaults["hidden_size"], "LlamaConfig's default")
	v.I = geoInt("intermediate_size", llamaDefaults["intermediate_size"], "LlamaConfig's default")
	v.nq = geoInt("num_attention_heads", llamaDefaults["num_attention_heads"], "LlamaConfig's default")
	v.nkv = geoInt("num_key_value_heads", v.nq, "num_attention_heads")
	v.hd = geoInt("head_dim", v.H/max(v.nq, 1), "hidden_size / num_attention_heads")
	v.V = geoInt("vocab_size", llamaDefaults["vocab_size"], "LlamaConfig's default")
	v.layers = geoInt("num_hidden_layers", llamaDefaults["num_hidden_layers"], "LlamaConfig's default")
	v.tie = truthy(geo["tie_word_embeddings"])
	// draft_vocab_size and target_hidden_size: top-level in both layouts
	// (vLLM's update_eagle3 copies them from the top of a speculators
	// config). Absent, every engine falls back to vocab_size and
	// hidden_size (vLLM Eagle3LlamaForCausalLM.__init__ and
	// LlamaModel.__init__; SGLang LlamaForCausalLMEagle3.__init__, which
	// also takes the lm_head from the target then; TensorRT-LLM
	// _ensure_draft_vocab_size and Eagle3DraftModel.__init__).
	v.N, v.TH = v.V, v.H
	if top.has("draft_vocab_size") {
		if n, ok := integer(top["draft_vocab_size"]); ok && n > 0 {
			v.N = n
		} else {
			c.add(Error, es, cfgPath, "draft_vocab_size", fmt.Sprintf("%v is not a positive integer", top["draft_vocab_size"]))
		}
	} else {
		msg := "absent: the engine uses vocab_size as the draft vocabulary"
		if e == SGLang {
			msg += " and loads the lm_head from the target (LlamaForCausalLMEagle3.load_lm_head_from_target)"
		}
		c.add(Note, es, cfgPath, "draft_vocab_size", msg)
	}
	if top.has("target_hidden_size") {
		if n, ok := integer(top["target_hidden_size"]); ok && n > 0 {
			v.TH = n
		} else {
			c.add(Error, es, cfgPath, "target_hidden_size", fmt.Sprintf("%v is not a positive integer", top["target_hidden_size"]))
		}
	}
	if v.layers != 1 {
		c.add(Error, es, cfgPath, where+"num_hidden_layers", fmt.Sprintf("%d: the engine builds that many decoder layers, and an EAGLE-3 export holds one", v.layers))
	}
	switch {
	case e == SGLang && v.tie:
		c.add(Error, es, cfgPath, "tie_word_embeddings", "true: SGLang's LlamaForCausalLMEagle3 then uses the embedding as the lm_head and never loads lm_head.weight; write false")
	case e == TRTLLM && v.tie:
		c.add(Error, es, cfgPath, "tie_word_embeddings", "true: TensorRT-LLM's _load_weights_impl (modeling_utils.py) then skips the lm_head, and the draft's own lm_head.weight is never loaded; write false")
	}
	if e == SGLang && !slices.Contains(top.strs("architectures"), "LlamaForCausalLMEagle3") {
		c.add(Error, es, cfgPath, "architectures", fmt.Sprintf("%v: SGLang picks the draft's model class by architecture, and its EAGLE-3 Llama draft is LlamaForCausalLMEagle3", top.strs("architectures")))
	}
	v.sw = engineSwitches(e, top, speculatorsLayout)
	v.ids, v.idsKey, v.numAux, v.captured = engineLayerIDs(e, top, speculatorsLayout)
	return v
}

// engineSwitches returns the norm switches engine e runs the export with.
//
// vLLM, native layout: LlamaDecoderLayer.__init__ reads
// getattr(config, "norm_before_residual", False); LlamaModel.__init__ reads
// norm_before_fc from eagle_config when it has the key, else the top level,
// and fc_norm and norm_output from the top level, all defaulting to False
// (vllm/model_executor/models/llama_eagle3.py).
//
// vLLM, speculators layout: update_eagle3
// (transformers_utils/configs/speculators/algos.py) overwrites the four keys
// of transformer_layer_config with the top level's, defaulting
// norm_before_residual to TRUE and the others to False; a top-level
// eagle_config is not carried over (the model's eagle_config is
// transformer_layer_config's, if any).
//
// SGLang: llama_eagle3.py's decoder layer always keeps the un-normalised
// residual (no norm_before_residual); versions with EAGLE-3.1 read fc_norm,
// norm_before_fc and norm_output from the top level with default False.
//
// TensorRT-LLM: Eagle3DecoderLayer always keeps the un-normalised residual;
// Eagle3DraftModel.__init__ reads norm_before_fc from eagle_config ONLY,
// fc_norm from the top level, and post-norm feedback from
// eagle_config.return_hidden_post_norm or top-level norm_output
// (tensorrt_llm/_torch/models/modeling_speculative.py).
func engineSwitches(e Engine, top object, speculatorsLayout bool) switches {
	ec := top.obj("eagle_config")
	var s switches
	switch e {
	case VLLM:
		if speculatorsLayout {
			get := func(key string, def bool) bool {
				if v, present := top[key]; present {
					return truthy(v)
				}
				return def
			}
			s = switches{get(keyNormBeforeResidual, true), get(keyNormBeforeFC, false), get(keyFCNorm, false), get(keyNormOutput, false)}
			if inner := top.obj("transformer_layer_config").obj("eagle_config"); inner != nil {
				if v, present := inner[keyNormBeforeFC]; present {
					s.normBeforeFC = truthy(v)
				}
			}
			return s
		}
		s.normBeforeResidual = truthy(top[keyNormBeforeResidual])
		s.normBeforeFC = truthy(top[keyNormBeforeFC])
		if v, present := ec[keyNormBeforeFC]; present {
			s.normBeforeFC = truthy(v)
		}
		s.fcNorm = truthy(top[keyFCNorm])
		s.normOutput = truthy(top[keyNormOutput])
	case SGLang:
		s.normBeforeFC = truthy(top[keyNormBeforeFC])
		s.fcNorm = truthy(top[keyFCNorm])
		s.normOutput = truthy(top[keyNormOutput])
	case TRTLLM:
		s.normBeforeFC = truthy(ec[keyNormBeforeFC])
		s.fcNorm = truthy(top[keyFCNorm])
		s.normOutput = truthy(ec["return_hidden_post_norm"]) || truthy(top[keyNormOutput])
	}
	return s
}

// describedSwitches returns the switches the export describes: what
// drafter.json records of the training run, else what the config states
// (a top-level key, else the eagle_config spelling), else what the weights
// imply (fc_norm.0.weight means fc_norm, input_norm.weight norm_before_fc),
// else false: plain EAGLE-3, which is what the speculators library's
// Eagle3SpeculatorConfig defaults all four to.
func (c *checker) describedSwitches(cfgPath string, top object, w *weights) switches {
	ec := top.obj("eagle_config")
	one := func(key, ecKey, tensor string) bool {
		if v, ok := c.prov.flag(key); ok {
			return v
		}
		if v, present := top[key]; present && v != nil {
			return truthy(v)
		}
		if v, present := ec[ecKey]; ecKey != "" && present && v != nil {
			return truthy(v)
		}
		if tensor != "" {
			_, ok := w.infos[tensor]
			return ok
		}
		return false
	}
	s := switches{
		normBeforeResidual: one(keyNormBeforeResidual, "", ""),
		normBeforeFC:       one(keyNormBeforeFC, keyNormBeforeFC, "input_norm.weight"),
		fcNorm:             one(keyFCNorm, "", "fc_norm.0.weight"),
		normOutput:         one(keyNormOutput, "return_hidden_post_norm", ""),
	}
	if c.prov != nil {
		if variant := c.prov.o.str("variant"); variant != "" {
			any31 := s.normBeforeFC || s.fcNorm || s.normOutput
			if (variant == "eagle3.1") != any31 {
				c.add(Error, c.engines, c.prov.path, "variant", fmt.Sprintf("%q, but the export's switches (fc_norm %v, norm_before_fc %v, norm_output %v) describe %s",
					variant, s.fcNorm, s.normBeforeFC, s.normOutput, map[bool]string{true: "EAGLE-3.1", false: "plain EAGLE-3"}[any31]))
			}
		}
	}
	return s
}

// eagle3Switches compares the switches engine v runs with those the
// export describes, and notes each switch the engine defaults or ignores.
func (c *checker) eagle3Switches(v *e3view, cfgPath string, top object, described switches, speculatorsLayout bool) {
	es := []Engine{v.engine}
	ec := top.obj("eagle_config")
	for _, key := range []string{keyNormBeforeResidual, keyNormBeforeFC, keyFCNorm, keyNormOutput} {
		got, want := v.sw.get(key), described.get(key)
		_, present := top[key]
		if got != want {
			c.add(Error, es, cfgPath, key, fmt.Sprintf("the engine runs %s %v, but the export describes %v: %s", key, got, want, switchReason(v.engine, key, top, speculatorsLayout)))
			continue
		}
		if !present {
			switch {
			case v.engine == VLLM && key == keyNormBeforeResidual && speculatorsLayout:
				// got == want == true: still ambiguous for every other reader.
				c.add(Note, es, cfgPath, key, "absent: vLLM's update_eagle3 assumes true; write it explicitly")
			case v.engine == TRTLLM && key == keyNormBeforeFC && ec != nil && ec[keyNormBeforeFC] != nil:
			case v.engine == TRTLLM && key == keyNormOutput && truthy(ec["return_hidden_post_norm"]):
			default:
				c.add(Note, es, cfgPath, key, fmt.Sprintf("absent: the engine assumes %v, as the export describes; write all four switches explicitly, since vLLM's speculators path defaults norm_before_residual to true", got))
			}
		}
	}
	// Switches an engine does not implement: it runs without them whatever
	// the config says.
	if (v.engine == SGLang || v.engine == TRTLLM) && truthy(top[keyNormBeforeResidual]) && described.normBeforeResidual {
		c.add(Error, es, cfgPath, keyNormBeforeResidual, "true: the engine's EAGLE-3 layer has no such variant and keeps the un-normalised residual (SGLang llama_eagle3.py LlamaDecoderLayer.forward; TensorRT-LLM Eagle3DecoderLayer.forward)")
	}
	if described.fcNorm || described.normBeforeFC || described.normOutput {
		c.add(Note, es, cfgPath, "fc_norm/norm_before_fc/norm_output", preEAGLE31(v.engine, speculatorsLayout))
	}
}

// switchReason says where an engine takes a switch from, for a mismatch.
func switchReason(e Engine, key string, top object, speculatorsLayout bool) string {
	switch {
	case e == VLLM && speculatorsLayout && key == keyNormBeforeResidual:
		return "vLLM's update_eagle3 (transformers_utils/configs/speculators/algos.py) sets norm_before_residual from the top level of a speculators config and assumes TRUE when it is absent; write \"norm_before_residual\": false"
	case e == VLLM && speculatorsLayout:
		return "vLLM's update_eagle3 copies " + key + " from the top level of a speculators config (default false), overwriting transformer_layer_config's"
	case e == VLLM && key == keyNormBeforeFC:
		return "vLLM's LlamaModel (llama_eagle3.py) reads eagle_config.norm_before_fc when eagle_config has it, else the top-level key, default false; with norm_before_fc false it skips input_norm.* weights without a word (Eagle3LlamaForCausalLM.load_weights)"
	case e == VLLM:
		return "vLLM's llama_eagle3.py reads top-level " + key + " with getattr(config, ..., False)"
	case e == SGLang:
		return "SGLang's llama_eagle3.py reads top-level " + key + " (default false) where it implements it at all"
	case e == TRTLLM && key == keyNormBeforeFC:
		return "TensorRT-LLM's Eagle3DraftModel reads norm_before_fc from eagle_config only (modeling_speculative.py), not from the top level: write eagle_config.norm_before_fc too"
	case e == TRTLLM && key == keyNormOutput:
		return "TensorRT-LLM's Eagle3DraftModel takes post-norm feedback from eagle_config.return_hidden_post_norm or top-level norm_output"
	case e == TRTLLM:
		return "TensorRT-LLM's Eagle3DraftModel reads top-level " + key + " with getattr(config, ..., False)"
	}
	return ""
}

// preEAGLE31 names the engine versions that run an EAGLE-3.1 export as
// plain EAGLE-3, from the code and PRs read (methods.md section 1).
func preEAGLE31(e Engine, speculatorsLayout bool) string {
	switch e {
	case VLLM:
		if speculatorsLayout {
			return "EAGLE-3.1 export: vLLM releases whose update_eagle3 predates the 3.1 keys copy only draft_vocab_size, target_hidden_size and norm_before_residual (norm_before_fc propagated since vLLM #38111, 2026-03-25; fc_norm and norm_output since #46488, 2026-06-23) and run it as plain EAGLE-3"
		}
		return "EAGLE-3.1 export: vLLM releases whose llama_eagle3.py predates the 3.1 model (#42764, 2026-05-15) ignore these keys and skip or refuse their weights"
	case SGLang:
		return "EAGLE-3.1 export: SGLang releases whose llama_eagle3.py predates 3.1 (as at sgl-project/sglang 03d5a77) read none of these keys, skip fc_norm.* and input_norm.* without a word (load_weights keeps only names it has parameters for) and run it as plain EAGLE-3"
	}
	return "EAGLE-3.1 export: TensorRT-LLM releases before per-feature fc_norm (PR #14988, 2026-06-05) ignore fc_norm and its weights"
}

// engineLayerIDs returns the feature layers engine e captures as read from
// the draft's config (HF hidden_states indices; nil: its default), the key
// read, fc's feature count and the number of features captured.
//
// vLLM: get_eagle3_aux_layers_from_config (v1/worker/gpu/spec_decode/
// eagle/eagle3_utils.py) takes the draft hf_config's top-level
// eagle_aux_hidden_state_layer_ids verbatim, else the target's
// get_eagle3_default_aux_hidden_state_layers (2, L//2, L-3); the target
// captures the residual stream entering layer k, HF index k. fc's width
// (llama_eagle3.py LlamaModel) is num_aux_hidden_states, else the length of
// eagle_config.eagle_aux_hidden_state_layer_ids, else 3. A speculators
// config keeps the top-level ids (update_eagle3), not eagle_config.
//
// SGLang: ModelRunner reads the draft's eagle_config
// ["eagle_aux_hidden_state_layer_ids"] (None on any failure) and the
// target's set_eagle3_layers_to_capture captures [k+1 for k in ids],
// default [2, L//2, L-3]: its ids count layer outputs, HF index - 1. fc's
// width is 3 features (llama_eagle3.py LlamaModel), or the number of
// top-level ids in versions with EAGLE-3.1.
//
// TensorRT-LLM: the layers come from the LLM API's
// EagleDecodingConfig.eagle3_layers_to_capture, never from the draft's
// config; Eagle3SpecMetadata's default is (1, L//2-1, L-4), captured after
// decoder layer k: HF index k+1 (_torch/speculative/eagle3.py).
func engineLayerIDs(e Engine, top object, speculatorsLayout bool) (ids []int, key string, numAux, captured int) {
	topIDs, topOK := top.ints(keyLayerIDs)
	ecIDs, ecOK := top.obj("eagle_config").ints(keyLayerIDs)
	switch e {
	case VLLM:
		if topOK && len(topIDs) > 0 {
			ids, key = topIDs, keyLayerIDs
		}
		numAux = 3
		if n, ok := integer(top["num_aux_hidden_states"]); ok && !speculatorsLayout {
			numAux = n
		} else if ecOK && len(ecIDs) > 0 && !speculatorsLayout {
			numAux = len(ecIDs)
		}
	case SGLang:
		if ecOK && len(ecIDs) > 0 {
			ids, key = shift(ecIDs, 1), "eagle_config."+keyLayerIDs
		}
		numAux = 3
		if topOK && len(topIDs) > 0 {
			numAux = len(topIDs)
		}
	case TRTLLM:
		numAux = 3
	}
	captured = 3
	if ids != nil {
		captured = len(ids)
	}
	return ids, key, numAux, captured
}

// defaultLayers is the engines' default feature layers for a target of L
// layers, as HF indices: vLLM and SGLang (2, L//2, L-3), TensorRT-LLM
// (1, L//2-1, L-4) counted as layer outputs, the same states.
func defaultLayers(L int) []int { return []int{2, L / 2, L - 3} }

func shift(ids []int, d int) []int {
	out := make([]int, len(ids))
	for i, v := range ids {
		out[i] = v + d
	}
	return out
}

// describedLayers returns the feature layers the export describes as HF
// indices (nil: the engines' defaults) and where that comes from.
func (c *checker) describedLayers(top object) ([]int, string) {
	if c.prov != nil {
		if ids, ok := c.prov.o.ints("feature_layers"); ok && len(ids) > 0 {
			return ids, c.prov.path + " feature_layers"
		}
		if b, ok := c.prov.o["default_feature_layers"].(bool); ok && b {
			return nil, c.prov.path + " default_feature_layers"
		}
	}
	if ids, ok := top.ints(keyLayerIDs); ok && len(ids) > 0 {
		return ids, keyLayerIDs
	}
	if ids, ok := top.obj("eagle_config").ints(keyLayerIDs); ok && len(ids) > 0 {
		return shift(ids, 1), "eagle_config." + keyLayerIDs + " + 1"
	}
	return nil, "no layer ids in the config"
}

// eagle3LayerIDs checks the feature layers engine v captures against those
// the export describes, and the two spellings of the ids against each other.
func (c *checker) eagle3LayerIDs(v *e3view, cfgPath string, top object, L int) {
	es := []Engine{v.engine}
	topIDs, topOK := top.ints(keyLayerIDs)
	ec := top.obj("eagle_config")
	ecIDs, ecOK := ec.ints(keyLayerIDs)
	if top.has(keyLayerIDs) && !topOK {
		c.add(Error, es, cfgPath, keyLayerIDs, fmt.Sprintf("%v is not a list of integers", top[keyLayerIDs]))
	}
	if ec.has(keyLayerIDs) && !ecOK {
		c.add(Error, es, cfgPath, "eagle_config."+keyLayerIDs, fmt.Sprintf("%v is not a list of integers", ec[keyLayerIDs]))
	}
	if topOK && ecOK && len(topIDs) > 0 && len(ecIDs) > 0 && !slices.Equal(topIDs, shift(ecIDs, 1)) {
		c.add(Error, es, cfgPath, keyLayerIDs, fmt.Sprintf("%v (hidden_states indices, read by vLLM) and eagle_config.%s %v (layer outputs = index - 1, read by SGLang: hidden_states %v) name different layers: one engine feeds the draft other features than it was trained on, with every shape still matching",
			topIDs, keyLayerIDs, ecIDs, shift(ecIDs, 1)))
	}
	for _, chk := range []struct {
		key string
		ids []int
		min int
	}{{keyLayerIDs, topIDs, 1}, {"eagle_config." + keyLayerIDs, ecIDs, 0}} {
		for i, id := range chk.ids {
			if id < chk.min {
				c.add(Error, es, cfgPath, chk.key, fmt.Sprintf("%v: id %d is below %d (hidden_states index 0 is the embedding output, never an EAGLE-3 feature)", chk.ids, id, chk.min))
				break
			}
			if i > 0 && id <= chk.ids[i-1] {
				c.add(Error, es, cfgPath, chk.key, fmt.Sprintf("%v: not strictly increasing; the engines capture in layer order, each layer once", chk.ids))
				break
			}
			if L > 0 && id+1-chk.min > L {
				c.add(Error, es, cfgPath, chk.key, fmt.Sprintf("%v: id %d is outside the target's %d layers", chk.ids, id, L))
				break
			}
		}
	}
	// The spelling each engine does not read, noted once per engine.
	switch {
	case v.engine == VLLM && ecOK && len(ecIDs) > 0:
		c.add(Note, es, cfgPath, "eagle_config."+keyLayerIDs, "vLLM does not capture by this key (it reads the top-level one); it only sizes fc by its length when num_aux_hidden_states is absent")
	case v.engine == SGLang && topOK && len(topIDs) > 0:
		c.add(Note, es, cfgPath, keyLayerIDs, "SGLang does not capture by this key (ModelRunner reads eagle_config's); versions with EAGLE-3.1 size fc by its length")
	}
	want, from := c.describedLayers(top)
	var wantL []int
	if want != nil {
		wantL = want
	} else if L > 0 {
		wantL = defaultLayers(L)
	}
	if v.numAux != v.captured {
		c.add(Error, es, cfgPath, keyLayerIDs, fmt.Sprintf("the engine captures %d target features but sizes fc for %d (num_aux_hidden_states, or the length of the other id key)", v.captured, v.numAux))
	}
	if v.engine == TRTLLM {
		if want != nil {
			msg := fmt.Sprintf("TensorRT-LLM never reads the draft's layer ids: it captures EagleDecodingConfig.eagle3_layers_to_capture (default (1, L//2-1, L-4), layer outputs); serve this draft with eagle3_layers_to_capture=%v (the export's hidden_states %v, minus one)", shift(want, -1), want)
			lv := Note
			if L > 0 && L <= 5 {
				msg += fmt.Sprintf("; the target's %d layers are too few for its default (Eagle3SpecMetadata raises without it)", L)
			}
			c.add(lv, es, cfgPath, keyLayerIDs, msg)
		}
		return
	}
	switch {
	case v.ids != nil && want != nil && !slices.Equal(v.ids, want):
		c.add(Error, es, cfgPath, v.idsKey, fmt.Sprintf("the engine captures hidden_states %v, but the export describes %v (%s)", v.ids, want, from))
	case v.ids == nil && want != nil && L > 0 && !slices.Equal(defaultLayers(L), want):
		c.add(Error, es, cfgPath, engineIDsKey(v.engine), fmt.Sprintf("absent: the engine captures its default hidden_states %v for the target's %d layers, but the export describes %v (%s)", defaultLayers(L), L, want, from))
	case v.ids == nil && want != nil && L == 0:
		c.add(Error, es, cfgPath, engineIDsKey(v.engine), fmt.Sprintf("absent: the engine captures its default hidden_states (2, L//2, L-3), which nothing here shows equal to the export's %v (%s); write both spellings of the ids", want, from))
	case v.ids == nil && want != nil:
		c.add(Note, es, cfgPath, engineIDsKey(v.engine), fmt.Sprintf("absent: the engine captures its default hidden_states %v, the export's", wantL))
	case v.ids != nil && want == nil && L > 0 && !slices.Equal(v.ids, defaultLayers(L)):
		c.add(Error, es, cfgPath, v.idsKey, fmt.Sprintf("the engine captures hidden_states %v, but the export describes the default layers %v (%s)", v.ids, defaultLayers(L), from))
	case v.ids == nil && want == nil:
		c.add(Note, es, cfgPath, engineIDsKey(v.engine), "absent: the engine captures its default hidden_states (2, L//2, L-3), as the export describes")
	}
}

// engineIDsKey is the config key engine e reads its layer ids from.
func engineIDsKey(e Engine) string {
	if e == SGLang {
		return "eagle_config." + keyLayerIDs
	}
	return keyLayerIDs
}

// speculatorsConfig checks what vLLM requires of a speculators config
// (SpeculatorsConfig.validate_speculators_config and
// extract_transformers_pre_trained_config in
// transformers_utils/configs/speculators/base.py, update_eagle3 in algos.py)
// and notes the top-level keys it never carries into the model's config.
func (c *checker) speculatorsConfig(cfgPath string, top object) {
	es := []Engine{VLLM}
	if !slices.Contains(c.engines, VLLM) {
		return
	}
	if t := top.str("speculators_model_type"); t != "eagle3" {
		c.add(Error, es, cfgPath, "speculators_model_type", fmt.Sprintf("%q: this is an EAGLE-3 check; vLLM picks its config transform by this key (eagle3, peagle, dflash, ...)", t))
	}
	tlc := top.obj("transformer_layer_config")
	if tlc == nil {
		c.add(Error, es, cfgPath, "transformer_layer_config", "absent or not an object: vLLM refuses the config (\"Must provide transformer_layer_config\")")
	} else if mt := tlc.str("model_type"); mt != "" && mt != "llama" && mt != "qwen3" {
		c.add(Error, es, cfgPath, "transformer_layer_config.model_type", fmt.Sprintf("%q: vLLM's update_eagle3 maps only llama and qwen3 to an EAGLE-3 model class and raises otherwise", mt))
	}
	sc := top.obj("speculators_config")
	pm, _ := sc["proposal_methods"].([]any)
	var first object
	if len(pm) > 0 {
		m, _ := pm[0].(map[string]any)
		first = object(m)
	}
	if _, ok := integer(first["speculative_tokens"]); !ok {
		c.add(Error, es, cfgPath, "speculators_config.proposal_methods[0].speculative_tokens", "absent or not an integer: vLLM's validate_speculators_config refuses the config (it is the default num_speculative_tokens)")
	}
	if _, ok := sc.obj("verifier")["name_or_path"]; !ok {
		c.add(Error, es, cfgPath, "speculators_config.verifier.name_or_path", "absent: vLLM's validate_speculators_config refuses the config")
	}
	for _, k := range []string{"eagle_config", "num_aux_hidden_states", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps"} {
		if top.has(k) {
			c.add(Note, es, cfgPath, k, "top level of a speculators config: vLLM builds the model from transformer_layer_config plus the keys update_eagle3 copies (draft_vocab_size, target_hidden_size, the four norm switches, eagle_aux_hidden_state_layer_ids) and ignores this one")
		}
	}
	for _, k := range []string{keyNormBeforeResidual, keyNormBeforeFC, keyFCNorm, keyNormOutput, "draft_vocab_size"} {
		if tlc.has(k) {
			c.add(Note, es, cfgPath, "transformer_layer_config."+k, "ignored: vLLM's update_eagle3 overwrites it with the top-level key (or its default)")
		}
	}
}

// eagle3Tensors checks the weights against the parameters engine v builds.
func (c *checker) eagle3Tensors(v *e3view, cfgPath string, top object, w *weights, speculatorsLayout bool) {
	es := []Engine{v.engine}
	prefix := "midlayer."
	if speculatorsLayout {
		prefix = "layers.0."
	}
	H, TH := v.H, v.TH
	wants := map[string]want{
		"fc.weight":                       {shape: []int{H, v.numAux * TH}, why: fmt.Sprintf("hidden_size %d x %d features x target_hidden_size %d", H, v.numAux, TH)},
		prefix + "hidden_norm.weight":     {shape: []int{H}, why: "hidden_size"},
		prefix + "input_layernorm.weight": {shape: []int{H}, why: "hidden_size"},
		prefix + "self_attn.q_proj.weight": {shape: []int{v.nq * v.hd, 2 * H},
			why: fmt.Sprintf("num_attention_heads %d x head_dim %d, over the 2 x hidden_size embedding+hidden input", v.nq, v.hd)},
		prefix + "self_attn.k_proj.weight":         {shape: []int{v.nkv * v.hd, 2 * H}, why: fmt.Sprintf("num_key_value_heads %d x head_dim %d, over 2 x hidden_size", v.nkv, v.hd)},
		prefix + "self_attn.v_proj.weight":         {shape: []int{v.nkv * v.hd, 2 * H}, why: fmt.Sprintf("num_key_value_heads %d x head_dim %d, over 2 x hidden_size", v.nkv, v.hd)},
		prefix + "self_attn.o_proj.weight":         {shape: []int{H, v.nq * v.hd}, why: "hidden_size, num_attention_heads x head_dim"},
		prefix + "post_attention_layernorm.weight": {shape: []int{H}, why: "hidden_size"},
		prefix + "mlp.gate_proj.weight":            {shape: []int{v.I, H}, why: "intermediate_size, hidden_size"},
		prefix + "mlp.up_proj.weight":              {shape: []int{v.I, H}, why: "intermediate_size, hidden_size"},
		prefix + "mlp.down_proj.weight":            {shape: []int{H, v.I}, why: "hidden_size, intermediate_size"},
		"norm.weight":                              {shape: []int{H}, why: "hidden_size"},
		"lm_head.weight":                           {shape: []int{v.N, H}, why: "draft_vocab_size, hidden_size"},
		"embed_tokens.weight":                      {shape: []int{v.V, H}, optional: true, why: "vocab_size, hidden_size"},
		"t2d":                                      {shape: []int{v.V}, kind: boolTensor, optional: true, why: "vocab_size (no engine reads it)"},
		"d2t":                                      {shape: []int{v.N}, kind: intTensor, optional: v.N == v.V, why: "draft_vocab_size"},
	}
	if v.sw.normBeforeFC {
		wants["input_norm.weight"] = want{shape: []int{v.numAux * TH}, why: fmt.Sprintf("norm_before_fc true: %d features x target_hidden_size %d", v.numAux, TH)}
	}
	if v.sw.fcNorm {
		for i := range v.numAux {
			wants[fmt.Sprintf("fc_norm.%d.weight", i)] = want{shape: []int{TH}, why: fmt.Sprintf("fc_norm true: one norm per feature (%d) of target_hidden_size", v.numAux)}
		}
	}
	// The names each engine looks up: vLLM and TensorRT-LLM accept both
	// decoder prefixes (llama_eagle3.py hf_to_vllm_mapper midlayer. ->
	// layers.0.; modeling_speculative.py load_weights layers.0. ->
	// midlayer.), SGLang only midlayer.* (llama_eagle3.py load_weights).
	other := map[string]string{"midlayer.": "layers.0.", "layers.0.": "midlayer."}[prefix]
	rename := func(name string) string {
		if v.engine != SGLang {
			if rest, ok := strings.CutPrefix(name, other); ok {
				return prefix + rest
			}
		}
		return name
	}
	unused := func(name string) string {
		switch {
		case strings.HasPrefix(name, "input_norm."):
			return "the engine has no input_norm (norm_before_fc is false for it) and " + skipVerb(v.engine, name) + ": the draft was trained with a norm the engine does not apply"
		case strings.HasPrefix(name, "fc_norm."):
			return fmt.Sprintf("the engine has no such fc_norm (fc_norm %v, %d features) and %s", v.sw.fcNorm, v.numAux, skipVerb(v.engine, name))
		}
		return "not a parameter of the engine's EAGLE-3 layer: it " + skipVerb(v.engine, name)
	}
	missing := map[Engine]string{
		VLLM:   "vLLM's AutoWeightsLoader (model_executor/models/utils.py) loads the names the file has and never asks for those it lacks, so the parameter keeps its initial value",
		SGLang: "SGLang's load_weights loads the names the file has and never asks for those it lacks, so the parameter keeps its initial value",
		TRTLLM: "TensorRT-LLM's loader (modeling_utils.py _load_weights_impl) walks its modules and looks this one up: the load fails, or, for a module with its own load_weights, the parameter keeps its initial value",
	}[v.engine]
	c.compare(es, w, wants, rename, unused, missing)
	if _, ok := w.infos["embed_tokens.weight"]; ok {
		c.add(Note, es, w.file, "embed_tokens.weight", map[Engine]string{
			VLLM:   "vLLM loads it and embeds the draft's tokens with it instead of the target's embedding",
			SGLang: "SGLang replaces it with the target's embedding (set_embed_and_head)",
			TRTLLM: "TensorRT-LLM shares the target's embedding when target_hidden_size equals hidden_size and ignores it",
		}[v.engine])
	}
}

// skipVerb says what engine e does with a tensor it has no parameter for.
func skipVerb(e Engine, name string) string {
	switch e {
	case VLLM:
		if strings.HasPrefix(name, "input_norm.") {
			return "skips it without a word (Eagle3LlamaForCausalLM.load_weights adds input_norm. to skip_substrs)"
		}
		return "refuses the checkpoint (AutoWeightsLoader in model_executor/models/utils.py raises \"There is no module or parameter named ...\")"
	case SGLang:
		return "skips it without a word (llama_eagle3.py load_weights keeps only names in params_dict)"
	}
	return "never reads it (_load_weights_impl in modeling_utils.py walks the model's own modules and looks up their names, so a name no module has is never read)"
}

// eagle3Vocab checks d2t and t2d: d2t[i] is the OFFSET of draft id i's
// target id (vLLM compute_logits: targets = arange(N) + d2t; SGLang
// load_weights: hot_token_id = d2t + arange), so i + d2t[i] must be distinct
// target ids in [0, V); t2d (read by no engine) must mark exactly them.
func (c *checker) eagle3Vocab(v *e3view, w *weights) {
	es := []Engine{v.engine}
	info, ok := w.infos["d2t"]
	if !ok || len(info.Shape) != 1 || info.Shape[0] != v.N || !intTensor.accepts(info.DType) {
		return // compare reported it
	}
	d2t := make([]int64, v.N)
	if info.DType == "I64" {
		vals, _, err := w.set.Int64("d2t")
		if err != nil {
			c.add(Error, es, w.file, "d2t", err.Error())
			return
		}
		copy(d2t, vals)
	} else {
		vals, _, err := w.set.Int32("d2t")
		if err != nil {
			c.add(Error, es, w.file, "d2t", err.Error())
			return
		}
		for i, x := range vals {
			d2t[i] = int64(x)
		}
	}
	var t2d []bool
	if ti, ok := w.infos["t2d"]; ok && len(ti.Shape) == 1 && ti.Shape[0] == v.V && ti.DType == "BOOL" {
		t2d, _, _ = w.set.Bool("t2d")
	}
	// The engines scatter draft logit i to target id i + d2t[i]: an id out
	// of range fails, a repeated one overwrites another draft id's logit.
	// One mark per target id, allocated once.
	taken := make([]bool, v.V)
	bad := -1
	for i, off := range d2t {
		t := int64(i) + off
		if t < 0 || t >= int64(v.V) || taken[t] {
			bad = i
			break
		}
		taken[t] = true
	}
	if bad >= 0 {
		msg := fmt.Sprintf("d2t[%d] = %d gives target id %d: the engines read d2t as offsets (target id = i + d2t[i]: vLLM compute_logits, SGLang load_weights hot_token_id), which must give distinct ids in [0, %d)", bad, d2t[bad], int64(bad)+d2t[bad], v.V)
		if looksLikeIDs(d2t, t2d, v.V) {
			msg += "; d2t holds the target ids themselves: write d2t[i] = id_i - i"
		}
		c.add(Error, es, w.file, "d2t", msg)
		return
	}
	if v.engine == TRTLLM && v.N == v.V {
		for i, off := range d2t {
			if off != 0 {
				c.add(Error, es, w.file, "d2t", fmt.Sprintf("d2t[%d] = %d with draft_vocab_size equal to vocab_size: TensorRT-LLM builds no d2t then (Eagle3DraftModel.__init__) and reads draft id i as target id i", i, off))
				break
			}
		}
	}
	if t2d != nil {
		c.add(Note, es, w.file, "t2d", "no engine reads t2d (vLLM, SGLang and TensorRT-LLM map draft ids through d2t only); checked against d2t for the tools that do")
		n := 0
		for _, in := range t2d {
			if in {
				n++
			}
		}
		if n != v.N {
			c.add(Error, es, w.file, "t2d", fmt.Sprintf("%d entries true, want draft_vocab_size %d (one per draft id)", n, v.N))
			return
		}
		for i, off := range d2t {
			if !t2d[int64(i)+off] {
				c.add(Error, es, w.file, "t2d", fmt.Sprintf("t2d[%d] is false but d2t maps draft id %d there: t2d and d2t describe different vocabularies", int64(i)+off, i))
				return
			}
		}
	}
}

// looksLikeIDs reports whether d2t holds target ids rather than offsets:
// ascending ids in [0, V) (the order every EAGLE-3 tool writes the draft
// vocabulary in), matching t2d when there is one.
func looksLikeIDs(d2t []int64, t2d []bool, V int) bool {
	for i, id := range d2t {
		if id < 0 || id >= int64(V) || (i > 0 && id <= d2t[i-1]) {
			return false
		}
		if t2d != nil && !t2d[id] {
			return false
		}
	}
	return true
}
