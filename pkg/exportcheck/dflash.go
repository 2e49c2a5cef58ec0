package exportcheck

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drafter-ai/drafter/pkg/drafters/layerids"
)

// The block drafters: DFlash (z-lab) and DSpark (DeepSeek), one Qwen3-style
// backbone (fc over the concatenated target features, hidden_norm, n decoder
// layers that take the projected features as extra keys and values, final
// norm) drafting a block of B slots in one forward. They differ in what the
// slots predict: DFlash's slot 0 holds the last verified (bonus) token and
// slots 1..B-1 predict x_{p+k}; DSpark's slot k predicts x_{p+k+1} ("sample
// from anchor", shifted labels) and adds a Markov bias and a confidence head.
// An engine that runs one layout on weights trained for the other loads
// without a word and accepts almost nothing.
//
// The DFlash layouts. Which engine loads which:
//
//   - native (z-lab's, architectures DFlashDraftModel, dflash_config
//     {mask_token_id, target_layer_ids}): vLLM
//     (model_executor/models/qwen3_dflash.py DFlashQwen3ForCausalLM), SGLang
//     (python/sglang/srt/models/dflash.py DFlashDraftModel, configured by
//     speculative/dflash_utils.py parse_dflash_draft_config) and
//     TensorRT-LLM's PyTorch backend (DFlashDecodingConfig, PR #12794), whose
//     reading of the config beyond the mask token id is not verified here.
//   - speculators (speculators_model_type dflash, geometry nested in
//     transformer_layer_config): vLLM, through its speculators config
//     translation (update_dflash). SGLang's DFlashDraftModel reads a flat
//     config.
var (
	dflashNative = layout{method: "dflash", name: "native", loads: []Engine{VLLM, SGLang, TRTLLM}}
	dflashSpecs  = layout{method: "dflash", name: "speculators", loads: []Engine{VLLM},
		why: map[Engine]string{
			SGLang: "SGLang's DFlashDraftModel (python/sglang/srt/models/dflash.py) reads hidden_size, num_hidden_layers and the rest from the top of config.json, where the speculators layout has none (they are nested in transformer_layer_config); serve the native layout",
			TRTLLM: "TensorRT-LLM's DFlash loader was not read for the speculators layout (methods.md, open points); serve the native layout and pass the mask token id and layer ids in DFlashDecodingConfig",
		}}
)

func init() {
	dflashNative.check = func(c *checker) { checkBlockDrafter(c, blockDFlash, false) }
	dflashSpecs.check = func(c *checker) { checkBlockDrafter(c, blockDFlash, true) }
	dflashNative.why = map[Engine]string{}
}

// blockMethod is which of the two block drafters a layout declares.
type blockMethod string

const (
	blockDFlash blockMethod = "dflash"
	blockDSpark blockMethod = "dspark"
)

// shifted reports whether the method's slots predict the next token of
// their own position (DSpark's sample-from-anchor labels).
func (m blockMethod) shifted() bool { return m == blockDSpark }

// labelName names a label layout for messages.
func labelName(shifted bool) string {
	if shifted {
		return "DSpark's shifted labels (sample_from_anchor: slot k predicts x_{p+k+1}, all B slots draft)"
	}
	return "DFlash's labels (slot 0 is the bonus token, slot k>=1 predicts x_{p+k}, B-1 drafts)"
}

// The keys the block drafters' configs spell.
const (
	keyDFlashConfig     = "dflash_config"
	keyTargetLayerIDs   = "target_layer_ids"
	keyAuxLayerIDs      = "aux_hidden_state_layer_ids"
	keyMaskTokenID      = "mask_token_id"
	keyBlockSize        = "block_size"
	keyNumTargetLayers  = "num_target_layers"
	keySampleFromAnchor = "sample_from_anchor"
	keyBonusAnchor      = "dspark_bonus_anchor"
	keyNonCausal        = "sliding_window_non_causal"
	keyLayerTypes       = "layer_types"
	slidingAttention    = "sliding_attention"
)

// blockGeometry is a block drafter's backbone geometry: draft hidden H,
// intermediate I, heads, kv heads, head dim, vocabulary V, draft vocabulary
// N, target hidden TH, decoder layers n.
type blockGeometry struct {
	H, I, nq, nkv, hd, V, N, TH, layers int
}

// blockView is what one engine builds from a block drafter's config.
type blockView struct {
	engine Engine
	g      blockGeometry
	// ids are the Hugging Face hidden_states indices the engine captures;
	// idsKey says where they come from. idsKnown is false when the engine
	// takes a default that depends on what nothing here records.
	ids      []int
	idsKey   string
	idsWhy   string
	idsKnown bool
	// idsUnverified: how the engine turns the ids into capture points was
	// not read; only the feature count is compared.
	idsUnverified bool
	// features is the number of target features fc's input holds, fcWidth
	// the width of one (the engine sizes fc [H, features*fcWidth]).
	features, fcWidth int
	// block is the block size the engine runs, 0 when it does not read one
	// from the config; blockKey where it comes from.
	block    int
	blockKey string
	// mask is the mask token id the engine feeds, maskKey where it comes
	// from ("" when absent).
	mask    int
	maskKey string
	// causal is each decoder layer's intra-block causality as the engine
	// runs it, nil when not verified for the engine.
	causal    []bool
	causalWhy string
	// shifted is the label layout the engine drafts with; shiftedKnown is
	// false where the engine's reading is not verified.
	shifted      bool
	shiftedKnown bool
	shiftedWhy   string
}

// checkBlockDrafter checks a DFlash or DSpark export folder for c.engines:
// the config as each engine reads it, and the weights against the
// parameters it builds.
func checkBlockDrafter(c *checker, m blockMethod, speculatorsLayout bool) {
	cfgPath := filepath.Join(c.dir, configFile)
	top, err := readConfig(cfgPath)
	if err != nil {
		c.add(Error, c.engines, cfgPath, "", err.Error())
		return
	}
	w, err := openWeights(c.dir, true)
	if err != nil {
		c.add(Error, c.engines, c.dir, "", "weights: "+err.Error())
		return
	}
	defer w.close()
	b := &blockCheck{c: c, m: m, cfgPath: cfgPath, top: top, w: w, speculators: speculatorsLayout}
	if speculatorsLayout {
		b.speculatorsEnvelope()
	}
	b.L = c.prov.targetLayers()
	if b.L == 0 {
		if n, ok := integer(b.flat()[keyNumTargetLayers]); ok && n > 0 {
			b.L = n
		} else {
			b.L = c.targetLayers
		}
	}
	b.describe()
	b.formatBlockSize()
	b.formatTargetLayers()
	for _, e := range c.engines {
		v := b.view(e)
		if v == nil {
			continue
		}
		b.layerIDs(v)
		b.blockSize(v)
		b.maskToken(v)
		b.causality(v)
		b.labels(v)
		if m == blockDSpark {
			b.dsparkConfig(v)
		}
		b.tensors(v)
		b.effective(v)
	}
}

// effective notes what engine v runs, in one line: the feature layers as
// hidden_states indices, fc's width, the block, the mask token, the
// intra-block attention per layer and the label layout.
func (b *blockCheck) effective(v *blockView) {
	if v.engine == TRTLLM {
		return // noted by the view: not verified
	}
	ids := "an unverified mapping of " + v.idsKey
	switch {
	case !v.idsUnverified && v.ids != nil:
		ids = fmt.Sprintf("%v (from %s)", v.ids, v.idsKey)
	case !v.idsUnverified:
		ids = "a default nothing here records (" + v.idsKey + " absent)"
	}
	block := "not read from the config"
	if v.block > 0 {
		block = fmt.Sprintf("%d (%s)", v.block, v.blockKey)
	}
	mask := "none"
	if v.maskKey != "" {
		mask = fmt.Sprintf("%d (%s)", v.mask, v.maskKey)
	}
	attn := make([]string, len(v.causal))
	for i, c := range v.causal {
		attn[i] = causalWord(c)
	}
	labels := "unverified"
	if v.shiftedKnown {
		labels = labelName(v.shifted)
	}
	b.c.add(Note, []Engine{v.engine}, b.cfgPath, "", fmt.Sprintf("effective: captures hidden_states %s into fc [%d, %d x %d]; block %s; mask token %s; block attention per layer [%s]; %s",
		ids, v.g.H, v.features, v.fcWidth, block, mask, strings.Join(attn, " "), labels))
}

// blockCheck is the state of one block drafter check.
type blockCheck struct {
	c           *checker
	m           blockMethod
	cfgPath     string
	top         object
	w           *weights
	speculators bool
	// L is the target's layer count when known (drafter.json, the config's
	// num_target_layers, or Options.TargetLayers), else 0.
	L int
	// What the export describes: the training run's record where
	// drafter.json has one, else the export's own statement.
	ids         []int
	idsFrom     string
	block       int
	blockFrom   string
	causal      []bool
	causalFrom  string
	shifted     bool
	shiftedFrom string
	draftLayers int
}

// flat is the config as the engines that read a flat Hugging Face config see
// it: the config itself, or the speculators layout's transformer_layer_config
// (for the geometry), which vLLM's translation starts from.
func (b *blockCheck) flat() object {
	if b.speculators {
		return b.vllmTranslated()
	}
	return b.top
}

// vllmTranslated is the config vLLM builds from a speculators layout:
// SpeculatorsConfig (transformers_utils/configs/speculators/base.py) starts
// from transformer_layer_config and applies the method's update function
// (algos.py update_dflash, update_dspark), which copies draft_vocab_size and
// target_hidden_size, writes the ids both ways (eagle_aux_hidden_state_layer_ids
// = aux_hidden_state_layer_ids, the hidden_states indices vLLM captures;
// dflash_config.target_layer_ids = aux - 1) and mask_token_id, and sets
// dflash_config.causal = not sliding_window_non_causal (absent: non-causal,
// methods.md section 3). Everything else at the top level is dropped.
// update_dspark also sets markov_rank (default 256), markov_head_type
// (default vanilla) and dspark_bonus_anchor = not sample_from_anchor
// (default true: vLLM #48639; earlier builds hard-code the bonus anchor).
func (b *blockCheck) vllmTranslated() object {
	t := object{}
	for k, v := range b.top.obj("transformer_layer_config") {
		t[k] = v
	}
	t["architectures"] = []any{"DFlashDraftModel"}
	t["draft_vocab_size"] = b.top["draft_vocab_size"]
	if b.top.has("target_hidden_size") {
		t["target_hidden_size"] = b.top["target_hidden_size"]
	}
	dc := map[string]any{keyMaskTokenID: b.top[keyMaskTokenID]}
	if aux, ok := b.top.ints(keyAuxLayerIDs); ok {
		t[keyLayerIDs] = b.top[keyAuxLayerIDs]
		// vLLM reads the eagle_aux copy first, so the dflash_config copy
		// matters only for display; an aux id 0 has no output-of-layer
		// spelling and is left out of it.
		if out, err := layerids.Encode(layerids.DFlashTarget, aux); err == nil {
			tl := make([]any, len(out))
			for i, id := range out {
				tl[i] = jsonInt(id)
			}
			dc[keyTargetLayerIDs] = tl
		}
	}
	nonCausal := true
	if v, present := b.top[keyNonCausal]; present && v != nil {
		nonCausal = truthy(v)
	}
	dc["causal"] = !nonCausal
	if b.m == blockDSpark {
		t["architectures"] = []any{"Qwen3DSparkModel"}
		t["markov_rank"] = orDefault(b.top, "markov_rank", jsonInt(256))
		t["markov_head_type"] = orDefault(b.top, "markov_head_type", "vanilla")
		sfa := true
		if v, present := b.top[keySampleFromAnchor]; present && v != nil {
			sfa = truthy(v)
		}
		t[keyBonusAnchor] = !sfa
		for _, k := range []string{"enable_confidence_head", "confidence_head_with_markov"} {
			if b.top.has(k) {
				t[k] = b.top[k]
			}
		}
	}
	t[keyDFlashConfig] = dc
	return t
}

// orDefault returns o[key], or def when absent.
func orDefault(o object, key string, def any) any {
	if o.has(key) {
		return o[key]
	}
	return def
}

// geometry reads the backbone geometry engine es would build from cfg
// (where names the block for messages). The block drafters' configs carry
// every size; one absent would come from Qwen3Config's defaults, which
// describe no drafter we export, so it is an Error.
func (b *blockCheck) geometry(es []Engine, cfg object, where string) (blockGeometry, bool) {
	ok := true
	get := func(key string, def int, defOK bool) int {
		if !cfg.has(key) {
			if defOK {
				return def
			}
			ok = false
			b.c.add(Error, es, b.cfgPath, where+key, "absent: the engine would take Qwen3Config's default, which is not this draft's")
			return 0
		}
		n, isInt := integer(cfg[key])
		if !isInt || n <= 0 {
			ok = false
			b.c.add(Error, es, b.cfgPath, where+key, fmt.Sprintf("%v is not a positive integer", cfg[key]))
			return 0
		}
		return n
	}
	var g blockGeometry
	g.H = get("hidden_size", 0, false)
	g.I = get("intermediate_size", 0, false)
	g.nq = get("num_attention_heads", 0, false)
	g.nkv = get("num_key_value_heads", g.nq, true)
	g.hd = get("head_dim", g.H/max(g.nq, 1), true)
	g.V = get("vocab_size", 0, false)
	g.layers = get("num_hidden_layers", 0, false)
	g.N, g.TH = g.V, g.H
	if cfg.has("draft_vocab_size") {
		g.N = get("draft_vocab_size", 0, false)
	}
	if cfg.has("target_hidden_size") {
		g.TH = get("target_hidden_size", 0, false)
	}
	return g, ok
}

// describe settles what the export describes, from drafter.json where it
// records it (the training run is the truth), else from the export itself.
func (b *blockCheck) describe() {
	p := b.c.prov
	flat := b.flat()
	b.draftLayers, _ = integer(flat["num_hidden_layers"])
	// Layer ids, as hidden_states indices.
	if p != nil {
		if ids, ok := p.o.ints("feature_layers"); ok && len(ids) > 0 {
			b.ids, b.idsFrom = ids, p.path+" feature_layers"
		}
	}
	if b.ids == nil {
		// The export's own spelling of the ids it was trained on.
		var (
			obj object
			key string
			sp  layerids.Spelling
		)
		switch {
		case b.speculators:
			obj, key, sp = b.top, keyAuxLayerIDs, layerids.SpeculatorsAux
		case b.top.obj(keyDFlashConfig).has(keyTargetLayerIDs):
			obj, key, sp = b.top.obj(keyDFlashConfig), keyTargetLayerIDs, layerids.DFlashTarget
		case b.top.has(keyTargetLayerIDs):
			obj, key, sp = b.top, keyTargetLayerIDs, layerids.DeepSpecTarget
		}
		switch ids, ok := obj.ints(key); {
		case key != "" && ok && len(ids) > 0:
			hf, err := hfIndices(sp, ids, b.L)
			if err != nil {
				b.c.add(Error, b.c.engines, b.cfgPath, sp.String(), err.Error())
			} else {
				b.ids, b.idsFrom = hf, sp.String()+" as hidden_states"
			}
		case key != "":
			b.c.add(Error, b.c.engines, b.cfgPath, sp.String(), fmt.Sprintf("%v is not a non-empty list of integers", obj[key]))
		case b.L > 0 && b.draftLayers > 0:
			// z-lab's build_target_layer_ids: what the reference model
			// captures for a config without ids.
			if hf, err := hfIndices(layerids.DFlashTarget, layerids.DFlashDefault(b.L, b.draftLayers), b.L); err == nil {
				b.ids, b.idsFrom = hf, fmt.Sprintf("z-lab's default ids for %d target and %d draft layers, as hidden_states", b.L, b.draftLayers)
			}
		}
	}
	// Block size.
	if p != nil {
		if n, ok := integer(p.o[keyBlockSize]); ok && n > 0 {
			b.block, b.blockFrom = n, p.path+" "+keyBlockSize
		}
	}
	if b.block == 0 {
		if n, ok := integer(b.top[keyBlockSize]); ok && n > 0 {
			b.block, b.blockFrom = n, keyBlockSize
		} else if n, ok := integer(b.top.obj(keyDFlashConfig)[keyBlockSize]); ok && n > 0 {
			b.block, b.blockFrom = n, keyDFlashConfig+"."+keyBlockSize
		}
	}
	// Intra-block causality: drafter.json's record of the training mask,
	// else what the layout's own trainer means by its keys (z-lab: block
	// attention bidirectional, sliding layers causal, dflash_config.causal
	// overriding; speculators: full layers bidirectional, sliding layers
	// causal unless sliding_window_non_causal).
	types := flat.strs(keyLayerTypes)
	n := max(b.draftLayers, 0)
	b.causal = make([]bool, n)
	if p != nil {
		if v, ok := p.o["causal"].(bool); ok {
			for i := range b.causal {
				b.causal[i] = v
			}
			b.causalFrom = p.path + " causal"
		}
	}
	if b.causalFrom == "" {
		for i := range b.causal {
			b.causal[i] = i < len(types) && types[i] == slidingAttention
		}
		b.causalFrom = "layer_types (sliding layers causal, full layers bidirectional)"
		switch {
		case flat["is_causal"] != nil:
			// What vLLM (and drafter's own exporters) read first.
			for i := range b.causal {
				b.causal[i] = truthy(flat["is_causal"])
			}
			b.causalFrom = "is_causal"
		case b.speculators && truthy(b.top[keyNonCausal]):
			for i := range b.causal {
				b.causal[i] = false
			}
			b.causalFrom = keyNonCausal + " true (every layer bidirectional)"
		case !b.speculators && b.top.obj(keyDFlashConfig)["causal"] != nil:
			for i := range b.causal {
				b.causal[i] = truthy(b.top.obj(keyDFlashConfig)["causal"])
			}
			b.causalFrom = keyDFlashConfig + ".causal"
		}
	}
	// Label layout.
	b.shifted, b.shiftedFrom = b.m.shifted(), fmt.Sprintf("the %s layout", b.m)
	if p != nil {
		if v, ok := p.o[keySampleFromAnchor].(bool); ok {
			b.shifted, b.shiftedFrom = v, p.path+" "+keySampleFromAnchor
		} else if meth := p.o.str("method"); meth == string(blockDFlash) || meth == string(blockDSpark) {
			b.shifted, b.shiftedFrom = blockMethod(meth).shifted(), p.path+" method "+meth
		}
	}
	b.evidence()
}

// evidence reports what in the export contradicts the method its layout
// declares: a DFlash-declared export carrying DSpark's shifted-label layout
// (sample_from_anchor true, dspark_bonus_anchor false, a Qwen3DSparkModel
// architecture, Markov or confidence keys or tensors), or the reverse. Each
// engine would run the declared layout on weights trained for the other.
func (b *blockCheck) evidence() {
	// clue is one thing in the export that belongs to one label layout.
	type clue struct{ file, key, what string }
	var dspark, dflash []clue
	dc := b.top.obj(keyDFlashConfig)
	for _, o := range []struct {
		obj  object
		pref string
	}{{b.top, ""}, {dc, keyDFlashConfig + "."}} {
		if v, present := o.obj[keySampleFromAnchor]; present && v != nil {
			c := clue{b.cfgPath, o.pref + keySampleFromAnchor, fmt.Sprintf("%s%s %v", o.pref, keySampleFromAnchor, truthy(v))}
			if truthy(v) {
				dspark = append(dspark, c)
			} else {
				dflash = append(dflash, c)
			}
		}
		if v, present := o.obj[keyBonusAnchor]; present && v != nil {
			c := clue{b.cfgPath, o.pref + keyBonusAnchor, fmt.Sprintf("%s%s %v", o.pref, keyBonusAnchor, truthy(v))}
			if truthy(v) {
				dflash = append(dflash, c)
			} else {
				dspark = append(dspark, c)
			}
		}
	}
	archs := b.top.strs("architectures")
	if slices.Contains(archs, "Qwen3DSparkModel") {
		dspark = append(dspark, clue{b.cfgPath, "architectures", "architectures Qwen3DSparkModel"})
	}
	if slices.Contains(archs, "DFlashDraftModel") {
		dflash = append(dflash, clue{b.cfgPath, "architectures", "architectures DFlashDraftModel"})
	}
	if b.m == blockDFlash {
		for _, k := range []string{"markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov"} {
			if b.top.has(k) {
				dspark = append(dspark, clue{b.cfgPath, k, "the DSpark key " + k})
			}
		}
		for _, n := range b.w.sortedNames() {
			if isDSparkName(n) {
				dspark = append(dspark, clue{b.w.file, n, "the DSpark tensor " + n})
				break
			}
		}
	}
	against, other := dspark, blockDSpark
	if b.m == blockDSpark {
		against, other = dflash, blockDFlash
	}
	if len(against) == 0 {
		return
	}
	whats := make([]string, len(against))
	for i, c := range against {
		whats[i] = c.what
	}
	b.c.add(Error, b.c.engines, against[0].file, against[0].key, fmt.Sprintf("the export is laid out as %s (%s), but %s belong to %s: the engines run %s, and a draft trained for the other layout loads without a word and drafts every token one position off (acceptance near 1)",
		b.m, b.layoutWhat(), strings.Join(whats, ", "), other, labelName(b.m.shifted())))
}

// layoutWhat says what declares the export's method.
func (b *blockCheck) layoutWhat() string {
	if b.speculators {
		return "speculators_model_type " + string(b.m)
	}
	if b.m == blockDSpark {
		return "architectures Qwen3DSparkModel"
	}
	return "architectures DFlashDraftModel"
}

// view resolves the config as engine e does; nil when the geometry cannot
// be read (reported).
func (b *blockCheck) view(e Engine) *blockView {
	es := []Engine{e}
	v := &blockView{engine: e}
	switch e {
	case VLLM:
		cfg := b.flat()
		where := ""
		if b.speculators {
			where = "transformer_layer_config."
		}
		g, ok := b.geometry(es, cfg, where)
		if !ok {
			return nil
		}
		v.g = g
		b.vllmView(v, cfg)
	case SGLang:
		g, ok := b.geometry(es, b.top, "")
		if !ok {
			return nil
		}
		// SGLang's fc is [H, features*H] (dflash.py DFlashDraftModel,
		// qwen3_dspark.py Qwen3DSparkBackbone): it has no
		// target_hidden_size.
		g.TH = g.H
		v.g = g
		if b.m == blockDSpark {
			b.sglangDSparkView(v)
		} else {
			b.sglangView(v)
		}
	case TRTLLM:
		g, ok := b.geometry(es, b.top, "")
		if !ok {
			return nil
		}
		v.g = g
		b.trtllmView(v)
	}
	return v
}

// vllmView fills v as vLLM resolves the (translated) config cfg.
//
// Layer ids: get_eagle3_aux_layers_from_config
// (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py) takes, in order, the
// top-level eagle_aux_hidden_state_layer_ids verbatim (hidden_states
// indices), dflash_config.target_layer_ids + 1, dspark_target_layer_ids + 1,
// the top-level target_layer_ids + 1 (DeepSpec's dense DSpark), and
// dflash_config/eagle_config layer_ids verbatim; with none, the target's
// EAGLE-3 default (2, L//2, L-3), with fc sized for num_hidden_layers
// features. fc is [hidden_size, features x (target_hidden_size or
// hidden_size)] (qwen3_dflash.py _get_dflash_fc_input_size).
//
// Block size: vLLM never reads block_size; the block is
// num_speculative_tokens (+1 for DFlash's bonus slot).
//
// Mask token: dflash_config (merged over eagle_config) mask_token_id, else
// the top-level one (DFlashQwen3Model.__init__).
//
// Causality per layer (_dflash_layer_causal): top-level is_causal, else
// dflash_config.causal, else causal only for sliding_attention layers.
//
// Labels: a DFlashDraftModel runs DFlash's layout; a Qwen3DSparkModel runs
// sample-from-anchor unless dspark_bonus_anchor is true
// (v1/worker/gpu/spec_decode/dspark/speculator.py).
func (b *blockCheck) vllmView(v *blockView, cfg object) {
	dc := cfg.obj(keyDFlashConfig)
	v.fcWidth = v.g.TH
	type src struct {
		key string
		ids []int
		ok  bool
		sp  layerids.Spelling
	}
	get := func(o object, key string) ([]int, bool) {
		ids, ok := o.ints(key)
		return ids, ok && len(ids) > 0
	}
	var srcs []src
	for _, s := range []struct {
		o      object
		key    string
		prefix string
		sp     layerids.Spelling
	}{
		{cfg, keyLayerIDs, "", layerids.EAGLEAux},
		{dc, keyTargetLayerIDs, keyDFlashConfig + ".", layerids.DFlashTarget},
		{cfg, "dspark_target_layer_ids", "", layerids.DeepSpecTarget},
		{cfg, keyTargetLayerIDs, "", layerids.DeepSpecTarget},
		{dc, "layer_ids", keyDFlashConfig + ".", layerids.EAGLEAux},
		{cfg.obj("eagle_config"), "layer_ids", "eagle_config.", layerids.EAGLEAux},
	} {
		ids, ok := get(s.o, s.key)
		srcs = append(srcs, src{s.prefix + s.key, ids, ok, s.sp})
	}
	v.features = v.g.layers
	for _, s := range srcs {
		if !s.ok {
			continue
		}
		v.idsKey, v.idsKnown, v.features = s.key, true, len(s.ids)
		hf, err := hfIndices(s.sp, s.ids, b.L)
		if err != nil {
			b.c.add(Error, []Engine{VLLM}, b.cfgPath, s.key, "vLLM captures by this key: "+err.Error())
			break
		}
		v.ids = hf
		break
	}
	if v.ids == nil {
		v.idsKey = keyDFlashConfig + "." + keyTargetLayerIDs
		v.idsWhy = fmt.Sprintf("absent: vLLM's get_eagle3_aux_layers_from_config finds no ids, so the target captures its EAGLE-3 default hidden_states (2, L//2, L-3) and fc is sized for num_hidden_layers (%d) features", v.g.layers)
		if b.L > 0 {
			v.ids, v.idsKnown = defaultLayers(b.L), true
		}
	}
	if b.speculators {
		v.idsKey = keyAuxLayerIDs
	}
	if id, key, ok := firstInt(dc, cfg, keyMaskTokenID); ok {
		v.mask, v.maskKey = id, key
		if b.speculators {
			v.maskKey = keyMaskTokenID // the key as the export spells it
		}
	}
	v.causal = make([]bool, v.g.layers)
	types := cfg.strs(keyLayerTypes)
	for i := range v.causal {
		switch {
		case cfg["is_causal"] != nil:
			v.causal[i] = truthy(cfg["is_causal"])
		case dc["causal"] != nil:
			v.causal[i] = truthy(dc["causal"])
		default:
			v.causal[i] = i < len(types) && types[i] == slidingAttention
		}
	}
	switch {
	case cfg["is_causal"] != nil:
		v.causalWhy = "vLLM's _dflash_layer_causal (qwen3_dflash.py) takes the top-level is_causal for every layer"
	case dc["causal"] != nil && b.speculators:
		v.causalWhy = "vLLM's update_dflash sets dflash_config.causal = not " + keyNonCausal + " (absent: non-causal), and _dflash_layer_causal (qwen3_dflash.py) applies it to every layer, full-attention ones included"
	case dc["causal"] != nil:
		v.causalWhy = "vLLM's _dflash_layer_causal (qwen3_dflash.py) applies dflash_config.causal to every layer"
	default:
		v.causalWhy = "vLLM's _dflash_layer_causal (qwen3_dflash.py) makes only sliding_attention layers causal when neither is_causal nor dflash_config.causal is set"
	}
	v.shiftedKnown = true
	if slices.Contains(cfg.strs("architectures"), "Qwen3DSparkModel") {
		v.shifted = !truthy(cfg[keyBonusAnchor])
		v.shiftedWhy = "vLLM's DSparkSpeculator drafts from the anchor unless dspark_bonus_anchor is true"
		if b.speculators {
			v.shiftedWhy = "vLLM's update_dspark sets dspark_bonus_anchor = not sample_from_anchor (default true, vLLM #48639), and DSparkSpeculator drafts from the anchor unless dspark_bonus_anchor"
		}
	} else {
		v.shifted = false
		v.shiftedWhy = "vLLM runs a DFlashDraftModel with the bonus token in slot 0 (DFlashSpeculator)"
		if b.speculators {
			v.shiftedWhy = "vLLM's update_dflash maps speculators_model_type dflash to DFlashDraftModel and never reads sample_from_anchor"
		}
	}
}

// sglangView fills v as SGLang resolves a native config:
// parse_dflash_draft_config (python/sglang/srt/speculative/dflash_utils.py)
// reads num_target_layers, block_size, target_layer_ids and mask_token_id
// from dflash_config first, then the top level. Absent ids are
// build_target_layer_ids(num_target_layers, num_hidden_layers), and absent
// num_target_layers is the DRAFT's num_hidden_layers (DFlashDraftModel);
// ids must lie in [0, num_target_layers) and count layer outputs (captured
// at hidden_states id+1). An absent block size is 16 (resolve_block_size);
// an absent mask token id falls back to the tokenizer's "<|MASK|>". The
// attention type is ENCODER_ONLY (bidirectional) for full_attention
// layers and DECODER (causal) for sliding_attention ones
// (_get_dflash_layer_attention_params); no causal flag is read.
func (b *blockCheck) sglangView(v *blockView) {
	es := []Engine{SGLang}
	dc := b.top.obj(keyDFlashConfig)
	v.fcWidth = v.g.H
	numTarget, ntKey := v.g.layers, "num_hidden_layers (the draft's)"
	if n, key, ok := firstInt(dc, b.top, keyNumTargetLayers); ok {
		numTarget, ntKey = n, key
	} else {
		msg := fmt.Sprintf("absent: SGLang's DFlashDraftModel takes the draft's num_hidden_layers (%d) as the target's layer count, for its default ids and its range check", v.g.layers)
		lv := Note
		if b.L > 0 && b.L != v.g.layers {
			msg += fmt.Sprintf(", but the target has %d", b.L)
			lv = Error
		}
		b.c.add(lv, es, b.cfgPath, keyNumTargetLayers, msg)
	}
	key := ""
	var raw []int
	if dc.has(keyTargetLayerIDs) {
		raw, _ = dc.ints(keyTargetLayerIDs)
		key = keyDFlashConfig + "." + keyTargetLayerIDs
	} else if b.top.has(keyTargetLayerIDs) {
		raw, _ = b.top.ints(keyTargetLayerIDs)
		key = keyTargetLayerIDs
	}
	v.idsKnown = true
	if key == "" {
		raw = layerids.DFlashDefault(numTarget, v.g.layers)
		key = keyDFlashConfig + "." + keyTargetLayerIDs
		v.idsWhy = fmt.Sprintf("absent: SGLang takes build_target_layer_ids(%s %d, %d draft layers) = outputs %v", ntKey, numTarget, v.g.layers, raw)
	}
	for _, id := range raw {
		if id < 0 || id >= numTarget {
			b.c.add(Error, es, b.cfgPath, key, fmt.Sprintf("%v: id %d outside [0, %d): SGLang's resolve_target_layer_ids refuses the draft (its ids count layer outputs, and %d is %s)", raw, id, numTarget, numTarget, ntKey))
			break
		}
	}
	v.idsKey, v.features = key, len(raw)
	// An id SGLang refuses (reported above) has no hidden_states index.
	v.ids, _ = hfIndices(layerids.DFlashTarget, raw, 0)
	if n, k, ok := firstInt(dc, b.top, keyBlockSize); ok {
		v.block, v.blockKey = n, k
	} else {
		v.block, v.blockKey = 16, keyBlockSize+" (absent: SGLang's resolve_block_size default 16)"
	}
	if id, k, ok := firstInt(dc, b.top, keyMaskTokenID); ok {
		v.mask, v.maskKey = id, k
	}
	v.shiftedKnown, v.shifted = true, false
	v.shiftedWhy = "SGLang's DFlash worker drafts slots 1..B-1 after the bonus token (dflash_utils.py compute_dflash_correct_drafts_and_bonus)"
	v.causal, v.causalWhy = sglangCausal(b.top, v.g.layers)
}

// sglangCausal is SGLang's intra-block causality per layer: its DFlash
// attention (_get_dflash_layer_attention_params in models/dflash.py, which
// its Qwen3 DSpark layers inherit) is bidirectional for full_attention
// layers and causal for sliding_attention ones, and reads no causal flag.
func sglangCausal(cfg object, layers int) ([]bool, string) {
	types := cfg.strs(keyLayerTypes)
	causal := make([]bool, layers)
	for i := range causal {
		causal[i] = i < len(types) && types[i] == slidingAttention
	}
	return causal, "SGLang's DFlash attention (_get_dflash_layer_attention_params in models/dflash.py, inherited by its Qwen3 DSpark layers) is bidirectional for full_attention layers and causal for sliding_attention ones, and reads no causal flag"
}

// trtllmView fills what TensorRT-LLM's DFlash is known to read: the mask
// token id, from DFlashDecodingConfig.mask_token_id, else the draft model's
// dflash_config.mask_token_id or mask_token_id (DFlashWorker in
// tensorrt_llm/_torch/speculative/dflash.py). How it reads the layer ids,
// block size and causality, and the weight names it loads, are not verified
// (methods.md, open points: PR #12794's field names), so those are noted
// for the operator to pass explicitly rather than checked.
func (b *blockCheck) trtllmView(v *blockView) {
	if id, k, ok := firstInt(b.top.obj(keyDFlashConfig), b.top, keyMaskTokenID); ok {
		v.mask, v.maskKey = id, k
	}
	msg := "TensorRT-LLM's DFlash (DFlashDecodingConfig, PR #12794): how it reads target_layer_ids, block_size and intra-block causality, and which weight names it loads, were not verified, so they are not checked here"
	if b.ids != nil {
		if out, err := layerids.Encode(layerids.DFlashTarget, b.ids); err == nil {
			msg += fmt.Sprintf("; serve with the layer outputs %v (hidden_states %v, from %s)", out, b.ids, b.idsFrom)
		}
	}
	if b.block > 0 {
		msg += fmt.Sprintf(" and max_draft_len %d (block %d)", b.block-1, b.block)
	}
	b.c.add(Note, []Engine{TRTLLM}, b.cfgPath, "", msg)
}

// firstInt returns key's integer from the first of os that has it, and the
// key's spelling ("dflash_config.key" for the first object when it is a
// dflash_config, else key).
func firstInt(dc, top object, key string) (int, string, bool) {
	if dc.has(key) {
		n, ok := integer(dc[key])
		return n, keyDFlashConfig + "." + key, ok
	}
	if top.has(key) {
		n, ok := integer(top[key])
		return n, key, ok
	}
	return 0, "", false
}

// layerIDs compares the hidden_states engine v captures with those the
// export describes.
func (b *blockCheck) layerIDs(v *blockView) {
	es := []Engine{v.engine}
	if v.engine == TRTLLM {
		return
	}
	for i, id := range v.ids {
		if i > 0 && id <= v.ids[i-1] {
			b.c.add(Error, es, b.cfgPath, v.idsKey, fmt.Sprintf("the engine captures hidden_states %v: not strictly increasing (each target layer once, in order)", v.ids))
			break
		}
		if b.L > 0 && (id < 0 || id > b.L) {
			b.c.add(Error, es, b.cfgPath, v.idsKey, fmt.Sprintf("the engine captures hidden_states %v: %d is outside the target's %d layers (indices 0..%d)", v.ids, id, b.L, b.L))
			break
		}
	}
	switch {
	case v.idsUnverified:
		// Only the feature count below.
	case v.idsKnown && v.ids == nil:
		// The engine's ids have no hidden_states index: reported where read.
	case !v.idsKnown && b.ids != nil:
		b.c.add(Error, es, b.cfgPath, v.idsKey, fmt.Sprintf("absent: the engine captures the target's default layers, which nothing here shows equal to the export's hidden_states %v (%s); write the ids", b.ids, b.idsFrom))
	case !v.idsKnown:
		b.c.add(Error, es, b.cfgPath, v.idsKey, "absent, and no target layer count is recorded: the engine captures a default nothing here can check")
	case b.ids != nil && !slices.Equal(v.ids, b.ids):
		msg := fmt.Sprintf("the engine captures hidden_states %v, but the export describes %v (%s)", v.ids, b.ids, b.idsFrom)
		if v.idsWhy != "" {
			msg = v.idsWhy + "; " + msg
		}
		if d := offBy(v.ids, b.ids); d != 0 {
			msg += fmt.Sprintf(": off by %+d, the signature of one id spelling read as another (dflash_config.target_layer_ids and DeepSpec's target_layer_ids count layer outputs, = hidden_states index - 1; speculators' aux_hidden_state_layer_ids are hidden_states indices); shapes still match, so the draft loads and accepts almost nothing", d)
		}
		b.c.add(Error, es, b.cfgPath, v.idsKey, msg)
	}
	if v.features > 0 && b.ids != nil && v.features != len(b.ids) {
		b.c.add(Error, es, b.cfgPath, v.idsKey, fmt.Sprintf("the engine sizes fc for %d target features, but the export describes %d", v.features, len(b.ids)))
	}
	if b.speculators && v.engine == VLLM && b.top.has(keyAuxLayerIDs) {
		if _, ok := b.top.ints(keyAuxLayerIDs); !ok {
			b.c.add(Error, es, b.cfgPath, keyAuxLayerIDs, fmt.Sprintf("%v is not a list of integers", b.top[keyAuxLayerIDs]))
		}
	}
}

// offBy returns d when got[i] = want[i] + d for every i (d != 0), else 0.
func offBy(got, want []int) int {
	if len(got) != len(want) || len(got) == 0 {
		return 0
	}
	d := got[0] - want[0]
	for i := range got {
		if got[i]-want[i] != d {
			return 0
		}
	}
	return d
}

// formatTargetLayers compares the config's num_target_layers (SGLang's
// target layer count for its default ids and range check; z-lab's for its
// default ids) with the target's layer count drafter.json records.
func (b *blockCheck) formatTargetLayers() {
	L := b.c.prov.targetLayers()
	if L == 0 {
		return
	}
	n, key, ok := firstInt(b.top.obj(keyDFlashConfig), b.top, keyNumTargetLayers)
	if ok && n != L {
		b.c.add(Error, b.c.engines, b.cfgPath, key, fmt.Sprintf("%d, but %s records a target of %d layers: SGLang and z-lab derive the default ids and SGLang bounds them by this count", n, b.c.prov.path, L))
	}
}

// formatBlockSize checks where the export writes its block size, for every
// engine checked: the native layouts' reference models read the top-level
// key (z-lab's DFlashDraftModel reads config.block_size and fails without
// it; DeepSpec's build_draft_config writes it there), SGLang reads
// dflash_config's first, and a speculators config records the trained
// block at the top level.
func (b *blockCheck) formatBlockSize() {
	es := b.c.engines
	top, inDC := b.top[keyBlockSize], b.top.obj(keyDFlashConfig)[keyBlockSize]
	ref := "z-lab's DFlashDraftModel (dflash/model.py) reads the top-level block_size and fails without it"
	others := "; SGLang takes 16 and vLLM never reads it"
	if b.m == blockDSpark {
		ref = "DeepSpec's build_draft_config writes it at the top level, where its model reads it"
		others = "; SGLang's Qwen3DSparkModel refuses the config and vLLM never reads it"
	}
	switch {
	case top != nil && inDC != nil:
		t, _ := integer(top)
		d, _ := integer(inDC)
		if t != d {
			b.c.add(Error, es, b.cfgPath, keyDFlashConfig+"."+keyBlockSize, fmt.Sprintf("%d, but the top-level block_size is %d: SGLang reads dflash_config's, and %s", d, t, ref))
		}
	case b.speculators && top == nil:
		b.c.add(Error, es, b.cfgPath, keyBlockSize, "absent: the speculators layout records the trained block here; vLLM's default num_speculative_tokens (speculators_config.proposal_methods[0].speculative_tokens) cannot be checked against it")
	case top == nil && inDC != nil:
		b.c.add(Error, es, b.cfgPath, keyBlockSize, "only in dflash_config: SGLang reads it there, but "+ref)
	case top == nil:
		b.c.add(Error, es, b.cfgPath, keyBlockSize, "absent: "+ref+others)
	}
}

// blockSize checks the block the engine runs against the one trained.
func (b *blockCheck) blockSize(v *blockView) {
	es := []Engine{v.engine}
	switch v.engine {
	case SGLang:
		if v.block == 0 {
			return // refused, reported by the view
		}
		if b.block > 0 && v.block != b.block {
			b.c.add(Error, es, b.cfgPath, keyBlockSize, fmt.Sprintf("SGLang runs blocks of %d (%s), but the export describes %d (%s)", v.block, v.blockKey, b.block, b.blockFrom))
		} else if b.block == 0 && v.block == 16 {
			b.c.add(Error, es, b.cfgPath, keyBlockSize, "absent everywhere: SGLang runs blocks of 16, which nothing here shows is the trained block")
		}
	case VLLM:
		if b.block > 0 && !b.speculators {
			drafts := b.block - 1
			if b.shifted {
				drafts = b.block
			}
			b.c.add(Note, es, b.cfgPath, keyBlockSize, fmt.Sprintf("vLLM does not read block_size: serve with num_speculative_tokens %d (block %d, %s)", drafts, b.block, labelName(b.shifted)))
		}
	}
}

// maskToken checks the mask token id the engine feeds the masked slots.
func (b *blockCheck) maskToken(v *blockView) {
	es := []Engine{v.engine}
	key := keyDFlashConfig + "." + keyMaskTokenID
	if b.speculators || b.m == blockDSpark && !b.top.obj(keyDFlashConfig).has(keyMaskTokenID) {
		key = keyMaskTokenID
	}
	if v.maskKey == "" && v.engine == SGLang && b.m == blockDSpark {
		return // refused: reported by the view
	}
	if v.maskKey == "" {
		msg := map[Engine]string{
			VLLM:   "absent: vLLM's DFlash model has no mask token id to feed the masked slots (and update_dflash raises KeyError on a speculators config without it)",
			SGLang: "absent: SGLang's parse_dflash_draft_config falls back to the tokenizer's \"<|MASK|>\" token, which is not the row the draft was trained with",
			TRTLLM: "absent: TensorRT-LLM's DFlashWorker refuses to start unless DFlashDecodingConfig.mask_token_id is given",
		}[v.engine]
		b.c.add(Error, es, b.cfgPath, key, msg)
		return
	}
	if v.mask < 0 || v.mask >= v.g.V {
		b.c.add(Error, es, b.cfgPath, v.maskKey, fmt.Sprintf("%d is outside the vocabulary [0, %d): the engine embeds the masked slots with the embedding row of this id", v.mask, v.g.V))
	}
	if p := b.c.prov; p != nil {
		if n, ok := integer(p.o[keyMaskTokenID]); ok && n != v.mask {
			b.c.add(Error, es, b.cfgPath, v.maskKey, fmt.Sprintf("%d, but %s records mask_token_id %d: the engine feeds another embedding row than the one trained", v.mask, p.path, n))
		}
	}
}

// causality compares the intra-block causality the engine runs per layer
// with the mask the export describes.
func (b *blockCheck) causality(v *blockView) {
	if v.causal == nil || len(b.causal) != len(v.causal) {
		return
	}
	for i := range v.causal {
		if v.causal[i] != b.causal[i] {
			key := keyDFlashConfig + ".causal"
			if b.speculators {
				key = keyNonCausal
			}
			b.c.add(Error, []Engine{v.engine}, b.cfgPath, key, fmt.Sprintf("the engine runs layer %d's block attention %s, but the export describes %s (%s): %s",
				i, causalWord(v.causal[i]), causalWord(b.causal[i]), b.causalFrom, v.causalWhy))
			return
		}
	}
}

func causalWord(c bool) string {
	if c {
		return "causal"
	}
	return "bidirectional"
}

// labels compares the label layout the engine drafts with to the one the
// export describes.
func (b *blockCheck) labels(v *blockView) {
	if !v.shiftedKnown || v.shifted == b.shifted {
		return
	}
	key := keySampleFromAnchor
	if !b.speculators && b.m == blockDSpark {
		key = keyBonusAnchor
	} else if !b.speculators {
		key = "architectures"
	}
	b.c.add(Error, []Engine{v.engine}, b.cfgPath, key, fmt.Sprintf("the engine drafts with %s, but the export describes %s (%s): %s; a mismatch loads without a word and accepts almost nothing",
		labelName(v.shifted), labelName(b.shifted), b.shiftedFrom, v.shiftedWhy))
}

// tensors checks the weights against the parameters engine v builds.
func (b *blockCheck) tensors(v *blockView) {
	if v.engine == TRTLLM {
		return // not verified: noted in the view
	}
	es := []Engine{v.engine}
	g := v.g
	wants := map[string]want{
		"fc.weight":          {shape: []int{g.H, v.features * v.fcWidth}, why: fmt.Sprintf("hidden_size %d x %d features x %d", g.H, v.features, v.fcWidth)},
		"hidden_norm.weight": {shape: []int{g.H}, why: "hidden_size"},
		"norm.weight":        {shape: []int{g.H}, why: "hidden_size"},
	}
	for i := range g.layers {
		p := fmt.Sprintf("layers.%d.", i)
		wants[p+"input_layernorm.weight"] = want{shape: []int{g.H}, why: "hidden_size"}
		wants[p+"post_attention_layernorm.weight"] = want{shape: []int{g.H}, why: "hidden_size"}
		wants[p+"self_attn.q_proj.weight"] = want{shape: []int{g.nq * g.hd, g.H}, why: fmt.Sprintf("num_attention_heads %d x head_dim %d, hidden_size", g.nq, g.hd)}
		wants[p+"self_attn.k_proj.weight"] = want{shape: []int{g.nkv * g.hd, g.H}, why: fmt.Sprintf("num_key_value_heads %d x head_dim %d, hidden_size", g.nkv, g.hd)}
		wants[p+"self_attn.v_proj.weight"] = want{shape: []int{g.nkv * g.hd, g.H}, why: fmt.Sprintf("num_key_value_heads %d x head_dim %d, hidden_size", g.nkv, g.hd)}
		wants[p+"self_attn.o_proj.weight"] = want{shape: []int{g.H, g.nq * g.hd}, why: "hidden_size, num_attention_heads x head_dim"}
		wants[p+"self_attn.q_norm.weight"] = want{shape: []int{g.hd}, why: "head_dim"}
		wants[p+"self_attn.k_norm.weight"] = want{shape: []int{g.hd}, why: "head_dim"}
		wants[p+"mlp.gate_proj.weight"] = want{shape: []int{g.I, g.H}, why: "intermediate_size, hidden_size"}
		wants[p+"mlp.up_proj.weight"] = want{shape: []int{g.I, g.H}, why: "intermediate_size, hidden_size"}
		wants[p+"mlp.down_proj.weight"] = want{shape: []int{g.H, g.I}, why: "hidden_size, intermediate_size"}
	}
	if v.engine == VLLM {
		// vLLM's DFlashQwen3ForCausalLM.load_weights: own embed_tokens and
		// lm_head are optional (the target's are shared otherwise), d2t
		// maps a reduced draft vocabulary, t2d is skipped.
		wants["embed_tokens.weight"] = want{shape: []int{g.V, g.H}, optional: true, why: "vocab_size, hidden_size"}
		wants["lm_head.weight"] = want{shape: []int{g.N, g.H}, optional: g.N == g.V, why: fmt.Sprintf("draft_vocab_size %d below vocab_size %d: the target's lm_head cannot be shared", g.N, g.V)}
		wants["d2t"] = want{shape: []int{g.N}, kind: intTensor, optional: g.N == g.V, why: fmt.Sprintf("draft_vocab_size %d differs from vocab_size %d: vLLM maps draft ids through d2t (zeros when not loaded: draft id i read as target id i)", g.N, g.V)}
	}
	if b.m == blockDSpark {
		b.dsparkWants(v, wants)
	}
	// Names the engine drops before looking (reported below where that
	// matters): t2d (no engine reads it), a mask_embedding tensor, and for
	// SGLang, whose DFlash draft uses the target's embedding and head, the
	// draft's own.
	dropped := func(name string) bool {
		if b.m == blockDSpark && v.engine == SGLang {
			return b.sglangDSparkDrops(name)
		}
		switch name {
		case "t2d", "mask_embedding":
			return true
		case "embed_tokens.weight", "lm_head.weight", "d2t":
			return v.engine == SGLang
		}
		return false
	}
	rename := func(name string) string {
		name = strings.TrimPrefix(name, "model.")
		if dropped(name) {
			return ""
		}
		return name
	}
	unused := func(name string) string {
		what := "not a parameter of the engine's " + string(b.m) + " model"
		if b.m == blockDFlash && isDSparkName(name) {
			what = "a DSpark head in a DFlash export: the engine's DFlash model has no such parameter"
		}
		if v.engine == VLLM && b.m == blockDSpark && strings.HasPrefix(name, "confidence_head.") {
			return what + ": vLLM's Qwen3DSparkForCausalLM.load_weights drops confidence_head.* without a word when enable_confidence_head is false or absent, so the scheduler has no confidence head"
		}
		switch {
		case v.engine == VLLM:
			return what + ": vLLM refuses the checkpoint (AutoWeightsLoader raises \"There is no module or parameter named ...\")"
		case b.m == blockDSpark:
			return what + ": SGLang's Qwen3DSparkModel refuses the checkpoint (resolve_qwen3_dspark_weight raises for a name it has no destination for)"
		}
		return what + ": SGLang skips it without a word (DFlashDraftModel.load_weights ignores names it has no parameter for)"
	}
	missing := map[Engine]string{
		VLLM:   "vLLM's AutoWeightsLoader loads the names the file has and never asks for those it lacks, so the parameter keeps its initial value",
		SGLang: "SGLang's DFlashDraftModel.load_weights loads the names the file has and never asks for those it lacks, so the parameter keeps its initial value",
	}[v.engine]
	if v.engine == SGLang && b.m == blockDSpark {
		missing = "SGLang's Qwen3DSparkModel.load_weights refuses a checkpoint that leaves a parameter without a weight"
	}
	b.c.compare(es, b.w, wants, rename, unused, missing)
	if v.engine == SGLang && b.m == blockDFlash {
		for _, n := range []string{"embed_tokens.weight", "lm_head.weight", "d2t"} {
			if _, ok := b.w.infos[n]; !ok {
				continue
			}
			if g.N < g.V || n == "d2t" {
				b.c.add(Error, es, b.w.file, n, fmt.Sprintf("SGLang's DFlash draft has no embedding, lm_head or vocabulary map of its own and skips this without a word: it drafts over the target's full vocabulary with the target's head, not the draft's %d-token one", g.N))
			} else {
				b.c.add(Note, es, b.w.file, n, "SGLang's DFlash draft uses the target's embedding and lm_head and skips this without a word: the same drafter only when this is the target's frozen copy")
			}
		}
	}
	b.maskEmbedding(v)
}

// maskEmbedding checks a separately trained mask-slot embedding: vLLM
// substitutes mask_embedding.pt for the mask token's row (and drops a
// mask_embedding tensor in the weights: its loader maps the name to None
// unless the .pt file was found; DFlashQwen3ForCausalLM.load_weights);
// SGLang's DFlash model reads neither and embeds the mask slots with the
// target's row.
func (b *blockCheck) maskEmbedding(v *blockView) {
	es := []Engine{v.engine}
	if _, ok := b.w.infos["mask_embedding"]; ok {
		b.c.add(Error, es, b.w.file, "mask_embedding", "a trained mask-slot embedding in the weights: the engine drops it without a word (vLLM reads one only from mask_embedding.pt; SGLang never) and feeds the target's embedding row of mask_token_id")
	}
	if fileExists(filepath.Join(b.c.dir, "mask_embedding.pt")) && v.engine == SGLang {
		b.c.add(Error, es, filepath.Join(b.c.dir, "mask_embedding.pt"), "", "SGLang's DFlash model never reads mask_embedding.pt: it feeds the target's embedding row of mask_token_id, not the trained one")
	}
}

// speculatorsEnvelope checks what vLLM requires of any speculators config
// (SpeculatorsConfig.validate_speculators_config and
// extract_transformers_pre_trained_config in
// transformers_utils/configs/speculators/base.py) and of the method's
// update function, and notes the top-level keys it never carries over.
func (b *blockCheck) speculatorsEnvelope() {
	if !slices.Contains(b.c.engines, VLLM) {
		return
	}
	es := []Engine{VLLM}
	if b.top.obj("transformer_layer_config") == nil {
		b.c.add(Error, es, b.cfgPath, "transformer_layer_config", "absent or not an object: vLLM refuses the config (\"Must provide transformer_layer_config\")")
	}
	for _, k := range []string{keyAuxLayerIDs, keyMaskTokenID} {
		if _, present := b.top[k]; !present {
			b.c.add(Error, es, b.cfgPath, k, "absent: vLLM's update_"+string(b.m)+" (speculators/algos.py) indexes it and the config fails to load")
		}
	}
	sc := b.top.obj("speculators_config")
	pm, _ := sc["proposal_methods"].([]any)
	var first object
	if len(pm) > 0 {
		m, _ := pm[0].(map[string]any)
		first = object(m)
	}
	st, ok := integer(first["speculative_tokens"])
	if !ok {
		b.c.add(Error, es, b.cfgPath, "speculators_config.proposal_methods[0].speculative_tokens", "absent or not an integer: vLLM's validate_speculators_config refuses the config (it is the default num_speculative_tokens)")
	} else if bs, okB := integer(b.top[keyBlockSize]); okB && bs > 0 {
		shifted := b.m.shifted()
		if v, present := b.top[keySampleFromAnchor]; present && v != nil {
			shifted = truthy(v)
		}
		wantTok := bs - 1
		if shifted {
			wantTok = bs
		}
		if st != wantTok {
			b.c.add(Error, es, b.cfgPath, "speculators_config.proposal_methods[0].speculative_tokens", fmt.Sprintf("%d, but block_size %d with %s drafts %d tokens (speculators writes block_size, or block_size - 1 without sample_from_anchor): vLLM's default num_speculative_tokens would run another block than the trained one", st, bs, labelName(shifted), wantTok))
		}
	}
	if _, ok := sc.obj("verifier")["name_or_path"]; !ok {
		b.c.add(Error, es, b.cfgPath, "speculators_config.verifier.name_or_path", "absent: vLLM's validate_speculators_config refuses the config")
	}
	if _, present := b.top[keyNonCausal]; !present {
		b.c.add(Note, es, b.cfgPath, keyNonCausal, "absent: vLLM's update_dflash then sets dflash_config.causal false (every layer bidirectional), while speculators' own trainer reads absent as false (sliding layers causal); write it")
	}
	for _, k := range []string{"hidden_size", "num_hidden_layers", "vocab_size", keyLayerTypes, keyTargetLayerIDs, keyDFlashConfig} {
		if b.top.has(k) {
			b.c.add(Note, es, b.cfgPath, k, "top level of a speculators config: vLLM builds the model from transformer_layer_config plus the keys update_"+string(b.m)+" copies and ignores this one")
		}
	}
}

// jsonInt is an integer as readConfig decodes one, so that a translated
// config reads like a parsed one.
func jsonInt(n int) any { return json.Number(fmt.Sprint(n)) }

// hfIndices converts ids written as sp to hidden_states indices through
// layerids, checked against a target of numLayers layers when that is known
// (numLayers > 0) and only against the spelling's smallest id otherwise.
func hfIndices(sp layerids.Spelling, ids []int, numLayers int) ([]int, error) {
	if numLayers <= 0 {
		numLayers = math.MaxInt32
	}
	return layerids.Decode(sp, ids, numLayers)
}
