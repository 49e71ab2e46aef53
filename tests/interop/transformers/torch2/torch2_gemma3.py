"""Truth from outside for Gemma 3: Hugging Face transformers 4.57 (the torch-2 tier).

Each case builds a tiny model with transformers' own classes (Gemma3TextConfig for
Gemma3ForCausalLM, Gemma3Config for Gemma3ForConditionalGeneration; random weights under
torch.manual_seed, every norm and bias included, nothing downloaded), saves it with
save_pretrained (safetensors, config.json beside it), splits it with auto-detection (the
preset comes from config.json's architectures) at every legal tp of 1, 2, 4, 8, and then:

  * runs the whole model the tensor-parallel way in torch, fed only each rank's shard file:
    vocabulary-parallel embedding summed over ranks and scaled by sqrt(hidden); in every
    layer each rank's heads with (1 + w) q_norm / k_norm over each head before RoPE, local
    layers (config.json's layer_types) rotating with rope_local_base_freq and attending
    within sliding_window, global ones rotating with rope_theta under linear rope_scaling,
    scores scaled by query_pre_attn_scalar^-0.5; the partial sums summed (the all-reduce),
    then the sandwich post-norms; the final norm and the tied (or untied) vocabulary-parallel
    head gathered with its padding dropped.  The logits must equal transformers' forward of
    the full model (attn_implementation="eager") within 1e-4;
  * requires `tpshard verify SET --source SRC --layer all` and `--whole-model` to exit 0, and
    the whole-model pass's own logits (--dump-logits) to equal transformers' within 1e-4;
  * shows the local RoPE base matters: the same forward rotating every layer as the global
    ones do misses transformers' logits (as does one without the q/k norms).

The models have 8 heads and 2 KV heads (K/V replicated at tp 4 and 8), head_dim 16 where
hidden / heads is 8, a window of 4 over 16 positions, and 6 or 7 layers so local and global
layers both run.  The multimodal case also checks that every rank holds the SigLIP vision
tower and the projector whole and byte-identical.

The test can fail: a wrong layout (K/V heads dealt round-robin to the ranks) gives a shard
set whose bytes are intact (`tpshard check` passes) but whose torch forward differs from
transformers' and which `tpshard verify` (--layer all and --whole-model) fails with exit 1.

Skips loudly when transformers cannot be imported (tests/interop/setup_torch2.sh).
"""
import os
import sys

import torch

import hf_tier as hf
from hf_tier import IDS, attend, causal_mask, gather_logits, linear, qkv_heads, report, vocab_embed
from test_hf_gemma_family import gemma_rms

BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=8,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rms_norm_eps=1e-6,
            query_pre_attn_scalar=24, sliding_window=4, rope_theta=1e6, rope_local_base_freq=1e4,
            rope_scaling={"rope_type": "linear", "factor": 8.0})


def cases():
    """(name, config, model class name, weight prefix, preset)."""
    from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig
    types = ["full_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
             "sliding_attention", "sliding_attention"]
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)
    mm = Gemma3Config(text_config=Gemma3TextConfig(**BASE), vision_config=vision, mm_tokens_per_image=4,
                      image_token_index=99, boi_token_index=97, eoi_token_index=98)
    return [
        ("gemma3-text", Gemma3TextConfig(**BASE), "model.", "gemma3_text"),  # tied; layers 0-4 local, 5 global
        ("gemma3-text-types-untied-bias",
         Gemma3TextConfig(**dict(BASE, num_hidden_layers=7, layer_types=types, tie_word_embeddings=False,
                                 attention_bias=True)), "model.", "gemma3_text"),
        ("gemma3-multimodal", mm, "language_model.model.", "gemma3"),
    ]


def text_config(cfg):
    return getattr(cfg, "text_config", cfg)


def make(cfg):
    """Gemma3ForConditionalGeneration for the multimodal config, eager attention throughout."""
    from transformers import AutoModelForCausalLM, Gemma3ForConditionalGeneration
    if cfg.model_type != "gemma3":
        return AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = Gemma3ForConditionalGeneration(cfg)
    model.config._attn_implementation = "eager"
    for sub in (model.config.text_config, model.config.vision_config):
        sub._attn_implementation = "eager"
    return model


def build(cfg, seed, path):
    """Gemma's norms scale by (1 + w): drawn around zero, as its biases."""
    return hf.build(cfg, seed, path, make=make, norm=(0, 0.3), bias=0.3)


def legal_tps(cfg):
    c = text_config(cfg)
    return hf.legal_tps(c.num_attention_heads, c.num_key_value_heads, c.intermediate_size)


def rope(c, n, local):
    """cos, sin of transformers' rotary_emb (global: rope_theta, linear scaling) or
    rotary_emb_local (rope_local_base_freq, no scaling)."""
    if local:
        return hf.rope_tables(n, c.head_dim, c.rope_local_base_freq)
    linear_scaling = c.rope_scaling and c.rope_scaling.get("rope_type") == "linear"
    return hf.rope_tables(n, c.head_dim, c.rope_theta, c.rope_scaling["factor"] if linear_scaling else None)


def tp_forward(ranks, cfg, prefix, ids, off=()):
    """The whole model from the ranks' slices alone; `off` names a feature to leave out
    ("local_rope": every layer rotates as the global ones; "qk_norm": no q/k norms)."""
    c = text_config(cfg)
    n, H, hd, eps = ids.shape[0], c.hidden_size, c.head_dim, c.rms_norm_eps
    emb = prefix + "embed_tokens.weight"
    x = vocab_embed(ranks, emb, ids, H)
    x = x * torch.tensor(H ** 0.5, dtype=x.dtype)
    scale = c.query_pre_attn_scalar ** -0.5
    causal = causal_mask(n)
    window = causal.masked_fill(torch.ones(n, n, dtype=torch.bool).tril(-c.sliding_window), float("-inf"))
    for layer in range(c.num_hidden_layers):
        p = prefix + "layers.%d." % layer
        is_local = c.layer_types[layer] == "sliding_attention"
        cos, sin = rope(c, n, is_local and "local_rope" not in off)
        m = window if is_local else causal
        attn = torch.zeros(n, H)
        for R in ranks:
            xn = gemma_rms(x, R[p + "input_layernorm.weight"], eps)
            q, k, v = qkv_heads(xn, R, p + "self_attn.", hd)
            if "qk_norm" not in off:  # each head over head_dim, before RoPE
                q = gemma_rms(q, R[p + "self_attn.q_norm.weight"], eps)
                k = gemma_rms(k, R[p + "self_attn.k_norm.weight"], eps)
            attn += attend(q, k, v, cos, sin, m, scale) @ R[p + "self_attn.o_proj.weight"].T  # all-reduce: a sum
        if p + "self_attn.o_proj.bias" in ranks[0]:
            attn += ranks[0][p + "self_attn.o_proj.bias"]  # once, after the sum
        x = x + gemma_rms(attn, ranks[0][p + "post_attention_layernorm.weight"], eps)  # every rank, its copy
        mlp = torch.zeros(n, H)
        for R in ranks:
            hn = gemma_rms(x, R[p + "pre_feedforward_layernorm.weight"], eps)
            a = torch.nn.functional.gelu(linear(hn, R, p + "mlp.gate_proj"), approximate="tanh")
            mlp += (a * linear(hn, R, p + "mlp.up_proj")) @ R[p + "mlp.down_proj.weight"].T
        x = x + gemma_rms(mlp, ranks[0][p + "post_feedforward_layernorm.weight"], eps)
    x = gemma_rms(x, ranks[0][prefix + "norm.weight"], eps)
    head = prefix.replace("model.", "", 1) if prefix != "model." else ""
    head = head + "lm_head.weight" if head + "lm_head.weight" in ranks[0] else emb  # tied
    return gather_logits(ranks, x, head, c.vocab_size)


def check_vision_replicated(name, src, ranks):
    """The multimodal case: the vision tower and projector whole on every rank."""
    from safetensors.torch import load_file
    full = load_file(os.path.join(src, "model.safetensors"))
    names = [k for k in full if k.startswith(("vision_tower.", "multi_modal_projector."))]
    bad = [(k, r) for k in names for r, R in enumerate(ranks) if k not in R or not torch.equal(R[k], full[k])]
    report(names and not bad, "%s: every rank holds the %d vision tower and projector tensors whole" %
           (name, len(names)), "differ: %s" % bad[:5])


def run_case(tmp, seed, name, cfg, prefix, preset):
    src = os.path.join(tmp, name, "src")
    model = build(cfg, seed, src)
    want = hf.logits(model, IDS, use_cache=False)
    each = (lambda t, out, ranks: t == 8 and check_vision_replicated(name, src, ranks)) if preset == "gemma3" else None
    done = hf.split_and_compare(tmp, name, src, want, lambda R: tp_forward(R, cfg, prefix, IDS), legal_tps(cfg),
                                detect="preset %s," % preset,
                                dump_logits=lambda ids: hf.logits(model, ids, use_cache=False), each=each)
    if done:  # the local RoPE base and the q/k norms bind on this model: leaving either out misses
        ranks = hf.load_ranks(os.path.join(tmp, name, "tp%d" % done[-1]))
        hf.features_matter(name, "the local RoPE base and the q/k norms",
                           lambda f: tp_forward(ranks, cfg, prefix, IDS, off=(f,)), want, ("local_rope", "qk_norm"))


def body(tmp):
    for seed, (name, cfg, prefix, preset) in enumerate(cases()):
        run_case(tmp, seed, name, cfg, prefix, preset)

    # A wrong cut: caught by the forward and by verify, not by the byte checks.
    from transformers import Gemma3TextConfig
    cfg = Gemma3TextConfig(**dict(BASE, num_key_value_heads=4))
    src = os.path.join(tmp, "wrong", "src")
    want = hf.logits(build(cfg, 99, src), IDS, use_cache=False)
    for wname, text, what in hf.wrong_layouts("gemma3_text", [
            ("kv-round-robin", hf.KV_RULE, hf.KV_ROUND_ROBIN, "K/V heads dealt round-robin")]):
        hf.wrong_cut(os.path.join(tmp, "wrong"), wname, what, src, text, lambda R: tp_forward(R, cfg, "model.", IDS),
                     want)


def main():
    return hf.main("torch2_gemma3", body, needs="Gemma3TextConfig")


if __name__ == "__main__":
    sys.exit(main())
