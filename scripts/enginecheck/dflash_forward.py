#!/usr/bin/env python3
"""Engine-style reference forward of an exported DFlash draft.

Usage: dflash_forward.py EXPORT_DIR BATCH.safetensors OUT.safetensors

This reads a DFlash export (z-lab native layout or speculators layout) the
way the engines read it and drafts one block the way they run it, in float64
numpy, independently of drafter's Go code. It was written from the behaviour
of these files (not copied from them):

  z-lab/dflash dflash/model.py
      extract_context_feature: the context feature of target layer id k is
      hidden_states[k + 1] (target_layer_ids are output-of-layer ids), the
      ids' states concatenated in config order.
      DFlashDraftModel: target_layer_ids, block_size and mask_token_id are
      read from dflash_config first, then the top level; forward computes
      c = hidden_norm(fc(features)) and runs every layer on the block's
      embeddings with c as extra context; norm at the end; logits are the
      TARGET's lm_head of the normed states of slots 1..B-1.
      Qwen3DFlashAttention: q = q_norm(q_proj(x)) on the layer-normed block
      rows; keys k_norm(k_proj([c ; x])) and values v_proj([c ; x]) (c gets
      no input_layernorm); RoPE on q at the block's positions and on all keys
      at [context positions ; block positions]; a layer is causal when the
      top-level is_causal says so, else when its layer type is
      sliding_attention (full attention: no mask, bidirectional); scaling
      head_dim^-0.5; grouped-query heads.
      Decoder layer: residual + attention, post_attention_layernorm, SwiGLU
      MLP (down(silu(gate(x)) * up(x))), residual.
      dflash_generate: the block is [last verified token, mask x (B-1)] at
      positions start..start+B-1, start = the number of verified positions
      whose features are context; embeddings from the target's table.
  vllm/model_executor/models/qwen3_dflash.py
      _dflash_layer_causal: top-level is_causal, else dflash_config.causal,
      else the layer type. precompute_and_store_context_kv: the context is
      hidden_norm'ed, projected by each layer's k/v weights, keys k_norm'ed
      and RoPE'd at their positions, written to the cache incrementally; the
      block's queries then attend to the cached context and the block.
  vllm speculators algos.py update_dflash (as summarised in the team's
      methods.md): a speculators config becomes its transformer_layer_config
      with dflash_config {mask_token_id, target_layer_ids =
      aux_hidden_state_layer_ids - 1, causal = not sliding_window_non_causal
      (absent: non-causal)} and block_size.

BATCH holds hidden_states [L+1, S, H] (float32: the target's HF
hidden_states for S verified positions, every index, so that the engine's own
reading of the layer ids picks the features), anchor [1] (int64: the last
verified token, at position S), embed [V, H] and lm_head [V, H] (float32, the
target's). OUT receives logits [B-1, V] (float64 computed, stored float32) of
the z-lab one-shot forward, which the script first checks against the
vLLM-style cached forward (context written in two chunks), and the effective
settings as metadata (hf_layer_ids, causal, mask_token_id, block_size).
"""

import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file, save_file


def engine_config(cfg):
    """The config as z-lab/vLLM see it: speculators configs translated."""
    if not cfg.get("speculators_model_type"):
        if "DFlashDraftModel" not in cfg.get("architectures", []):
            raise SystemExit("not a DFlash draft: architectures %r" % cfg.get("architectures"))
        return dict(cfg)
    if cfg["speculators_model_type"] != "dflash":
        raise SystemExit("not a dflash speculator: %r" % cfg["speculators_model_type"])
    hf = dict(cfg["transformer_layer_config"])
    aux = cfg.get("aux_hidden_state_layer_ids")
    if not aux:
        raise SystemExit("speculators config without aux_hidden_state_layer_ids")
    non_causal = cfg.get("sliding_window_non_causal")
    hf["dflash_config"] = {
        "mask_token_id": cfg.get("mask_token_id"),
        "target_layer_ids": [i - 1 for i in aux],
        "causal": (not non_causal) if non_causal is not None else False,
    }
    hf["block_size"] = cfg.get("block_size")
    if cfg.get("sample_from_anchor"):
        raise SystemExit("sample_from_anchor is not DFlash's block")
    return hf


def draft_value(cfg, name, default=None):
    return (cfg.get("dflash_config") or {}).get(name, cfg.get(name, default))


class Draft:
    def __init__(self, cfg, weights):
        self.cfg = cfg
        self.H = cfg["hidden_size"]
        self.n = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.hd = cfg.get("head_dim") or self.H // self.heads
        self.eps = cfg["rms_norm_eps"]
        self.theta = cfg.get("rope_theta", 10000.0)
        if cfg.get("rope_scaling"):
            raise SystemExit("rope_scaling is not implemented by this reference")
        self.ids = draft_value(cfg, "target_layer_ids")
        self.block = int(draft_value(cfg, "block_size", 16))
        self.mask = draft_value(cfg, "mask_token_id")
        types = cfg.get("layer_types") or ["full_attention"] * self.n
        if any(t != "full_attention" for t in types):
            raise SystemExit("sliding layers are not implemented by this reference")
        # z-lab: top-level is_causal, else the layer type.
        zl = cfg.get("is_causal")
        self.causal_zlab = [bool(zl) if zl is not None else t == "sliding_attention" for t in types]
        # vLLM: is_causal, else dflash_config.causal, else the layer type.
        dc = (cfg.get("dflash_config") or {}).get("causal")
        self.causal_vllm = [bool(zl) if zl is not None else (bool(dc) if dc is not None else t == "sliding_attention") for t in types]
        expected = {"fc.weight", "hidden_norm.weight", "norm.weight"}
        for i in range(self.n):
            for m in ["input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                      "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm",
                      "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]:
                expected.add("layers.%d.%s.weight" % (i, m))
        got = set(weights)
        if got != expected:
            raise SystemExit("weights differ from the module: extra %s, missing %s" % (sorted(got - expected), sorted(expected - got)))
        self.w = {k: v.astype(np.float64) for k, v in weights.items()}
        if self.w["fc.weight"].shape != (self.H, len(self.ids) * self.H):
            raise SystemExit("fc.weight %s for %d ids" % (self.w["fc.weight"].shape, len(self.ids)))

    def rms(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def head_rms(self, x, weight):
        s = x.reshape(x.shape[0], -1, self.hd)
        return self.rms(s, weight).reshape(x.shape)

    def rope(self, x, pos):
        half = self.hd // 2
        inv = self.theta ** (-np.arange(0, half, dtype=np.float64) * 2 / self.hd)
        ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        s = x.reshape(x.shape[0], -1, self.hd)
        a, b = s[..., :half], s[..., half:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1).reshape(x.shape)

    def features(self, hidden_states):
        # extract_context_feature: output of layer k is hidden_states[k + 1].
        return np.concatenate([hidden_states[k + 1] for k in self.ids], axis=-1)

    def attend(self, q, keys, vals, causal, n_ctx):
        """q [B, nq*hd] at block slots; keys/vals [n_ctx + B, nkv*hd]."""
        hd, group = self.hd, self.heads // self.kv_heads
        out = np.zeros((q.shape[0], self.heads * hd))
        for r in range(q.shape[0]):
            seen = n_ctx + r + 1 if causal else keys.shape[0]
            for h in range(self.heads):
                g = h // group
                sc = keys[:seen, g * hd:(g + 1) * hd] @ q[r, h * hd:(h + 1) * hd] * hd ** -0.5
                p = np.exp(sc - sc.max())
                p /= p.sum()
                out[r, h * hd:(h + 1) * hd] = p @ vals[:seen, g * hd:(g + 1) * hd]
        return out

    def layer_block(self, i, x_in, pos_blk, ctx_k, ctx_v, causal):
        w, p = self.w, "layers.%d." % i
        x = self.rms(x_in, w[p + "input_layernorm.weight"])
        q = self.rope(self.head_rms(x @ w[p + "self_attn.q_proj.weight"].T, w[p + "self_attn.q_norm.weight"]), pos_blk)
        k = self.rope(self.head_rms(x @ w[p + "self_attn.k_proj.weight"].T, w[p + "self_attn.k_norm.weight"]), pos_blk)
        v = x @ w[p + "self_attn.v_proj.weight"].T
        att = self.attend(q, np.concatenate([ctx_k, k]), np.concatenate([ctx_v, v]), causal, ctx_k.shape[0])
        h = x_in + att @ w[p + "self_attn.o_proj.weight"].T
        x2 = self.rms(h, w[p + "post_attention_layernorm.weight"])
        gate = x2 @ w[p + "mlp.gate_proj.weight"].T
        up = x2 @ w[p + "mlp.up_proj.weight"].T
        return h + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T

    def context_kv(self, i, c, pos):
        w, p = self.w, "layers.%d." % i
        k = self.rope(self.head_rms(c @ w[p + "self_attn.k_proj.weight"].T, w[p + "self_attn.k_norm.weight"]), pos)
        return k, c @ w[p + "self_attn.v_proj.weight"].T

    def zlab(self, feats, emb, start):
        """One shot: c for every context row, then [c ; block] per layer."""
        c = self.rms(feats @ self.w["fc.weight"].T, self.w["hidden_norm.weight"])
        S, B = c.shape[0], emb.shape[0]
        pos_ctx = np.arange(start - S, start)
        pos_blk = np.arange(start, start + B)
        h = emb
        for i in range(self.n):
            k, v = self.context_kv(i, c, pos_ctx)
            h = self.layer_block(i, h, pos_blk, k, v, self.causal_zlab[i])
        return self.rms(h, self.w["norm.weight"])

    def vllm(self, feats, emb, start, split):
        """Context written to a per-layer cache in two chunks (fc, then
        hidden_norm and the K/V projections), then the block over it."""
        cache = [([], []) for _ in range(self.n)]
        for lo, hi in [(0, split), (split, feats.shape[0])]:
            ctx = feats[lo:hi] @ self.w["fc.weight"].T
            c = self.rms(ctx, self.w["hidden_norm.weight"])
            for i in range(self.n):
                k, v = self.context_kv(i, c, np.arange(lo, hi))
                cache[i][0].append(k)
                cache[i][1].append(v)
        B = emb.shape[0]
        h = emb
        for i in range(self.n):
            h = self.layer_block(i, h, np.arange(start, start + B), np.concatenate(cache[i][0]), np.concatenate(cache[i][1]), self.causal_vllm[i])
        return self.rms(h, self.w["norm.weight"])


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    export, batch_path, out_path = sys.argv[1:]
    with open(os.path.join(export, "config.json")) as f:
        cfg = engine_config(json.load(f))
    d = Draft(cfg, load_file(os.path.join(export, "model.safetensors")))
    batch = load_file(batch_path)
    hs = batch["hidden_states"].astype(np.float64)
    embed = batch["embed"].astype(np.float64)
    lm_head = batch["lm_head"].astype(np.float64)
    anchor = int(batch["anchor"][0])
    S = hs.shape[1]
    feats = d.features(hs)
    emb = np.stack([embed[anchor]] + [embed[d.mask]] * (d.block - 1))
    y = d.zlab(feats, emb, S)
    y2 = d.vllm(feats, emb, S, S // 2)
    if d.causal_zlab != d.causal_vllm:
        print("note: z-lab and vLLM read different causality: %r vs %r" % (d.causal_zlab, d.causal_vllm), file=sys.stderr)
    elif not np.allclose(y, y2, rtol=1e-9, atol=1e-9):
        raise SystemExit("z-lab one-shot and vLLM cached forwards disagree by %g" % np.abs(y - y2).max())
    logits = y[1:] @ lm_head.T
    meta = {
        "hf_layer_ids": json.dumps([k + 1 for k in d.ids]),
        "causal_zlab": json.dumps(d.causal_zlab),
        "causal_vllm": json.dumps(d.causal_vllm),
        "mask_token_id": str(d.mask),
        "block_size": str(d.block),
    }
    save_file({"logits": logits.astype(np.float32), "logits_vllm": (y2[1:] @ lm_head.T).astype(np.float32)}, out_path, metadata=meta)


if __name__ == "__main__":
    main()
