#!/usr/bin/env python3
"""Engine-style reference forward of an exported DSpark draft.

Usage: dspark_forward.py EXPORT_DIR BATCH.safetensors OUT.safetensors

This reads a DSpark export (DeepSpec's native Qwen3DSparkModel layout, or
speculators' "dspark" layout) the way the engines read it and drafts one
block the way DeepSpec runs it, in float64 numpy, independently of
drafter's Go code. It was written from the behaviour of these files (not
copied from them):

  deepseek-ai/DeepSpec deepspec/modeling/dspark/common.py
      extract_context_feature: target layer id k (output-of-layer) reads
      hidden_states[k + 1], -1 the embedding output hidden_states[0]; the
      ids' states concatenated in config order.
  deepspec/modeling/dspark/qwen3/modeling.py
      Qwen3DSparkModel: the draft owns embed_tokens and lm_head (copies of
      the target's); _forward_backbone: c = hidden_norm(fc(features)), each
      layer attends with queries q_norm(q_proj(input_layernorm(x))) over
      keys k_norm(k_proj([c ; x])) and values v_proj([c ; x]) (c gets no
      input_layernorm), RoPE at [context positions ; block positions],
      non-causal within the block; residual, post_attention_layernorm,
      SwiGLU MLP, residual; final norm. The block is [anchor, mask x (B-1)]
      at positions start..start+B-1 and EVERY slot drafts (logits of all B
      normed rows through lm_head: the shifted, "bonus anchor" layout).
      Markov head (vanilla): step logits = base_k + markov_w2(markov_w1(prev)),
      prev = the anchor for slot 0, then the token drafted at slot k-1
      (sample_draft_token_step / sample_block_tokens; greedy here).
      Confidence head (AcceptRatePredictor): proj([o_k ; markov_w1(prev_k)])
      with confidence_head_with_markov, else proj(o_k); a logit.
  vLLM speculators handler update_dspark (as summarised in the team's
      methods.md §0/§4): a speculators config becomes its
      transformer_layer_config plus target_layer_ids =
      aux_hidden_state_layer_ids - 1 and the DSpark keys; sample_from_anchor
      must be true (dspark_bonus_anchor).

BATCH holds hidden_states [L+1, S, H] (float32, the target's HF
hidden_states for S verified positions: every index, so that this script's
own reading of the layer ids picks the features) and anchor [1] (int64, the
last verified token, at position S). OUT receives logits [B, V] (the step
logits, Markov bias included), base [B, V] (lm_head alone), tokens [B]
(int64, greedy) and confidence [B] (logits; NaN without a confidence head),
and the effective settings as metadata.
"""

import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file, save_file


def engine_config(cfg):
    """The config as DeepSpec / vLLM see it: speculators configs translated."""
    if not cfg.get("speculators_model_type"):
        if "Qwen3DSparkModel" not in cfg.get("architectures", []):
            raise SystemExit("not a DSpark draft: architectures %r" % cfg.get("architectures"))
        return dict(cfg)
    if cfg["speculators_model_type"] != "dspark":
        raise SystemExit("not a dspark speculator: %r" % cfg["speculators_model_type"])
    if not cfg.get("sample_from_anchor"):
        raise SystemExit("sample_from_anchor is not true: not DSpark's shifted block")
    hf = dict(cfg["transformer_layer_config"])
    aux = cfg.get("aux_hidden_state_layer_ids")
    if not aux:
        raise SystemExit("speculators config without aux_hidden_state_layer_ids")
    hf["target_layer_ids"] = [i - 1 for i in aux]
    for k in ["block_size", "mask_token_id", "markov_rank", "markov_head_type", "enable_confidence_head",
              "confidence_head_with_markov", "num_target_layers"]:
        if k in cfg:
            hf[k] = cfg[k]
    return hf


class Draft:
    def __init__(self, cfg, weights):
        self.H = cfg["hidden_size"]
        self.n = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.hd = cfg.get("head_dim") or self.H // self.heads
        self.eps = cfg["rms_norm_eps"]
        self.theta = cfg.get("rope_theta", 10000.0)
        if cfg.get("rope_scaling"):
            raise SystemExit("rope_scaling is not implemented by this reference")
        if any(t != "full_attention" for t in cfg.get("layer_types") or []):
            raise SystemExit("sliding layers are not implemented by this reference")
        self.ids = cfg["target_layer_ids"]
        self.block = int(cfg["block_size"])
        self.mask = int(cfg["mask_token_id"])
        self.rank = int(cfg["markov_rank"])
        if self.rank > 0 and cfg.get("markov_head_type") != "vanilla":
            raise SystemExit("markov_head_type %r is not implemented by this reference" % cfg.get("markov_head_type"))
        self.conf = bool(cfg["enable_confidence_head"])
        self.conf_markov = self.conf and bool(cfg.get("confidence_head_with_markov"))
        expected = {"fc.weight", "hidden_norm.weight", "norm.weight", "embed_tokens.weight", "lm_head.weight"}
        for i in range(self.n):
            for m in ["input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                      "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm",
                      "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]:
                expected.add("layers.%d.%s.weight" % (i, m))
        if self.rank > 0:
            expected |= {"markov_head.markov_w1.weight", "markov_head.markov_w2.weight"}
        if self.conf:
            expected |= {"confidence_head.proj.weight", "confidence_head.proj.bias"}
        got = set(weights)
        if got != expected:
            raise SystemExit("weights differ from the module: extra %s, missing %s" % (sorted(got - expected), sorted(expected - got)))
        self.w = {k: v.astype(np.float64) for k, v in weights.items()}
        if self.conf:
            want = self.H + (self.rank if self.conf_markov else 0)
            if self.w["confidence_head.proj.weight"].shape != (1, want):
                raise SystemExit("confidence_head.proj.weight %s, want (1, %d)" % (self.w["confidence_head.proj.weight"].shape, want))

    def rms(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def head_rms(self, x, weight):
        return self.rms(x.reshape(x.shape[0], -1, self.hd), weight).reshape(x.shape)

    def rope(self, x, pos):
        half = self.hd // 2
        inv = self.theta ** (-np.arange(0, half, dtype=np.float64) * 2 / self.hd)
        ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        s = x.reshape(x.shape[0], -1, self.hd)
        a, b = s[..., :half], s[..., half:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1).reshape(x.shape)

    def features(self, hidden_states):
        return np.concatenate([hidden_states[0 if k == -1 else k + 1] for k in self.ids], axis=-1)

    def backbone(self, feats, emb, start):
        """DeepSpec's _forward_backbone for one block over S context rows:
        keys and values of [c ; x] projected together, the block attending
        to every context row (all before the anchor) and its whole block."""
        w = self.w
        c = self.rms(feats @ w["fc.weight"].T, w["hidden_norm.weight"])
        S, B = c.shape[0], emb.shape[0]
        pos = np.concatenate([np.arange(start - S, start), np.arange(start, start + B)])
        hd, group = self.hd, self.heads // self.kv_heads
        h = emb
        for i in range(self.n):
            p = "layers.%d." % i
            x = self.rms(h, w[p + "input_layernorm.weight"])
            q = self.rope(self.head_rms(x @ w[p + "self_attn.q_proj.weight"].T, w[p + "self_attn.q_norm.weight"]), pos[S:])
            kv_in = np.concatenate([c, x])
            k = self.rope(self.head_rms(kv_in @ w[p + "self_attn.k_proj.weight"].T, w[p + "self_attn.k_norm.weight"]), pos)
            v = kv_in @ w[p + "self_attn.v_proj.weight"].T
            att = np.zeros((B, self.heads * hd))
            for r in range(B):
                for a in range(self.heads):
                    g = a // group
                    sc = k[:, g * hd:(g + 1) * hd] @ q[r, a * hd:(a + 1) * hd] * hd ** -0.5
                    pr = np.exp(sc - sc.max())
                    pr /= pr.sum()
                    att[r, a * hd:(a + 1) * hd] = pr @ v[:, g * hd:(g + 1) * hd]
            h = h + att @ w[p + "self_attn.o_proj.weight"].T
            x2 = self.rms(h, w[p + "post_attention_layernorm.weight"])
            gate = x2 @ w[p + "mlp.gate_proj.weight"].T
            up = x2 @ w[p + "mlp.up_proj.weight"].T
            h = h + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
        return self.rms(h, w["norm.weight"])

    def draft(self, feats, anchor, start):
        w = self.w
        emb = np.stack([w["embed_tokens.weight"][anchor]] + [w["embed_tokens.weight"][self.mask]] * (self.block - 1))
        o = self.backbone(feats, emb, start)
        base = o @ w["lm_head.weight"].T
        logits, tokens, conf = np.zeros_like(base), [], np.full(self.block, np.nan)
        prev = anchor
        for k in range(self.block):
            step = base[k].copy()
            e = None
            if self.rank > 0:
                e = w["markov_head.markov_w1.weight"][prev]
                step += w["markov_head.markov_w2.weight"] @ e
            if self.conf:
                f = np.concatenate([o[k], e]) if self.conf_markov else o[k]
                conf[k] = (w["confidence_head.proj.weight"] @ f)[0] + w["confidence_head.proj.bias"][0]
            logits[k] = step
            prev = int(np.argmax(step))
            tokens.append(prev)
        return logits, base, np.array(tokens, dtype=np.int64), conf


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    export, batch_path, out_path = sys.argv[1:]
    with open(os.path.join(export, "config.json")) as f:
        cfg = engine_config(json.load(f))
    d = Draft(cfg, load_file(os.path.join(export, "model.safetensors")))
    batch = load_file(batch_path)
    hs = batch["hidden_states"].astype(np.float64)
    anchor = int(batch["anchor"][0])
    S = hs.shape[1]
    logits, base, tokens, conf = d.draft(d.features(hs), anchor, S)
    meta = {
        "hf_layer_ids": json.dumps([k + 1 for k in d.ids]),
        "mask_token_id": str(d.mask),
        "block_size": str(d.block),
        "markov_rank": str(d.rank),
        "confidence_head_with_markov": json.dumps(d.conf_markov),
    }
    save_file({"logits": logits.astype(np.float32), "base": base.astype(np.float32), "tokens": tokens,
               "confidence": conf.astype(np.float32)}, out_path, metadata=meta)


if __name__ == "__main__":
    main()
