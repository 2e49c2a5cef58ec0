package exportcheck

import (
	"fmt"
	"slices"
	"strings"
)

// The DSpark layouts. Which engine loads which:
//
//   - native (DeepSpec's save_pretrained, architectures Qwen3DSparkModel,
//     top-level target_layer_ids counting layer outputs, markov_rank,
//     markov_head_type, enable_confidence_head, confidence_head_with_markov):
//     vLLM (model_executor/models/qwen3_dspark.py Qwen3DSparkForCausalLM)
//     and SGLang (python/sglang/srt/models/qwen3_dspark.py Qwen3DSparkModel,
//     driven by speculative/dspark_worker_v2.py DSparkWorkerV2; read at
//     sgl-project/sglang 2dd29f7 and 028b6e6, recent and still changing).
//   - speculators (speculators_model_type dspark): vLLM, through
//     update_dspark.
//
// TensorRT-LLM's DSPARK mode exists, but its config keys were not read
// (methods.md, open points): check-export has no rules for it.
var (
	dsparkNative = layout{method: "dspark", name: "native", loads: []Engine{VLLM, SGLang},
		why: map[Engine]string{
			TRTLLM: "TensorRT-LLM's DSPARK mode was not read (its config keys are unverified in methods.md), so check-export has no rules for it: nothing here says how it would load this draft",
		}}
	dsparkSpecs = layout{method: "dspark", name: "speculators", loads: []Engine{VLLM},
		why: map[Engine]string{
			SGLang: "SGLang reads a flat config.json (parse_dflash_draft_config and the model's hidden_size and the rest at the top level), where the speculators layout nests its geometry in transformer_layer_config; serve the native layout",
			TRTLLM: "TensorRT-LLM's DSPARK mode was not read (its config keys are unverified in methods.md), so check-export has no rules for it",
		}}
)

func init() {
	dsparkNative.check = func(c *checker) { checkBlockDrafter(c, blockDSpark, false) }
	dsparkSpecs.check = func(c *checker) { checkBlockDrafter(c, blockDSpark, true) }
}

// dsparkHead is the Markov and confidence head engine v builds, as
// Qwen3DSparkModel.__init__ (qwen3_dspark.py) reads the config: markov_rank
// (required), enable_confidence_head (default false) and
// confidence_head_with_markov (default false).
type dsparkHead struct {
	rank               int
	confidence, withMk bool
}

// dsparkHeadOf reads the head's switches from cfg (vLLM's view).
func dsparkHeadOf(cfg object) dsparkHead {
	r, _ := integer(cfg["markov_rank"])
	return dsparkHead{rank: r, confidence: truthy(cfg["enable_confidence_head"]), withMk: truthy(cfg["confidence_head_with_markov"])}
}

// dsparkConfig checks the DSpark keys engine v reads.
func (b *blockCheck) dsparkConfig(v *blockView) {
	if v.engine == SGLang {
		for _, n := range b.w.sortedNames() {
			if b.sglangDSparkDrops(n) {
				b.c.add(Error, []Engine{SGLang}, b.w.file, n, "a trained DSpark head SGLang's Qwen3DSparkModel does not build (markov_rank 0 or enable_confidence_head false): it drops the tensor with only a log line")
			}
		}
		return
	}
	if v.engine != VLLM {
		return
	}
	es := []Engine{VLLM}
	cfg := b.flat()
	if !cfg.has("markov_rank") {
		b.c.add(Error, es, b.cfgPath, "markov_rank", "absent: vLLM's Qwen3DSparkModel reads config.markov_rank to build the Markov head and fails without it")
	} else if r, ok := integer(cfg["markov_rank"]); !ok || r <= 0 {
		b.c.add(Error, es, b.cfgPath, "markov_rank", fmt.Sprintf("%v: vLLM builds a Markov head of this rank (DeepSpec writes 0 for its Markov-free DFlash baseline, which is a shifted-label model without a head, not one vLLM serves as DSpark)", cfg["markov_rank"]))
	}
	if t := cfg.str("markov_head_type"); cfg.has("markov_head_type") && t != "vanilla" {
		b.c.add(Error, es, b.cfgPath, "markov_head_type", fmt.Sprintf("%q: vLLM implements only the vanilla first-order head (W2 W1[prev]) and never reads this key; a %s head's extra weights make it refuse the checkpoint, and without them it runs another head than the trained one", t, t))
	} else if !cfg.has("markov_head_type") && !b.speculators {
		b.c.add(Note, es, b.cfgPath, "markov_head_type", "absent: vLLM runs the vanilla head (it never reads the key); DeepSpec writes it whenever markov_rank > 0")
	}
	h := dsparkHeadOf(cfg)
	_, hasConfW := b.w.infos["confidence_head.proj.weight"]
	if h.confidence && !hasConfW {
		b.c.add(Error, es, b.w.file, "confidence_head.proj.weight", "missing with enable_confidence_head true: vLLM's Qwen3DSparkForCausalLM.load_weights then drops the confidence head without a word (the scheduler gets no acceptance estimates)")
	}
	if !cfg.has("enable_confidence_head") && hasConfW {
		why := "absent"
		if b.speculators && b.top.has("enable_confidence_head") {
			why = "not carried over"
		}
		b.c.add(Error, es, b.cfgPath, "enable_confidence_head", why+": vLLM builds no confidence head (default false) and drops the file's confidence_head.* without a word")
	}
	if b.speculators && b.top.has("enable_confidence_head") {
		b.c.add(Note, es, b.cfgPath, "enable_confidence_head", "vLLM builds whose update_dspark copies only markov_rank and markov_head_type (the speculators translation as read) build no confidence head from this config and drop its weights without a word; drafting is unaffected, scheduling by confidence is not available")
	}
	if b.speculators {
		b.c.add(Note, es, b.cfgPath, "speculators_model_type", "dspark: vLLM builds whose update_dspark sets architectures DSparkDraftModel (the speculators translation as read) resolve it in the model registry to the DeepSeek-V4 DSpark class, not Qwen3DSparkModel; serve the native layout, or a build whose update_dspark writes Qwen3DSparkModel")
		switch v, present := b.top[keySampleFromAnchor]; {
		case !present || v == nil:
			b.c.add(Error, es, b.cfgPath, keySampleFromAnchor, "absent: vLLM builds disagree on the default (update_dspark: true since vLLM #48639, a hard-coded bonus anchor before it, false in some patched builds); write it")
		case truthy(v):
			b.c.add(Note, es, b.cfgPath, keySampleFromAnchor, "true: vLLM builds before #48639 (\"Support loading sample_from_anchor flag from speculators config\") hard-code dspark_bonus_anchor true in update_dspark and run this draft with DFlash's labels, one position off (acceptance near 1); serve with a build that has #48639")
		}
	}
	if p := b.c.prov; p != nil {
		for _, f := range []struct {
			key string
			got any
		}{{"markov_rank", h.rank}, {"enable_confidence_head", h.confidence}, {"confidence_head_with_markov", h.withMk}} {
			rec, present := p.o[f.key]
			if !present || rec == nil {
				continue
			}
			var want any = truthy(rec)
			if n, ok := integer(rec); ok {
				want = n
			}
			if want != f.got {
				b.c.add(Error, es, b.cfgPath, f.key, fmt.Sprintf("vLLM runs %s %v, but %s records %v", f.key, f.got, p.path, want))
			}
		}
	}
}

// dsparkWants adds the Markov and confidence heads' parameters engine v
// builds: markov_head.markov_w1 an Embedding [vocab_size, r] and
// markov_head.markov_w2 a head [draft_vocab_size, r] (DSparkMarkovHead), and,
// with enable_confidence_head, confidence_head.proj a Linear(H (+ r with
// confidence_head_with_markov), 1) with bias (DSparkConfidenceHead).
func (b *blockCheck) dsparkWants(v *blockView, wants map[string]want) {
	if v.engine == SGLang {
		// Qwen3DSparkModel builds its own embedding and lm_head over
		// vocab_size, and both heads over vocab_size, only when enabled.
		wants["embed_tokens.weight"] = want{shape: []int{v.g.V, v.g.H}, why: "vocab_size, hidden_size (SGLang's Qwen3DSparkModel owns its embedding)"}
		wants["lm_head.weight"] = want{shape: []int{v.g.V, v.g.H}, why: "vocab_size, hidden_size (SGLang's Qwen3DSparkModel owns its lm_head)"}
		h := dsparkHeadOf(b.top)
		if h.rank > 0 {
			wants["markov_head.markov_w1.weight"] = want{shape: []int{v.g.V, h.rank}, why: fmt.Sprintf("vocab_size %d, markov_rank %d", v.g.V, h.rank)}
			wants["markov_head.markov_w2.weight"] = want{shape: []int{v.g.V, h.rank}, why: fmt.Sprintf("vocab_size %d, markov_rank %d", v.g.V, h.rank)}
		}
		if h.confidence && h.rank > 0 {
			wants["confidence_head.proj.weight"] = want{shape: []int{1, v.g.H + h.rank}, why: fmt.Sprintf("hidden_size %d + markov_rank %d (SGLang's confidence head always takes the Markov embedding)", v.g.H, h.rank)}
			wants["confidence_head.proj.bias"] = want{shape: []int{1}, why: "the confidence head's bias"}
		}
		return
	}
	h := dsparkHeadOf(b.flat())
	r := max(h.rank, 0)
	wants["markov_head.markov_w1.weight"] = want{shape: []int{v.g.V, r}, why: fmt.Sprintf("vocab_size %d, markov_rank %d", v.g.V, r)}
	wants["markov_head.markov_w2.weight"] = want{shape: []int{v.g.N, r}, why: fmt.Sprintf("draft_vocab_size %d, markov_rank %d", v.g.N, r)}
	if h.confidence {
		in, why := v.g.H, fmt.Sprintf("enable_confidence_head true, confidence_head_with_markov false: hidden_size %d", v.g.H)
		if h.withMk {
			in, why = v.g.H+r, fmt.Sprintf("confidence_head_with_markov true: hidden_size %d + markov_rank %d", v.g.H, r)
		}
		// Optional here: its absence is reported by dsparkConfig, with what
		// vLLM does then (drops the head).
		wants["confidence_head.proj.weight"] = want{shape: []int{1, in}, optional: true, why: why}
		wants["confidence_head.proj.bias"] = want{shape: []int{1}, optional: true, why: "the confidence head's bias (DSparkConfidenceHead is built with bias)"}
	}
}

// isDSparkName reports whether a tensor belongs to DSpark's heads.
func isDSparkName(name string) bool {
	name = strings.TrimPrefix(name, "model.")
	return strings.HasPrefix(name, "markov_head.") || strings.HasPrefix(name, "confidence_head.")
}

// declaresDSpark reports whether a config declares a DSpark draft.
func declaresDSpark(cfg object) bool {
	return cfg.str("speculators_model_type") == "dspark" || slices.Contains(cfg.strs("architectures"), "Qwen3DSparkModel")
}

// sglangDSparkView fills v as SGLang's Qwen3DSparkModel reads a native
// config (Qwen3DSparkBackbone.__init__): head_dim, target_layer_ids,
// block_size, num_hidden_layers and mask_token_id are required at the top
// level (a dflash_config is not read); fc is [H, len(target_layer_ids) x H].
// DSparkWorkerV2 runs the model's block_size as the number of drafts after
// the anchor (verify stride block_size + 1): DeepSpec's sample-from-anchor
// layout. How the worker maps target_layer_ids to the target's capture
// points was not read, so the ids themselves are not compared for SGLang.
func (b *blockCheck) sglangDSparkView(v *blockView) {
	es := []Engine{SGLang}
	for _, k := range []string{"head_dim", keyTargetLayerIDs, keyBlockSize, keyMaskTokenID} {
		if !b.top.has(k) {
			b.c.add(Error, es, b.cfgPath, k, "absent: SGLang's Qwen3DSparkModel refuses the config (Qwen3DSparkBackbone requires it at the top level)")
		}
	}
	ids, _ := b.top.ints(keyTargetLayerIDs)
	v.fcWidth, v.features = v.g.H, len(ids)
	v.idsKey, v.idsKnown, v.idsUnverified = keyTargetLayerIDs, true, true
	if n, ok := integer(b.top[keyBlockSize]); ok {
		v.block, v.blockKey = n, keyBlockSize
	}
	if n, ok := integer(b.top[keyMaskTokenID]); ok {
		v.mask, v.maskKey = n, keyMaskTokenID
	}
	v.causal, v.causalWhy = sglangCausal(b.top, v.g.layers)
	v.shiftedKnown, v.shifted = true, true
	v.shiftedWhy = "SGLang's DSparkWorkerV2 drafts block_size tokens after the anchor and verifies anchor + block_size (DeepSpec's layout)"
	h := dsparkHeadOf(b.top)
	if h.confidence && (h.rank <= 0 || b.top.has("confidence_head_with_markov") && !h.withMk) {
		b.c.add(Error, es, b.cfgPath, "enable_confidence_head", fmt.Sprintf("true with markov_rank %d and confidence_head_with_markov %v: SGLang's Qwen3DSparkModel refuses it (DSparkWorkerV2 always feeds the confidence head the Markov embedding)", h.rank, h.withMk))
	}
	msg := "SGLang's DSparkWorkerV2: how it maps target_layer_ids to the target's capture points was not read, so the ids are compared only by count"
	if b.ids != nil {
		msg += fmt.Sprintf("; the export describes hidden_states %v (%s)", b.ids, b.idsFrom)
	}
	msg += "; the worker read (sgl-project/sglang 028b6e6) also replaces the draft's embed_tokens and lm_head with the target's, which is the same drafter only when they are the target's frozen copies"
	b.c.add(Note, es, b.cfgPath, keyTargetLayerIDs, msg)
}

// sglangDSparkDrops reports whether SGLang's Qwen3DSparkModel drops a
// tensor before looking for its parameter: a Markov tensor when
// markov_rank is 0, a confidence tensor when enable_confidence_head is
// false (resolve_qwen3_dspark_weight's drop reasons). dsparkConfig reports
// those as trained heads the engine does not run.
func (b *blockCheck) sglangDSparkDrops(name string) bool {
	h := dsparkHeadOf(b.top)
	switch {
	case strings.HasPrefix(name, "markov_head."):
		return h.rank <= 0
	case strings.HasPrefix(name, "confidence_head."):
		return !h.confidence
	}
	return false
}
