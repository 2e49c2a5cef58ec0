#!/usr/bin/env python3
"""Engine-style reference forward of an exported EAGLE-3 / EAGLE-3.1 draft.

Usage: eagle3_vllm.py EXPORT_DIR BATCH.safetensors OUT.safetensors

This reads an export the way vLLM reads it and runs the draft the way vLLM's
proposer runs it, in float64 numpy, independently of drafter's Go code. It
was written from the behaviour of these vLLM files (not copied from them):

  vllm/transformers_utils/configs/speculators/base.py
      SpeculatorsConfig.extract_transformers_pre_trained_config: a config with
      "speculators_model_type" becomes its "transformer_layer_config" (or
      "transformer_config") updated by the algorithm's translator.
  vllm/transformers_utils/configs/speculators/algos.py  update_eagle3:
      draft_vocab_size and target_hidden_size copied; norm_before_residual
      defaults to TRUE when absent; norm_before_fc, fc_norm and norm_output
      default to False; eagle_aux_hidden_state_layer_ids copied when set.
  vllm/model_executor/models/llama_eagle3.py
      LlamaModel.__init__: norm_before_fc is eagle_config's key when present,
      else the top-level one; the feature count is num_aux_hidden_states, else
      the length of eagle_config.eagle_aux_hidden_state_layer_ids, else 3;
      input_norm is an RMSNorm over target_hidden_size * count; fc_norm is one
      RMSNorm of target_hidden_size per feature; norm_output selects which
      state the model returns for the next step.
      Eagle3LlamaForCausalLM.combine_hidden_states: input_norm (when
      norm_before_fc), then the per-chunk fc_norm (when fc_norm), then fc.
      LlamaDecoderLayer.forward (layer 0): input_layernorm on the embedding;
      the residual is the hidden input, or hidden_norm of it when
      norm_before_residual; attention over [embedding; hidden_norm(hidden)];
      post_attention_layernorm adds the residual and norms; SwiGLU MLP.
      LlamaModel.forward: the final norm adds the residual and returns
      (normed, pre-norm); the second output is the normed one with
      norm_output.
      load_weights: t2d skipped; d2t becomes draft_id_to_target_id; every
      other name but lm_head gets "model." and "midlayer." maps to
      "layers.0."; input_norm weights are skipped unless norm_before_fc.
      compute_logits: lm_head over the draft vocabulary, placed at target id
      i + d2t[i], -inf elsewhere.
  vllm/v1/spec_decode/eagle.py (the proposer): the first pass runs every
      context position with combine_hidden_states(target features) as the
      hidden input and the following token as input id; the last position's
      logits give draft token 1, and its second model output is the next
      step's hidden input; each later step feeds the previous step's second
      output at the next position, attending to the context and the earlier
      steps through the KV cache.

BATCH holds features [T, F*Ht] (float32, the fused target features of T
context positions), tokens [T] (int64, the token following each position),
chain [K-1] (int64, the target ids fed at steps 1..K-1) and embed [V, H]
(float32, the target's input embedding: the export has none, so the engine
uses the target's). OUT receives logits [K, V] (float32, step k's target
vocabulary logits) and the effective flags as metadata.
"""

import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file, save_file


def vllm_config(cfg):
    """The draft's config as vLLM builds it from config.json."""
    if not cfg.get("speculators_model_type"):
        return dict(cfg)  # the native layout: the Hugging Face config itself
    if cfg["speculators_model_type"] != "eagle3":
        raise SystemExit("not an eagle3 speculator: %r" % cfg["speculators_model_type"])
    hf = dict(cfg.get("transformer_layer_config") or cfg.get("transformer_config") or {})
    hf["draft_vocab_size"] = cfg.get("draft_vocab_size")
    if cfg.get("target_hidden_size") is not None:
        hf["target_hidden_size"] = cfg["target_hidden_size"]
    hf["norm_before_residual"] = cfg.get("norm_before_residual", True)
    hf["norm_before_fc"] = cfg.get("norm_before_fc", False)
    hf["fc_norm"] = cfg.get("fc_norm", False)
    hf["norm_output"] = cfg.get("norm_output", False)
    if cfg.get("eagle_aux_hidden_state_layer_ids"):
        hf["eagle_aux_hidden_state_layer_ids"] = cfg["eagle_aux_hidden_state_layer_ids"]
    return hf


class Draft:
    def __init__(self, hf, weights):
        self.H = hf["hidden_size"]
        self.heads = hf["num_attention_heads"]
        self.kv_heads = hf.get("num_key_value_heads") or self.heads
        self.head_dim = hf.get("head_dim") or self.H // self.heads
        self.eps = hf["rms_norm_eps"]
        self.theta = hf.get("rope_theta", 10000.0)
        if hf.get("rope_scaling"):
            raise SystemExit("rope_scaling is not implemented by this reference")
        if hf.get("num_hidden_layers", 1) != 1:
            raise SystemExit("one decoder layer only")
        self.vocab = hf["vocab_size"]
        self.draft_vocab = hf.get("draft_vocab_size") or self.vocab
        eagle = hf.get("eagle_config") or {}
        if not eagle.get("use_aux_hidden_state", True):
            raise SystemExit("use_aux_hidden_state false is not implemented")
        self.norm_before_fc = bool(eagle.get("norm_before_fc", hf.get("norm_before_fc", False)))
        self.fc_norm = bool(hf.get("fc_norm", False))
        self.norm_output = bool(hf.get("norm_output", False))
        self.norm_before_residual = bool(hf.get("norm_before_residual", False))
        count = hf.get("num_aux_hidden_states")
        if count is None:
            ids = eagle.get("eagle_aux_hidden_state_layer_ids")
            count = len(ids) if ids else 3
        self.count = count
        self.target_hidden = hf.get("target_hidden_size", self.H)

        # Weights under vLLM's module names.
        w = {}
        self.d2t = None
        for name, value in weights.items():
            if "t2d" in name:
                continue
            if "d2t" in name:
                self.d2t = value.astype(np.int64)
                continue
            if "lm_head" not in name:
                name = "model." + name.replace("midlayer.", "layers.0.")
            if name.startswith("model.input_norm.") and not self.norm_before_fc:
                continue  # vLLM skips it: the module does not exist
            w[name] = value.astype(np.float64)
        expected = {"model.fc.weight", "lm_head.weight", "model.norm.weight"}
        for n in ["hidden_norm", "input_layernorm", "post_attention_layernorm",
                  "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                  "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]:
            expected.add("model.layers.0.%s.weight" % n)
        if self.norm_before_fc:
            expected.add("model.input_norm.weight")
        if self.fc_norm:
            expected.update("model.fc_norm.%d.weight" % i for i in range(self.count))
        extra, missing = set(w) - expected, expected - set(w)
        if extra:  # vLLM's weight loader has no module for them
            raise SystemExit("unexpected weights: %s" % sorted(extra))
        if missing:  # vLLM refuses weights it was not given
            raise SystemExit("weights not in the checkpoint: %s" % sorted(missing))
        self.w = w

    def rms(self, x, weight):
        var = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(var + self.eps) * weight

    def combine(self, feats):
        """fc's hidden input for the target features [T, count*Ht]."""
        if self.norm_before_fc:
            feats = self.rms(feats, self.w["model.input_norm.weight"])
        if self.fc_norm:
            chunks = np.split(feats, self.count, axis=-1)
            feats = np.concatenate(
                [self.rms(c, self.w["model.fc_norm.%d.weight" % i]) for i, c in enumerate(chunks)], axis=-1)
        return feats @ self.w["model.fc.weight"].T

    def rope(self, x, pos):
        """Rotates each head of x [n, heads*hd] (the neox rotate-half layout)."""
        hd = self.head_dim
        half = hd // 2
        inv = self.theta ** (-np.arange(0, half, dtype=np.float64) * 2 / hd)
        ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
        cos, sin = np.cos(ang), np.sin(ang)
        x = x.reshape(x.shape[0], -1, hd)
        a, b = x[..., :half], x[..., half:]
        out = np.concatenate([a * cos[:, None, :] - b * sin[:, None, :], b * cos[:, None, :] + a * sin[:, None, :]], axis=-1)
        return out.reshape(out.shape[0], -1)

    def step(self, embeds, hidden, pos, cache):
        """One model call over rows embeds/hidden at positions pos; each row
        attends to the cache (earlier rows) and to the rows up to itself.
        Returns (normed output, the state fed forward)."""
        L = "model.layers.0."
        w = self.w
        e = self.rms(embeds, w[L + "input_layernorm.weight"])
        if self.norm_before_residual:
            hidden = self.rms(hidden, w[L + "hidden_norm.weight"])
            residual, h = hidden, hidden
        else:
            residual, h = hidden, self.rms(hidden, w[L + "hidden_norm.weight"])
        x = np.concatenate([e, h], axis=-1)
        q = self.rope(x @ w[L + "self_attn.q_proj.weight"].T, pos)
        k = self.rope(x @ w[L + "self_attn.k_proj.weight"].T, pos)
        v = x @ w[L + "self_attn.v_proj.weight"].T
        keys = np.concatenate([cache[0], k]) if cache[0] is not None else k
        vals = np.concatenate([cache[1], v]) if cache[1] is not None else v
        past = keys.shape[0] - k.shape[0]
        hd, group = self.head_dim, self.heads // self.kv_heads
        att = np.zeros((q.shape[0], self.heads * hd))
        for r in range(q.shape[0]):
            seen = past + r + 1
            for hh in range(self.heads):
                g = hh // group
                qv = q[r, hh * hd:(hh + 1) * hd]
                sc = keys[:seen, g * hd:(g + 1) * hd] @ qv / np.sqrt(hd)
                p = np.exp(sc - sc.max())
                p /= p.sum()
                att[r, hh * hd:(hh + 1) * hd] = p @ vals[:seen, g * hd:(g + 1) * hd]
        cache[0], cache[1] = keys, vals
        a = att @ w[L + "self_attn.o_proj.weight"].T
        residual = a + residual
        n2 = self.rms(residual, w[L + "post_attention_layernorm.weight"])
        gate = n2 @ w[L + "mlp.gate_proj.weight"].T
        up = n2 @ w[L + "mlp.up_proj.weight"].T
        mlp = (gate / (1 + np.exp(-gate)) * up) @ w[L + "mlp.down_proj.weight"].T
        prenorm = mlp + residual
        normed = self.rms(prenorm, w["model.norm.weight"])
        return normed, (normed if self.norm_output else prenorm)

    def logits(self, normed):
        lg = normed @ self.w["lm_head.weight"].T
        out = np.full((lg.shape[0], self.vocab), -np.inf)
        d2t = self.d2t if self.d2t is not None else np.zeros(self.draft_vocab, dtype=np.int64)
        out[:, np.arange(self.draft_vocab) + d2t] = lg
        return out


def main():
    export, batch_path, out_path = sys.argv[1:4]
    with open(os.path.join(export, "config.json")) as f:
        hf = vllm_config(json.load(f))
    weights = {}
    for name in sorted(os.listdir(export)):
        if name.endswith(".safetensors"):
            weights.update(load_file(os.path.join(export, name)))
    d = Draft(hf, weights)
    b = load_file(batch_path)
    feats = b["features"].astype(np.float64)
    tokens, chain = b["tokens"].astype(np.int64), b["chain"].astype(np.int64)
    embed = b["embed"].astype(np.float64)
    T = tokens.shape[0]
    cache = [None, None]
    normed, fed = d.step(embed[tokens], d.combine(feats), np.arange(T), cache)
    out = [d.logits(normed[-1:])]
    hidden = fed[-1:]
    for j, tok in enumerate(chain):
        normed, hidden = d.step(embed[[tok]], hidden, [T + j], cache)
        out.append(d.logits(normed))
    flags = {"fc_norm": d.fc_norm, "norm_before_fc": d.norm_before_fc, "norm_output": d.norm_output,
             "norm_before_residual": d.norm_before_residual}
    save_file({"logits": np.concatenate(out).astype(np.float32)}, out_path,
              metadata={k: json.dumps(v) for k, v in flags.items()})


if __name__ == "__main__":
    main()
