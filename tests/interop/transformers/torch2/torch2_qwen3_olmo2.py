"""Truth from outside for Qwen3 (dense) and OLMo 2: Hugging Face transformers (4.57 on torch 2;
4.46 has neither family).

Each case builds a tiny model with transformers' own classes (Qwen3Config, Olmo2Config; every
parameter drawn again under torch.manual_seed, norms and q/k norms included; nothing
downloaded), saves it with save_pretrained, splits it with auto-detection (no --preset: the
preset comes from config.json's architectures) at every legal tp of 1, 2, 4, 8, and then:

  * runs the whole model the tensor-parallel way in torch, fed only each rank's shard file
    (the rank from the file's tp_rank metadata): vocabulary-parallel embedding summed over
    ranks; in every layer each rank's attention and MLP partial sums, all-reduced (summed);
    Qwen3's q/k norm per head on each rank; OLMo 2's q/k norm over the whole projection by
    an all-gather of the ranks' q and k (one copy of each replicated KV head), the norm of
    the full vectors, and each rank keeping its part, as vLLM's Olmo2Attention does; OLMo 2's
    post-block norms after the all-reduce; the final norm and the gathered LM head without
    its padding.  The logits must equal transformers' forward within 1e-4 (float32, eager
    attention);
  * requires `tpshard verify SET --source SRC --layer all` and `--whole-model` to exit 0;
  * compares verify's float64 layer reference (--dump-reference) with transformers' decoder
    layer in float64, which ties verify's q/k norm math to the library's.

Variants: GQA with tp above the KV heads (K/V replicated at tp 4, 8), head_dim != hidden /
heads, Qwen3 with tied embeddings.

The test can fail: K/V heads dealt round-robin (Qwen3), and OLMo 2's q_norm / k_norm cut with
the heads instead of replicated (an engine then normalizes each rank's part alone) give sets
whose bytes are intact (`tpshard check` passes), while the torch forward differs from
transformers' and `tpshard verify` exits 1.
"""
import os
import sys

import torch

import hf_tier as hf
from hf_tier import IDS, attend, causal_mask, gather_logits, report, rms, rotary, tpshard, vocab_embed

BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)


def cases():
    from transformers import Olmo2Config, Qwen3Config
    return [
        ("qwen3-gqa-head-dim-16", Qwen3Config(**dict(BASE, head_dim=16))),  # hidden / heads is 8
        ("qwen3-tied", Qwen3Config(**dict(BASE, head_dim=8, tie_word_embeddings=True))),
        ("olmo2-gqa", Olmo2Config(**BASE)),
        ("olmo2-head-dim-16", Olmo2Config(**dict(BASE, head_dim=16))),
    ]


def legal_tps(cfg):
    return hf.legal_tps(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size)


def olmo2_qk(ranks, qs, ks, p, eps, kv):
    """OLMo 2's q/k norm under TP: all-gather q and k ([n, local] per rank), normalize the full
    vectors, give each rank its part back.  With K/V replicated (tp > kv) ranks r and r + 1..
    hold the same KV head: the gather takes one copy of each.  A rank whose q_norm slice is
    not the whole vector (a cut weight) is normalized alone, as an engine that skips the
    gather would."""
    T = len(ranks)
    whole = [R[p + "self_attn.q_norm.weight"].shape[0] == sum(q.shape[1] for q in qs) for R in ranks]
    if not all(whole):
        return ([rms(q, R[p + "self_attn.q_norm.weight"], eps) for q, R in zip(qs, ranks)],
                [rms(k, R[p + "self_attn.k_norm.weight"], eps) for k, R in zip(ks, ranks)])
    q_full = rms(torch.cat(qs, dim=1), ranks[0][p + "self_attn.q_norm.weight"], eps)
    owners = range(T) if kv >= T else range(0, T, T // kv)
    k_full = rms(torch.cat([ks[r] for r in owners], dim=1), ranks[0][p + "self_attn.k_norm.weight"], eps)
    q_out, k_out, q0 = [], [], 0
    for r in range(T):
        q_out.append(q_full[:, q0:q0 + qs[r].shape[1]])
        q0 += qs[r].shape[1]
        first = r * ks[r].shape[1] if kv >= T else (r * kv // T) * ks[r].shape[1]
        k_out.append(k_full[:, first:first + ks[r].shape[1]])
    return q_out, k_out


def tp_forward(ranks, cfg, ids, cos, sin):
    """The whole model from the ranks' slices alone (local query head j reads local KV head
    j * kv_local // q_local)."""
    olmo2 = cfg.model_type == "olmo2"
    n, H, hd, eps = ids.shape[0], cfg.hidden_size, hf.head_dim(cfg), cfg.rms_norm_eps
    x = vocab_embed(ranks, "model.embed_tokens.weight", ids, H)
    causal = causal_mask(n)
    for layer in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % layer
        xns = [x if olmo2 else rms(x, R[p + "input_layernorm.weight"], eps) for R in ranks]
        qs = [xn @ R[p + "self_attn.q_proj.weight"].T for xn, R in zip(xns, ranks)]
        ks = [xn @ R[p + "self_attn.k_proj.weight"].T for xn, R in zip(xns, ranks)]
        if olmo2:
            qs, ks = olmo2_qk(ranks, qs, ks, p, eps, cfg.num_key_value_heads)
        attn = torch.zeros(n, H)
        for R, xn, q, k in zip(ranks, xns, qs, ks):
            q, k = q.view(n, -1, hd), k.view(n, -1, hd)
            if not olmo2:  # Qwen3: each head by itself
                q, k = rms(q, R[p + "self_attn.q_norm.weight"], eps), rms(k, R[p + "self_attn.k_norm.weight"], eps)
            q, k = q.transpose(0, 1), k.transpose(0, 1)
            v = (xn @ R[p + "self_attn.v_proj.weight"].T).view(n, -1, hd).transpose(0, 1)
            attn += attend(q, k, v, cos, sin, causal) @ R[p + "self_attn.o_proj.weight"].T  # all-reduce
        x = x + (rms(attn, ranks[0][p + "post_attention_layernorm.weight"], eps) if olmo2 else attn)
        mlp = torch.zeros(n, H)
        for R in ranks:
            hn = x if olmo2 else rms(x, R[p + "post_attention_layernorm.weight"], eps)
            a = torch.nn.functional.silu(hn @ R[p + "mlp.gate_proj.weight"].T) * (hn @ R[p + "mlp.up_proj.weight"].T)
            mlp += a @ R[p + "mlp.down_proj.weight"].T
        x = x + (rms(mlp, ranks[0][p + "post_feedforward_layernorm.weight"], eps) if olmo2 else mlp)
    x = rms(x, ranks[0]["model.norm.weight"], eps)
    head = "lm_head.weight" if "lm_head.weight" in ranks[0] else "model.embed_tokens.weight"
    return gather_logits(ranks, x, head, cfg.vocab_size)


def check_reference(name, model, cfg, shards):
    """verify's float64 layer reference against transformers' decoder layer in float64."""
    layers, m64 = hf.dumped_reference(name, model, cfg, shards)
    if layers is None:
        return False
    olmo2 = cfg.model_type == "olmo2"
    worst = 0.0
    for L in layers:
        x = torch.tensor(L["x"], dtype=torch.float64)[None]
        n = x.shape[1]
        mask = causal_mask(n, torch.float64)[None, None]
        layer = m64.model.layers[L["layer"]]
        cos, sin = m64.model.rotary_emb(x, torch.arange(n)[None])
        with torch.no_grad():
            xin = x if olmo2 else layer.input_layernorm(x)
            a = layer.self_attn(hidden_states=xin, attention_mask=mask, position_embeddings=(cos, sin))[0]
            if olmo2:
                a = layer.post_attention_layernorm(a)
                m = layer.post_feedforward_layernorm(layer.mlp(x + a))
            else:
                m = layer.mlp(layer.post_attention_layernorm(x + a))
        worst = max(worst, hf.layer_error(L, a[0], m[0]))
    return report(worst < 1e-5, "%s: verify's float64 layer reference equals transformers' decoder layer "
                  "(worst rel err %.2g)" % (name, worst))


def wrong_layouts(preset):
    """(name, yaml text, what it does wrong) for a preset with one rule put first."""
    text = tpshard("layout", "--preset", preset).stdout
    if preset == "qwen3":
        # two segments of half the KV heads: rank r of 2 gets heads r and r + kv/2
        rule = hf.halves("model.layers.*.self_attn.{k_proj,v_proj}.weight", "kv_heads/2*head_dim", "head_dim")
        what = "K/V heads dealt round-robin"
    else:
        rule = '  - match: "model.layers.*.self_attn.{q_norm,k_norm}.weight"\n    split: column\n    unit: head_dim\n'
        what = "q_norm/k_norm cut with the heads"
    return preset + "-wrong", text.replace("rules:\n", "rules:\n" + rule, 1), what


def body(tmp):
    arch = {"qwen3": "Qwen3ForCausalLM", "olmo2": "Olmo2ForCausalLM"}
    for seed, (name, cfg) in enumerate(cases()):
        src = os.path.join(tmp, name, "src")
        model = hf.build(cfg, seed, src)
        cos, sin = rotary(model, len(IDS))
        said = "layout: preset %s, from %s architectures %s" % (cfg.model_type, os.path.join(src, "config.json"),
                                                               arch[cfg.model_type])
        done = hf.split_and_compare(tmp, name, src, hf.logits(model, IDS), lambda R: tp_forward(R, cfg, IDS, cos, sin),
                                    legal_tps(cfg), detect=said)
        if done:
            check_reference(name, model, cfg, os.path.join(tmp, name, "tp%d" % done[-1]))

    # Wrong cuts: caught by the forward and by verify, not by the byte checks.
    from transformers import Olmo2Config, Qwen3Config
    for preset, cfg in (("qwen3", Qwen3Config(**dict(BASE, num_key_value_heads=4, head_dim=16))),
                        ("olmo2", Olmo2Config(**BASE))):
        src = os.path.join(tmp, "wrong-" + preset, "src")
        model = hf.build(cfg, 99, src)
        cos, sin = rotary(model, len(IDS))
        wname, text, what = wrong_layouts(preset)
        hf.wrong_cut(tmp, wname, "%s, %s" % (preset, what), src, text, lambda R: tp_forward(R, cfg, IDS, cos, sin),
                     hf.logits(model, IDS))


def main():
    return hf.main("torch2_qwen3_olmo2", body, needs="Qwen3Config")


if __name__ == "__main__":
    sys.exit(main())
