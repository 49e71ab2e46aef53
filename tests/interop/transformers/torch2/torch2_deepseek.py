"""Truth from outside for DeepSeek-V2 / V3 (multi-head latent attention, shared and routed
experts, dense first layers): Hugging Face transformers 4.57 (the torch-2 tier).

Each case builds a tiny model with transformers' DeepseekV2Config / DeepseekV3Config (random
weights, norms and biases included; nothing downloaded), saves it with save_pretrained,
splits it with auto-detection (config.json's architectures) at every legal tp of 1, 2, 4, 8,
and then:

  * runs the whole model the tensor-parallel way in torch, fed only each rank's shard file:
    vocabulary-parallel embedding summed over ranks; per layer each rank's MLA heads from its
    q_b_proj (or q_proj) and kv_b_proj slices and the replicated q_a/kv_a projections and
    norms, its o_proj partial sum; each rank's columns of the dense MLP, of the shared
    experts and of every routed expert its tokens picked (routing from the replicated router
    and e_score_correction_bias, the same on every rank), partial sums all-reduced (summed),
    row-parallel biases added once; the final norm; the vocabulary-parallel lm_head gathered,
    padding dropped.  The logits must equal transformers' forward within 1e-4 (float32);
  * requires `tpshard check`, `tpshard verify SET --source SRC --layer all` and
    `tpshard verify SET --whole-model` to exit 0, and verify's float64 reference of every
    layer (MLA attention, dense MLP or routed and shared experts) to equal transformers'
    decoder layer.

Variants: V3 with q_lora_rank and with none (q_proj), rope_interleave false, yarn with
mscale/mscale_all_dim, attention_bias; V2 with group_limited_greedy routing, V2-Lite
(no q_lora_rank, greedy).

The test can fail: two wrong layouts (kv_b_proj cut as two plain halves, i.e. all k_nope rows
then all v rows where each head's rows interleave [k_nope_h; v_h]; q_b_proj's heads dealt
round-robin) give shard sets whose bytes are intact (`tpshard check` passes) but whose
forward differs from transformers' and which `tpshard verify` refuses (exit 1).
"""
import math
import os
import sys

import torch

import hf_tier as hf
from hf_tier import IDS, causal_mask, gather_logits, linear, report, rms, rotate_half, vocab_embed

BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
            num_attention_heads=8, num_key_value_heads=8, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=8, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
            first_k_dense_replace=1, max_position_embeddings=64, rms_norm_eps=1e-6)
V3 = dict(n_group=2, topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True)
V2 = dict(n_group=2, topk_group=1, routed_scaling_factor=1.5, topk_method="group_limited_greedy")


def cases():
    from transformers import DeepseekV2Config, DeepseekV3Config
    c3 = lambda **kw: DeepseekV3Config(**dict(dict(BASE, **V3), **kw))
    c2 = lambda **kw: DeepseekV2Config(**dict(dict(BASE, **V2), **kw))
    return [
        ("v3", c3()),
        ("v3-no-q-lora", c3(q_lora_rank=None, attention_bias=True)),
        ("v3-rope-halves", c3(rope_interleave=False)),
        ("v3-yarn", c3(rope_scaling={"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.8,
                                     "original_max_position_embeddings": 16, "beta_fast": 32, "beta_slow": 1},
                       max_position_embeddings=64)),
        ("v2", c2()),
        ("v2-lite", c2(q_lora_rank=None, topk_method="greedy", n_group=1, topk_group=1)),
    ]


def build(cfg, seed, path):
    """Every parameter drawn again, and the V3 router's e_score_correction_bias (a buffer)."""
    return hf.build(cfg, seed, path, buffers={"e_score_correction_bias": 0.1})


def legal_tps(cfg):
    return hf.legal_tps(cfg.num_attention_heads, None, cfg.intermediate_size, cfg.moe_intermediate_size)


def rope(cfg, x, pos):
    """The rotation of the rope dims in the modeling file's own form: V2 multiplies complex
    pairs (2i, 2i+1) by freqs_cis; V3 de-interleaves (rope_interleave) and rotates halves."""
    if cfg.model_type == "deepseek_v2":
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * pos).flatten(-2)
    cos, sin = pos
    if cfg.rope_interleave:
        x = x.view(*x.shape[:-1], -1, 2).transpose(-1, -2).reshape(x.shape)
    return x * cos + rotate_half(x) * sin


def route(cfg, R, p, hn):
    """(top-k expert ids, weights) per token from the replicated router, as the modeling file
    (GLM-4.5's router is DeepSeek-V3's: torch2_glm4_moe.py)."""
    logits = hn @ R[p + "mlp.gate.weight"].T
    E, G = cfg.n_routed_experts, cfg.n_group or 1
    v3 = cfg.model_type in ("deepseek_v3", "glm4_moe")
    if v3:
        scores = logits.sigmoid()
        choice = scores + R[p + "mlp.gate.e_score_correction_bias"]
        gs = choice.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1)
    else:
        scores = choice = logits.softmax(-1)
        gs = choice.view(-1, G, E // G).max(-1).values if cfg.topk_method == "group_limited_greedy" else None
    if gs is not None:
        keep = torch.zeros_like(gs).scatter_(1, gs.topk(cfg.topk_group, dim=-1)[1], 1)
        choice = choice.masked_fill(~keep.repeat_interleave(E // G, dim=1).bool(), 0.0)
    idx = choice.topk(cfg.num_experts_per_tok, dim=-1)[1]
    w = scores.gather(1, idx)
    if v3 and cfg.norm_topk_prob:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return idx, w * cfg.routed_scaling_factor


def swiglu(x, R, name):
    return (torch.nn.functional.silu(linear(x, R, name + ".gate_proj")) * linear(x, R, name + ".up_proj")) \
        @ R[name + ".down_proj.weight"].T


def moe_mlp(ranks, cfg, p, layer, x, eps):
    """Layer `layer`'s MLP summed over the ranks (the all-reduce): the dense MLP on the first
    first_k_dense_replace layers, else the routed experts each token picks plus the shared ones."""
    mlp = torch.zeros_like(x)
    for R in ranks:
        hn = rms(x, R[p + "post_attention_layernorm.weight"], eps)
        if layer < cfg.first_k_dense_replace:
            mlp += swiglu(hn, R, p + "mlp")
            continue
        idx, wt = route(cfg, R, p, hn)
        for e in range(cfg.n_routed_experts):
            tok, slot = torch.where(idx == e)
            if len(tok):
                mlp.index_add_(0, tok, swiglu(hn[tok], R, p + "mlp.experts.%d" % e) * wt[tok, slot, None])
        mlp += swiglu(hn, R, p + "mlp.shared_experts")
    return mlp


def tp_forward(ranks, cfg, ids, pos):
    """The whole model from the ranks' slices alone."""
    n, H, eps = ids.shape[0], cfg.hidden_size, cfg.rms_norm_eps
    nope, rd, vd = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    scale = (nope + rd) ** -0.5
    rs = cfg.rope_scaling or {}
    if rs.get("mscale_all_dim"):
        m = 0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1.0
        scale *= m * m
    x = vocab_embed(ranks, "model.embed_tokens.weight", ids, H)
    causal = causal_mask(n)
    for layer in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % layer
        a = p + "self_attn."
        attn = torch.zeros(n, H)
        for R in ranks:
            xn = rms(x, R[p + "input_layernorm.weight"], eps)
            if a + "q_proj.weight" in R:
                q = linear(xn, R, a + "q_proj")
            else:
                q = linear(rms(linear(xn, R, a + "q_a_proj"), R[a + "q_a_layernorm.weight"], 1e-6), R, a + "q_b_proj")
            q = q.view(n, -1, nope + rd).transpose(0, 1)
            c = linear(xn, R, a + "kv_a_proj_with_mqa")
            kv = linear(rms(c[:, :-rd], R[a + "kv_a_layernorm.weight"], 1e-6), R, a + "kv_b_proj")
            kv = kv.view(n, -1, nope + vd).transpose(0, 1)
            q_pe, k_pe = rope(cfg, q[..., nope:], pos), rope(cfg, c[None, :, -rd:], pos)
            qq = torch.cat((q[..., :nope], q_pe), -1)
            kk = torch.cat((kv[..., :nope], k_pe.expand(q.shape[0], n, rd)), -1)
            w = torch.softmax(qq @ kk.transpose(1, 2) * scale + causal, dim=-1)
            ctx = (w @ kv[..., nope:]).transpose(0, 1).reshape(n, -1)
            attn += ctx @ R[a + "o_proj.weight"].T  # the all-reduce: a sum
        if a + "o_proj.bias" in ranks[0]:
            attn += ranks[0][a + "o_proj.bias"]
        x = x + attn
        x = x + moe_mlp(ranks, cfg, p, layer, x, eps)
    x = rms(x, ranks[0]["model.norm.weight"], eps)
    return gather_logits(ranks, x, "lm_head.weight", cfg.vocab_size)


def positions(model, n):
    rot = model.model.rotary_emb
    out = rot(torch.zeros(1, n, 1), torch.arange(n)[None])
    return out[0][None] if torch.is_tensor(out) else (out[0][0], out[1][0])


def checks(out, src, dump=None):
    """check, verify --source --layer all and verify --whole-model (its reference from the shards)."""
    return [("check", out), ("verify", out, "--source", src, "--layer", "all"), ("verify", out, "--whole-model")]


def check_reference(name, model, cfg, shards):
    """verify's float64 reference of every layer (MLA attention; the dense MLP, or the routed
    and shared experts) against transformers' own decoder layer in float64: checks verify's
    q/kv paths, RoPE form, yarn, softmax scale and routing against the library (cos/sin come
    from float32, and the routers compute in float32, hence 1e-5)."""
    layers, m64 = hf.dumped_reference(name, model, cfg, shards, args=("--layer", "all"))
    if layers is None:
        return False
    worst = 0.0
    for L in layers:
        x = torch.tensor(L["x"], dtype=torch.float64)
        n = x.shape[0]
        mask = causal_mask(n, torch.float64)[None, None]
        layer = m64.model.layers[L["layer"]]
        pe = m64.model.rotary_emb(x[None], torch.arange(n)[None])
        with torch.no_grad():
            a = layer.self_attn(hidden_states=layer.input_layernorm(x[None]), attention_mask=mask,
                                position_embeddings=pe, position_ids=torch.arange(n)[None])[0][0]
            hn = layer.post_attention_layernorm(x + a)
            if L["layer"] < cfg.first_k_dense_replace:
                m = layer.mlp(hn)
            else:  # transformers' router computes in float32 whatever the model's dtype
                m = model.model.layers[L["layer"]].mlp(hn.float()[None])[0].double()
        worst = max(worst, hf.layer_error(L, a, m))
    return report(worst < 1e-5, "%s: verify's float64 reference of every layer equals transformers' decoder layer "
                  "(rel err %.2g)" % (name, worst))


def wrong_layouts():
    kvb = ('  - match: model.layers.*.self_attn.kv_b_proj.weight\n    split: column\n'
           '    unit: qk_nope_head_dim+v_head_dim\n    size: heads*(qk_nope_head_dim+v_head_dim)\n')
    qb = ('  - match: "model.layers.*.self_attn.{q_b_proj,q_proj}.weight"\n    split: column\n'
          '    unit: qk_nope_head_dim+qk_rope_head_dim\n    size: heads*(qk_nope_head_dim+qk_rope_head_dim)\n')
    # kv_b as if it were [K_nope_all; V_all]: two plain segments, rank r the r-th piece of each.
    kvb_plain = ('  - match: model.layers.*.self_attn.kv_b_proj.weight\n    split: column\n    segments:\n'
                 '      - {name: k, size: heads*qk_nope_head_dim}\n      - {name: v, size: heads*v_head_dim}\n')
    # q_b's heads in two halves: rank r of 2 gets heads r*2.. of each half, not its own heads.
    qb_rr = hf.halves("model.layers.*.self_attn.{q_b_proj,q_proj}.weight",
                      "heads/2*(qk_nope_head_dim+qk_rope_head_dim)", "qk_nope_head_dim+qk_rope_head_dim")
    return hf.wrong_layouts("deepseek_v3", [
        ("kv-b-plain", kvb, kvb_plain, "kv_b_proj cut as [k_nope; v] blocks, not per head"),
        ("q-b-round-robin", qb, qb_rr, "q_b_proj heads dealt round-robin")])


CLAIM = ("split, check and verify pass, and the torch TP forward from the shard files equals transformers' logits "
         "at tp {tps} (max abs difference {worst} <= {tol})")


def body(tmp):
    for seed, (name, cfg) in enumerate(cases()):
        src = os.path.join(tmp, name, "src")
        model = build(cfg, seed, src)
        pos = positions(model, len(IDS))
        done = hf.split_and_compare(tmp, name, src, hf.logits(model, IDS), lambda R: tp_forward(R, cfg, IDS, pos),
                                    legal_tps(cfg), detect="preset deepseek_v", verifies=checks, claim=CLAIM)
        if done:
            check_reference(name, model, cfg, os.path.join(tmp, name, "tp%d" % done[-1]))

    from transformers import DeepseekV3Config
    cfg = DeepseekV3Config(**dict(BASE, **V3))
    src = os.path.join(tmp, "wrong", "src")
    model = build(cfg, 99, src)
    want = hf.logits(model, IDS)
    pos = positions(model, len(IDS))
    for wname, text, what in wrong_layouts():
        hf.wrong_cut(os.path.join(tmp, "wrong"), wname, what, src, text, lambda R: tp_forward(R, cfg, IDS, pos), want,
                     verifies=(("verify --source", True, ("--layer", "all")),))


def main():
    return hf.main("torch2_deepseek", body, needs="DeepseekV3Config")


if __name__ == "__main__":
    sys.exit(main())
