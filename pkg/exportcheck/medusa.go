package exportcheck

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// The Medusa layouts:
//
//   - vllm: config.json of model_type "medusa" and model.safetensors, loaded
//     by vLLM's Medusa (vllm/model_executor/models/medusa.py) with its
//     MedusaConfig (transformers_utils/configs/medusa.py).
//   - medusa: FasterDecoding's config.json and medusa_lm_head.safetensors,
//     read by TensorRT-LLM's converter (examples/medusa/convert_checkpoint.py
//     and tensorrt_llm/models/medusa/weight.py load_medusa_hf).
//
// SGLang has no Medusa model (no python/sglang/srt/models/medusa.py).
const (
	fdWeights = "medusa_lm_head.safetensors"
	fdTorch   = "medusa_lm_head.pt"
)

var (
	medusaVLLM = layout{method: "medusa", name: "vllm", loads: []Engine{VLLM},
		why: map[Engine]string{
			SGLang: "SGLang has no Medusa model",
			TRTLLM: "TensorRT-LLM's Medusa converter reads FasterDecoding's medusa_lm_head.safetensors ({h}.{l}.linear.weight keys), not vLLM's layout: use the medusa/ export",
		}}
	medusaFD = layout{method: "medusa", name: "medusa", loads: []Engine{TRTLLM},
		why: map[Engine]string{
			SGLang: "SGLang has no Medusa model",
			VLLM:   "vLLM's Medusa model looks up blocks.{h}.layers.{l}.weight and lm_heads.{h}.weight (medusa.py load_weights) and skips FasterDecoding's {h}.{l}.linear.* names without a word: use the vllm/ export",
		}}
)

func init() {
	medusaVLLM.check = checkMedusaVLLM
	medusaFD.check = checkMedusaFD
}

// vllmMedusaDefaults are MedusaConfig.__init__'s defaults, which vLLM uses
// for a key config.json lacks.
var vllmMedusaDefaults = map[string]int{"hidden_size": 4096, "vocab_size": 32001, "num_heads": 5, "num_hidden_layers": 1}

// checkMedusaVLLM checks vLLM's Medusa layout.
//
// MedusaConfig.from_pretrained renames every key containing "num" and
// "heads" to num_heads and every key containing "num" and "layers" to
// num_hidden_layers (so medusa_num_heads counts too), and defaults the four
// sizes; truncated_vocab_size defaults to vocab_size. Medusa builds
// num_heads ResidualBlocks of num_hidden_layers Linear(H, H) with bias only
// when medusa_fc_bias (default false), and num_heads lm_heads
// [truncated_vocab_size, H], or ONE (lm_heads.0.weight loaded as lm_head)
// with original_lm_head. load_weights strips "medusa_heads.", keeps the
// names it has parameters for and drops the rest without a word, and never
// checks that a parameter was loaded.
func checkMedusaVLLM(c *checker) {
	es := []Engine{VLLM}
	cfgPath := filepath.Join(c.dir, configFile)
	cfg, err := readConfig(cfgPath)
	if err != nil {
		c.add(Error, es, cfgPath, "", err.Error())
		return
	}
	if cfg.str("model_type") != "medusa" {
		c.add(Error, es, cfgPath, "model_type", fmt.Sprintf("%q: vLLM picks MedusaConfig by model_type \"medusa\"", cfg.str("model_type")))
	}
	get := func(canon string) int {
		var keys []string
		for k := range cfg {
			if canon == "num_heads" && strings.Contains(k, "num") && strings.Contains(k, "heads") ||
				canon == "num_hidden_layers" && strings.Contains(k, "num") && strings.Contains(k, "layers") ||
				k == canon {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		if len(keys) == 0 {
			c.add(Note, es, cfgPath, canon, fmt.Sprintf("absent: vLLM's MedusaConfig uses %d", vllmMedusaDefaults[canon]))
			return vllmMedusaDefaults[canon]
		}
		vals := map[int]bool{}
		n := 0
		for _, k := range keys {
			v, ok := integer(cfg[k])
			if !ok || v < 0 {
				c.add(Error, es, cfgPath, k, fmt.Sprintf("%v is not a non-negative integer", cfg[k]))
				continue
			}
			vals[v], n = true, v
		}
		if len(vals) > 1 {
			c.add(Error, es, cfgPath, strings.Join(keys, "+"), "disagree: vLLM's MedusaConfig.from_pretrained renames each of them to "+canon+", and whichever comes last in the file wins")
		}
		return n
	}
	H, V := get("hidden_size"), get("vocab_size")
	heads, layers := get("num_heads"), get("num_hidden_layers")
	T := V
	if cfg.has("truncated_vocab_size") {
		if t, ok := integer(cfg["truncated_vocab_size"]); ok {
			T = t
		}
	}
	bias := truthy(cfg["medusa_fc_bias"])
	if !cfg.has("medusa_fc_bias") {
		c.add(Note, es, cfgPath, "medusa_fc_bias", "absent: vLLM builds the blocks without bias")
	}
	shared := truthy(cfg["original_lm_head"])
	w, err := openWeights(filepath.Join(c.dir, "model.safetensors"), false)
	if err != nil {
		c.add(Error, es, c.dir, "", "weights: "+err.Error())
		return
	}
	defer w.close()
	if T < V {
		if _, ok := w.infos["token_map"]; !ok {
			c.add(Error, es, cfgPath, "truncated_vocab_size", fmt.Sprintf("%d below vocab_size %d without a token_map tensor: vLLM's Medusa.load_weights asserts", T, V))
		}
	}
	wants := map[string]want{"token_map": {shape: []int{T}, kind: intTensor, optional: true, why: "truncated_vocab_size"}}
	for h := range heads {
		for l := range layers {
			wants[fmt.Sprintf("blocks.%d.layers.%d.weight", h, l)] = want{shape: []int{H, H}, why: fmt.Sprintf("num_heads %d, num_hidden_layers %d, hidden_size %d", heads, layers, H)}
			if bias {
				wants[fmt.Sprintf("blocks.%d.layers.%d.bias", h, l)] = want{shape: []int{H}, why: "medusa_fc_bias true, hidden_size"}
			}
		}
		if !shared || h == 0 {
			wants[fmt.Sprintf("lm_heads.%d.weight", h)] = want{shape: []int{T, H}, why: fmt.Sprintf("num_heads %d, truncated_vocab_size %d, hidden_size %d (original_lm_head %v)", heads, T, H, shared)}
		}
	}
	rename := func(name string) string { return strings.TrimPrefix(name, "medusa_heads.") }
	unused := func(name string) string {
		n := rename(name)
		why := "not a parameter of vLLM's Medusa"
		if ix := safetensors.NameIndices(n, "blocks.#.layers.#.bias"); ix != nil && ix[0] < heads && ix[1] < layers && !bias {
			why = "medusa_fc_bias is false (or absent), so vLLM's blocks have no bias"
		} else if ix := safetensors.NameIndices(n, "blocks.#.layers.#.weight"); ix != nil {
			why = fmt.Sprintf("num_heads is %d and num_hidden_layers %d", heads, layers)
		} else if ix := safetensors.NameIndices(n, "lm_heads.#.weight"); ix != nil {
			if shared && ix[0] < heads {
				why = "original_lm_head is true: vLLM builds one lm_head from lm_heads.0.weight"
			} else {
				why = fmt.Sprintf("num_heads is %d", heads)
			}
		}
		return why + ": vLLM's Medusa.load_weights drops it without a word, so the heads run without these weights"
	}
	c.compare(es, w, wants, rename, unused, "vLLM's Medusa.load_weights never checks that a parameter was loaded, so it keeps its initial value")
}

// checkMedusaFD checks FasterDecoding's layout as TensorRT-LLM's converter
// reads it: load_medusa_hf (tensorrt_llm/models/medusa/weight.py) opens
// medusa_lm_head.pt when it exists and medusa_lm_head.safetensors only
// otherwise, and reads {h}.{l}.linear.weight, {h}.{l}.linear.bias and
// {h}.{num_medusa_layers}.weight for h < num_medusa_heads — counts that
// come from convert_checkpoint.py's --num_medusa_heads (default 4) and
// --num_medusa_layers (default 1), never from config.json. A name it asks
// for and the file lacks is a KeyError; one it does not ask for is never
// read.
func checkMedusaFD(c *checker) {
	es := []Engine{TRTLLM}
	cfgPath := filepath.Join(c.dir, configFile)
	if fileExists(filepath.Join(c.dir, fdTorch)) {
		c.add(Error, es, filepath.Join(c.dir, fdTorch), "", "present: TensorRT-LLM's load_medusa_hf reads medusa_lm_head.pt in preference to "+fdWeights+", so these weights are the ones converted; remove it")
	}
	w, err := openWeights(filepath.Join(c.dir, fdWeights), false)
	if err != nil {
		c.add(Error, es, c.dir, "", "weights: "+err.Error())
		return
	}
	defer w.close()
	cfg, err := readConfig(cfgPath)
	if err != nil {
		c.add(Error, es, cfgPath, "", err.Error())
		return
	}
	count := func(key string) (int, bool) {
		n, ok := integer(cfg[key])
		if !ok || n < 0 {
			c.add(Error, es, cfgPath, key, fmt.Sprintf("%v: absent or not a non-negative integer; FasterDecoding's MedusaModel reads it and drafter states the heads' shape by it", cfg[key]))
			return 0, false
		}
		return n, true
	}
	heads, okH := count("medusa_num_heads")
	layers, okL := count("medusa_num_layers")
	if !okH || !okL {
		return
	}
	if heads != 4 || layers != 1 {
		c.add(Note, es, cfgPath, "medusa_num_heads/medusa_num_layers", fmt.Sprintf("%d heads of %d blocks: TensorRT-LLM's convert_checkpoint.py takes the counts from --num_medusa_heads (default 4) and --num_medusa_layers (default 1), not from this file; convert with --num_medusa_heads %d --num_medusa_layers %d", heads, layers, heads, layers))
	}
	// The lm_heads give H and V; the config's hidden_size and vocab_size
	// must agree with them.
	H, V := 0, 0
	if info, ok := w.infos[fmt.Sprintf("0.%d.weight", layers)]; ok && len(info.Shape) == 2 {
		V, H = info.Shape[0], info.Shape[1]
	}
	for _, f := range []struct {
		key string
		got int
	}{{"hidden_size", H}, {"vocab_size", V}} {
		if n, ok := integer(cfg[f.key]); ok && f.got > 0 && n != f.got {
			c.add(Error, es, cfgPath, f.key, fmt.Sprintf("%d, but head 0's lm_head 0.%d.weight in %s is [%d, %d]", n, layers, w.file, V, H))
		}
		if f.got == 0 {
			if n, ok := integer(cfg[f.key]); ok {
				if f.key == "hidden_size" {
					H = n
				} else {
					V = n
				}
			}
		}
	}
	wants := map[string]want{}
	for h := range heads {
		for l := range layers {
			wants[fmt.Sprintf("%d.%d.linear.weight", h, l)] = want{shape: []int{H, H}, why: fmt.Sprintf("medusa_num_heads %d, medusa_num_layers %d, hidden_size %d", heads, layers, H)}
			wants[fmt.Sprintf("%d.%d.linear.bias", h, l)] = want{shape: []int{H}, why: "hidden_size (TensorRT-LLM's Medusa blocks have a bias)"}
		}
		wants[fmt.Sprintf("%d.%d.weight", h, layers)] = want{shape: []int{V, H}, why: fmt.Sprintf("vocab_size %d, hidden_size %d, at block index medusa_num_layers %d", V, H, layers)}
	}
	unused := func(name string) string {
		if ix := safetensors.NameIndices(name, "#.#.linear.weight"); ix != nil && ix[0] >= heads {
			return fmt.Sprintf("a head beyond medusa_num_heads %d: converted with --num_medusa_heads %d it is never read, converted with more the config is wrong", heads, heads)
		}
		if ix := safetensors.NameIndices(name, "#.#.weight"); ix != nil && ix[0] >= heads {
			return fmt.Sprintf("the lm_head of a head beyond medusa_num_heads %d: never read", heads)
		}
		return fmt.Sprintf("not a tensor TensorRT-LLM's load_medusa_hf reads with %d heads of %d blocks: never read", heads, layers)
	}
	c.compare(es, w, wants, nil, unused, "TensorRT-LLM's load_medusa_hf indexes it and fails with a KeyError")
}
