"""Tiny random-weight checkpoints of each target architecture, made by Hugging Face
transformers itself, and transformers' own outputs on them: the reference drafter's
forward is compared with (pkg/model/hfref_test.go, cmd/drafter/arch_e2e_test.go).

    python tiny.py OUTDIR [NAME ...]

For each NAME (default: all of ARCHS) it writes

    OUTDIR/NAME/f32/       save_pretrained in float32, one model.safetensors
    OUTDIR/NAME/bf16/      the same weights rounded to bfloat16, save_pretrained with a
                           small max_shard_size: several shards and model.safetensors.index.json
    OUTDIR/NAME/reference.json

Both folders also hold models/stories260k's tokenizer files (vocabulary 512, <s>=1,
</s>=2), so that drafter's commands run on them. The checkpoints are what
transformers' config and model classes make and save, so their tensor names and
config.json keys are exactly what transformers writes (as of the pinned version).

reference.json holds, for each prompt (token ids, every one longer than any sliding
window here), transformers' float32 logits at every position, once for the f32
checkpoint and once for the bf16 checkpoint loaded with dtype=float32 (drafter computes
in float32 on bf16 weights: the same arithmetic), and the greedy continuation of each.
The greedy ids come from a manual loop, not model.generate: one forward over the
prompt with use_cache=True, then one forward per new token with the cache the
model returned (the model's own cache class, sliding-window layers included), as
a serving engine decodes. Each step's gap between the best and second-best logit is
recorded and must exceed MIN_GAP, so that an id comparison is decided by the model
and not by float32 rounding.

Every feature of an architecture is made to matter: windows shorter than the prompts,
soft-caps that bind (the largest uncapped score or logit is recorded and must exceed
the cap), every expert reached, non-default norms and biases (1-D parameters are
randomised too, not left at ones and zeros). Weights use a large initializer_range so
that logits spread over several units instead of the near-uniform ones of the default
0.02. Everything is seeded: the same script and pinned versions give the same files.
"""

import json
import os
import shutil
import sys
import zlib

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

# The smallest top-1 / top-2 logit gap accepted at a greedy step.
MIN_GAP = 1e-3
NEW_TOKENS = 16
SEED = 20240527
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"]
STORIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "stories260k")

# What every tiny model shares: the stories260k vocabulary and special ids.
COMMON = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
    tie_word_embeddings=False,
    initializer_range=0.25,
)

WINDOW = 8  # every sliding window: shorter than every prompt

# name -> (model_type, config overrides). The name is the model_type, but for
# phi3_longrope, Phi-3 with LongRoPE scaling.
ARCHS = {
    # Llama with q/k/v/o biases and llama3 RoPE scaling.
    "llama": ("llama", dict(attention_bias=True, rope_parameters=dict(
        rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=32))),
    # One sliding window for every layer, shorter than the prompts.
    "mistral": ("mistral", dict(sliding_window=WINDOW, rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # q/k/v biases (always, in Qwen2).
    "qwen2": ("qwen2", dict(rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    # Per-head q/k RMSNorms.
    "qwen3": ("qwen3", dict(rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    # Alternating sliding/full layers, both soft-caps binding, query_pre_attn_scalar
    # != head_dim, tied embeddings, gelu_pytorch_tanh, 1+w norms, the extra norms.
    "gemma2": ("gemma2", dict(
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        attn_logit_softcapping=3.0, final_logit_softcapping=5.0, query_pre_attn_scalar=32,
        tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
        rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # Sliding and full layers in an asymmetric pattern, local and global RoPE bases,
    # linear scaling on the global layers only, q/k norms, query_pre_attn_scalar.
    "gemma3_text": ("gemma3_text", dict(
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        query_pre_attn_scalar=24, tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
        rope_parameters={
            "sliding_attention": dict(rope_type="default", rope_theta=10000.0),
            "full_attention": dict(rope_type="linear", factor=4.0, rope_theta=1000000.0),
        })),
    # Fused qkv_proj and gate_up_proj, RoPE on half of each head.
    "phi3": ("phi3", dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5))),
    # LongRoPE: every prompt but the last is longer than original_max_position_embeddings
    # (long_factor, from the first position on, as transformers and vLLM switch a whole
    # pass); the last stays within it, generation included (short_factor).
    "phi3_longrope": ("phi3", dict(
        original_max_position_embeddings=16,
        rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.5,
                             short_factor=[1.0, 1.3, 1.9, 2.6], long_factor=[1.1, 2.0, 4.5, 9.0],
                             original_max_position_embeddings=16))),
    # Mixture-of-experts families (not supported by drafter yet: their loading must be refused).
    "mixtral": ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2,
                                rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    "qwen3_moe": ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                                    norm_topk_prob=True, mlp_only_layers=[0],
                                    rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    "deepseek_v3": ("deepseek_v3", dict(
        num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16,
        v_head_dim=16, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
        first_k_dense_replace=1, moe_intermediate_size=32, routed_scaling_factor=2.5, num_mtp_layers=0,
        initializer_range=0.45,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # DeepSeek-V3 without a query low-rank pair (q_proj), with yarn scaling: both mscales set,
    # so that yarn's attention factor and the softmax scale's mscale_all_dim factor both bind.
    "deepseek_v3_yarn": ("deepseek_v3", dict(
        num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16,
        v_head_dim=16, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=3, n_group=4, topk_group=2,
        first_k_dense_replace=2, moe_intermediate_size=32, routed_scaling_factor=1.5, num_mtp_layers=0,
        initializer_range=0.45, max_position_embeddings=256,
        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16,
                             beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=0.707))),
    "gpt_oss": ("gpt_oss", dict(
        num_local_experts=4, num_experts_per_tok=2, intermediate_size=64, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        attention_bias=True, rope_parameters=dict(rope_type="default", rope_theta=150000.0))),
}


def prompts(name):
    """Fixed prompts: <s> then ids from a seeded generator (none special). Lengths 21,
    32 and 40, all longer than every window; phi3_longrope adds a 10-token prompt that
    stays within original_max_position_embeddings with its 5 new tokens."""
    g = torch.Generator().manual_seed(SEED)
    out = []
    for n in (21, 32, 40):
        ids = [1] + torch.randint(3, 512, (n - 1,), generator=g).tolist()
        out.append({"ids": ids, "new_tokens": NEW_TOKENS})
    if name == "phi3_longrope":
        ids = [1] + torch.randint(3, 512, (9,), generator=g).tolist()
        out.append({"ids": ids, "new_tokens": 5})
    return out


def build(name):
    model_type, over = ARCHS[name]
    kw = dict(COMMON)
    kw.update(over)
    if model_type == "phi3":
        kw.pop("head_dim")  # Phi3Config has none: hidden_size / num_attention_heads
    if model_type == "deepseek_v3":
        kw.pop("head_dim")  # DeepseekV3Config sets it to qk_rope_head_dim (the rotary part)
    cfg = AutoConfig.for_model(model_type, **kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED + zlib.crc32(name.encode()))
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        for pname, p in model.named_parameters():
            # Norm weights (ones, or zeros where the norm computes 1+w), biases,
            # sinks: randomised, so that a norm or bias read wrongly, or not
            # applied, changes the logits.
            if p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    model.mxfp4 = mxfp4_experts(model) if model_type == "gpt_oss" else None
    return model.eval()


def mxfp4_experts(model):
    """Gives gpt-oss's experts MXFP4 weights as the Hub's checkpoints store them: random packed
    FP4 blocks [experts, out, in/32, 16] and biased power-of-two scales [experts, out, in/32],
    the parameters set to what transformers' own reader (convert_moe_packed_tensors) makes of
    them, so that every checkpoint of this model (f32, bf16: FP4 values times powers of two are
    exact in both) computes what the MXFP4 one does. Returns {tensor name: uint8 tensor}."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    g = torch.Generator().manual_seed(SEED + 4)
    packed = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not (name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj")):
                continue
            E, n_in, n_out = p.shape  # transformers' layout: [experts, in, out]
            blocks = torch.randint(0, 256, (E, n_out, n_in // 32, 16), generator=g, dtype=torch.uint8)
            scales = torch.randint(124, 127, (E, n_out, n_in // 32), generator=g, dtype=torch.uint8)
            p.copy_(convert_moe_packed_tensors(blocks, scales, dtype=torch.float32))
            packed[name + "_blocks"], packed[name + "_scales"] = blocks, scales
    return packed


def save_mxfp4(model, path):
    """Writes the model as the Hub's gpt-oss checkpoints are: experts as MXFP4 blocks and scales,
    every other tensor float32, config.json with quantization_config mxfp4."""
    from safetensors.torch import save_file
    os.makedirs(path, exist_ok=True)
    sd = {k: v.contiguous() for k, v in model.state_dict().items()
          if not (k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"))}
    sd.update(model.mxfp4)
    save_file(sd, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    model.generation_config.save_pretrained(path)


def logits_all(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=False).logits[0].float()


def greedy(model, ids, n):
    """n greedy ids by a manual cached loop; returns the ids and each step's top-2 gap."""
    out, gaps = [], []
    with torch.no_grad():
        res = model(torch.tensor([ids]), use_cache=True)
        for step in range(n):
            last = res.logits[0, -1].float()
            top = torch.topk(last, 2)
            gaps.append(float(top.values[0] - top.values[1]))
            nxt = int(top.indices[0])
            out.append(nxt)
            if step + 1 < n:
                res = model(torch.tensor([[nxt]]), cache=res.cache, use_cache=True)
    return out, gaps


class Probes:
    """Measures, during a model's forwards, what shows that a feature is exercised:
    the largest uncapped attention score and final logit (against the soft-caps),
    and which experts each router picked."""

    def __init__(self, model, name):
        self.max_score = 0.0
        self.max_logit = 0.0
        self.experts = {}
        self.hooks = []
        self.patched = None
        cfg = model.config
        if getattr(cfg, "final_logit_softcapping", None):
            self.hooks.append(model.lm_head.register_forward_hook(self._logit))
        if getattr(cfg, "attn_logit_softcapping", None):
            mod = sys.modules[type(model.model.layers[0].self_attn).__module__]
            orig = mod.eager_attention_forward
            probes = self

            def wrapped(module, query, key, *a, **k):
                keys = mod.repeat_kv(key, module.num_key_value_groups)
                s = torch.matmul(query, keys.transpose(2, 3)) * k.get("scaling", a[2] if len(a) > 2 else None)
                q, kl = s.shape[-2], s.shape[-1]
                causal = torch.ones(q, kl, dtype=torch.bool).tril(kl - q)
                probes.max_score = max(probes.max_score, float(s.abs().masked_fill(~causal, 0).max()))
                return orig(module, query, key, *a, **k)

            mod.eager_attention_forward = wrapped
            self.patched = (mod, orig)
        for mname, m in model.named_modules():
            if type(m).__name__.lower().endswith("router"):
                self.hooks.append(m.register_forward_hook(self._router(mname)))

    def _logit(self, module, inp, out):
        self.max_logit = max(self.max_logit, float(out.abs().max()))

    def _router(self, mname):
        def hook(module, inp, out):
            self.experts.setdefault(mname, set()).update(out[2].flatten().tolist())
        return hook

    def close(self):
        for h in self.hooks:
            h.remove()
        if self.patched:
            self.patched[0].eager_attention_forward = self.patched[1]


def copy_tokenizer(dst):
    for f in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(STORIES, f), os.path.join(dst, f))


def fmt(rows):
    """Rows of float32 logits as JSON text, 9 significant digits: float32 exactly."""
    return [[float("%.9g" % v) for v in r] for r in rows.tolist()]


def run(model, name, ps, features):
    probes = Probes(model, name)
    try:
        out = []
        for p in ps:
            lg = logits_all(model, p["ids"])
            ids, gaps = greedy(model, p["ids"], p["new_tokens"])
            if min(gaps) <= MIN_GAP:
                raise SystemExit(f"tiny.py: {name}: greedy step gap {min(gaps):.3g} <= {MIN_GAP}: not decisive")
            out.append({"logits": fmt(lg), "greedy_ids": ids, "greedy_gaps": gaps})
    finally:
        probes.close()
    cfg = model.config
    if getattr(cfg, "attn_logit_softcapping", None):
        cap = cfg.attn_logit_softcapping
        if probes.max_score <= cap:
            raise SystemExit(f"tiny.py: {name}: attention scores reach {probes.max_score:.3g}, the cap {cap} never binds")
        features["attn_softcap"] = {"cap": cap, "max_abs_score": probes.max_score}
    if getattr(cfg, "final_logit_softcapping", None):
        cap = cfg.final_logit_softcapping
        if probes.max_logit <= cap:
            raise SystemExit(f"tiny.py: {name}: logits reach {probes.max_logit:.3g}, the cap {cap} never binds")
        features["final_softcap"] = {"cap": cap, "max_abs_logit": probes.max_logit}
    if probes.experts:
        n = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None) or cfg.n_routed_experts
        reached = {k: len(v) for k, v in sorted(probes.experts.items())}
        if min(reached.values()) < n:
            raise SystemExit(f"tiny.py: {name}: not every expert reached: {reached} of {n}")
        features["experts_reached"] = {"experts": n, "per_router": reached}
    return out


def make(outdir, name):
    model_type, _ = ARCHS[name]
    model = build(name)
    d = os.path.join(outdir, name)
    f32, bf16 = os.path.join(d, "f32"), os.path.join(d, "bf16")
    model.save_pretrained(f32, max_shard_size="1GB")
    folders = [f32, bf16]
    if model.mxfp4 is not None:
        folders.append(os.path.join(d, "mxfp4"))
        save_mxfp4(model, folders[-1])
    model.to(torch.bfloat16).save_pretrained(bf16, max_shard_size="100KB")
    for x in folders:
        copy_tokenizer(x)
    if not os.path.exists(os.path.join(bf16, "model.safetensors.index.json")):
        raise SystemExit(f"tiny.py: {name}: the bf16 checkpoint is not sharded")
    ps = prompts(name)
    ref = {
        "name": name, "model_type": model_type,
        "transformers_version": transformers.__version__, "torch_version": torch.__version__,
        "greedy": "manual loop: a forward over the prompt with use_cache=True, then one forward per "
                  "new token with the returned cache; argmax of the last logits",
        "attn_implementation": "eager",
        "min_gap": MIN_GAP, "prompts": ps, "features": {},
    }
    window = getattr(model.config, "sliding_window", None)
    if window:
        ref["features"]["sliding_window"] = window
        ref["features"]["layer_types"] = getattr(model.config, "layer_types", None)
    for dt, path in (("f32", f32), ("bf16", bf16)):
        # Loaded back from the files, as drafter reads them; bf16 upcast to float32.
        m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
        # Counted by transformers (a tied embedding once); matrix_parameters are those
        # of the weight matrices (two or more dimensions, not gpt-oss's stacked [experts, out]
        # biases), which a model holds in a bf16 checkpoint's bf16.
        ref["parameters"] = sum(p.numel() for p in m.parameters())
        ref["matrix_parameters"] = sum(p.numel() for n, p in m.named_parameters()
                                       if p.dim() >= 2 and not n.endswith("bias"))
        # The expert matrices an mxfp4 checkpoint stores as MXFP4 (gpt_oss).
        ref["mxfp4_parameters"] = sum(p.numel() for n, p in m.named_parameters()
                                      if n.endswith("experts.gate_up_proj") or n.endswith("experts.down_proj"))
        # Buffers the checkpoint stores beside the parameters (DeepSeek's
        # e_score_correction_bias): held once loaded, not counted as parameters.
        ref["persistent_buffers"] = sum(b.numel() for n, b in m.named_buffers()
                                        if n in m.state_dict() and "rotary" not in n and "inv_freq" not in n)
        ref[dt] = run(m, f"{name} {dt}", ps, ref["features"])
    if model.mxfp4 is not None:
        ref["mxfp4"] = ref["f32"]  # the same weights, exactly: see mxfp4_experts
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)
    gaps = min(min(r["greedy_gaps"]) for dt in ("f32", "bf16") for r in ref[dt])
    print(f"{name}: {ref['parameters']} parameters, smallest greedy gap {gaps:.3g}, features {ref['features']}")


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    outdir, names = sys.argv[1], sys.argv[2:] or list(ARCHS)
    for n in names:
        if n not in ARCHS:
            raise SystemExit(f"tiny.py: unknown architecture {n!r} (known: {', '.join(ARCHS)})")
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)  # the same reduction order on every machine
    torch.use_deterministic_algorithms(True)
    for n in names:
        make(outdir, n)


if __name__ == "__main__":
    main()
