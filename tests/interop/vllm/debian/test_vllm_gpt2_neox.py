"""Truth from outside for `--target vllm` / `--target sglang` on GPT-NeoX (Pythia).

Written from vLLM's gpt_neox.py, which served GPT-NeoX through release 0.31 (so these sets are
written with --target-version 0.31; vLLM 0.32 serves it through its Transformers backend, HF's
module tree under model., embed_out as lm_head, query_key_value cut as HF keeps it: the current
class, checked against that layout here and against the real engine in vllm_real_more.py)
(GPTNeoXForCausalLM.load_weights: HF's names kept; the
query_key_value weight and bias viewed as (heads, 3, head_dim, ...) and transposed to
(3, heads, head_dim, ...) before QKVParallelLinear takes rank r's q, k and v heads, so a rank
holds [q_r; k_r; v_r]; dense and dense_4h_to_h RowParallelLinear with their biases whole;
embed_in / embed_out the vocabulary padded to a multiple of 64 and cut in T blocks; the
attention scale buffers of current releases), not from tpshard's code:
  * the expected per-rank state dict, loaded with vllm_emul.load (ShardedStateLoader's rules);
  * a tensor-parallel forward in torch from the rank files alone (each rank's blocked qkv,
    partial rotary, parallel residual, the row-parallel sums), vs transformers' logits;
  * a wrong set (tpshard's own target, HF's per-head interleaved rows) fails both;
  * reshard 2 -> 4 equals split at 4; merge gives the source's tensors bit-exact.
GPT-2 likewise, from vLLM's gpt2.py (GPT2LMHeadModel.load_weights: the transformer. prefix
added to a GPT2Model save's names, attn.bias / masked_bias skipped, the c_attn, c_proj and c_fc
weights transposed from HF's Conv1D [in, out] to [out, in] before QKVParallelLinear (rank r's
[q_r; k_r; v_r] rows), RowParallelLinear (attn.c_proj, mlp.c_proj: column slices, biases
whole) and ColumnParallelLinear (c_fc) take them; wte padded to a multiple of 64 and tied, so
the one key is lm_head.weight): the loader, the forward, a wrong set (c_attn's rows cut as one
block, not per q, k and v), reshard, merge, and a save without the transformer. prefix giving
the same files.
"""
import os
import shutil
import sys
import tempfile

import tap

ROT_BASE = 10000


def expected(sd, cfg, T, r):
    import torch
    nh, H = cfg.num_attention_heads, cfg.hidden_size
    hd = H // nh
    out = {}
    for k, v in sd.items():
        if k.endswith(("attention.bias", "masked_bias", "inv_freq")):
            continue
        if k in ("gpt_neox.embed_in.weight", "embed_out.weight"):
            V = v.shape[0]
            P = (V + 63) // 64 * 64
            w = torch.cat([v, v.new_zeros(P - V, v.shape[1])])
            out[k] = w[r * P // T:(r + 1) * P // T]
        elif "query_key_value" in k:
            w = v.reshape((nh, 3, hd) + tuple(v.shape[1:])).transpose(0, 1)  # vLLM's load_weights
            n = nh // T
            out[k] = w[:, r * n:(r + 1) * n].reshape((-1,) + tuple(v.shape[1:]))
        elif k.endswith(("attention.dense.weight", "dense_4h_to_h.weight")):
            c = v.shape[1] // T
            out[k] = v[:, r * c:(r + 1) * c]
        elif "dense_h_to_4h" in k:
            c = v.shape[0] // T
            out[k] = v[r * c:(r + 1) * c]
        else:
            out[k] = v
    for i in range(cfg.num_hidden_layers):
        for s in ("_k_scale", "_v_scale", "_q_scale", "_prob_scale"):
            out["gpt_neox.layers.%d.attention.attn.%s" % (i, s)] = torch.tensor(1.0)
    return {k: v.contiguous() for k, v in out.items()}


def tp_forward(R, cfg, T, ids):
    """The model the tensor-parallel way from each rank's tensors R[r] alone."""
    import torch
    import torch.nn.functional as F
    nh, H, V = cfg.num_attention_heads, cfg.hidden_size, cfg.vocab_size
    hd, n = H // nh, nh // T
    rot = int(hd * cfg.rotary_pct)
    S = ids.shape[1]
    emb = torch.cat([R[r]["gpt_neox.embed_in.weight"] for r in range(T)])[:V]
    x = emb[ids[0]].float()
    inv = 1.0 / (ROT_BASE ** (torch.arange(0, rot, 2).float() / rot))
    fr = torch.outer(torch.arange(S).float(), inv)
    cos, sin = torch.cat([fr, fr], -1).cos(), torch.cat([fr, fr], -1).sin()

    def rope(t):
        a, b = t[..., :rot], t[..., rot:]
        h1, h2 = a[..., :rot // 2], a[..., rot // 2:]
        return torch.cat([a * cos + torch.cat([-h2, h1], -1) * sin, b], -1)

    mask = torch.full((S, S), float("-inf")).triu(1)
    for i in range(cfg.num_hidden_layers):
        p = "gpt_neox.layers.%d." % i
        g = lambda r, k: R[r][p + k].float()  # noqa: E731
        a_in = F.layer_norm(x, (H,), g(0, "input_layernorm.weight"), g(0, "input_layernorm.bias"), cfg.layer_norm_eps)
        m_in = F.layer_norm(x, (H,), g(0, "post_attention_layernorm.weight"), g(0, "post_attention_layernorm.bias"),
                            cfg.layer_norm_eps)
        attn, mlp = 0, 0
        for r in range(T):
            qkv = a_in @ g(r, "attention.query_key_value.weight").T + g(r, "attention.query_key_value.bias")
            q, k, v = (t.reshape(S, n, hd).transpose(0, 1) for t in qkv.split(n * hd, -1))  # blocked [q_r; k_r; v_r]
            q, k = rope(q), rope(k)
            a = torch.softmax(q @ k.transpose(-1, -2) / hd ** 0.5 + mask, -1) @ v
            attn = attn + a.transpose(0, 1).reshape(S, n * hd) @ g(r, "attention.dense.weight").T
            h = F.gelu(m_in @ g(r, "mlp.dense_h_to_4h.weight").T + g(r, "mlp.dense_h_to_4h.bias"))
            mlp = mlp + h @ g(r, "mlp.dense_4h_to_h.weight").T
        x = x + attn + g(0, "attention.dense.bias") + mlp + g(0, "mlp.dense_4h_to_h.bias")
    x = F.layer_norm(x, (H,), R[0]["gpt_neox.final_layer_norm.weight"].float(),
                     R[0]["gpt_neox.final_layer_norm.bias"].float(), cfg.layer_norm_eps)
    head = torch.cat([R[r]["embed_out.weight"] for r in range(T)])[:V].float()
    return x @ head.T


def engine_sets(name, src, tmp, prefix, want, scales, forward, ref, vllm_args=()):
    """split --target vllm|sglang at tp 1, 2, 4 into tmp/PREFIX{target}-{tp} (vllm_args added
    for vLLM): the engine's loader takes every rank exactly (want(T, r), less vLLM's scale
    buffers, the names holding scales, for SGLang), the tensor-parallel forward(ranks, T) from
    the rank files equals transformers' logits ref, and config.json is in the set."""
    import torch
    import vllm_emul
    for target in ("vllm", "sglang"):
        for T in (1, 2, 4):
            d = os.path.join(tmp, "%s%s-%d" % (prefix, target, T))
            args = vllm_args if target == "vllm" else ()
            p = tap.tpshard("split", src, "--tp", T, "--target", target, "-o", d, "-q", *args)
            if not tap.report(p.returncode == 0, "%s --target %s tp %d: split %s" % (name, target, T, " ".join(args)),
                              p.stderr):
                continue
            probs = []
            for r in range(T):
                w = want(T, r)
                if target == "sglang":
                    w = {k: v for k, v in w.items() if scales not in k}
                probs += ["rank %d: %s" % (r, x) for x in vllm_emul.load(d, r, w, torch.float32)]
            tap.report(not probs, "%s --target %s tp %d: the engine's loader takes every rank exactly"
                       % (name, target, T), "\n".join(probs[:5]))
            with torch.no_grad():
                got = forward(vllm_emul.rank_tensors(d, T), T)
            diff = (got - ref).abs().max().item()
            tap.report(diff <= 1e-4, "%s --target %s tp %d: tensor-parallel forward from the rank files = "
                       "transformers (max abs %.2g)" % (name, target, T, diff))
            tap.report(os.path.exists(os.path.join(d, "config.json")),
                       "%s --target %s tp %d: config.json in the set" % (name, target, T))


def main():
    rc = tap.transformers_tier("test_vllm_gpt2_neox")
    if rc is not None:
        return rc
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    import vllm_emul

    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, rotary_pct=0.5, rotary_emb_base=ROT_BASE, hidden_act="gelu",
                        max_position_embeddings=64, use_parallel_residual=True, tie_word_embeddings=False)
    model = GPTNeoXForCausalLM(cfg).eval()
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(torch.randn_like(prm) * 0.2)
    tmp = tempfile.mkdtemp(prefix="tps-neox-")
    src = os.path.join(tmp, "neox")
    model.save_pretrained(src, safe_serialization=True)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, cfg.vocab_size, (1, 9))
    with torch.no_grad():
        ref = model(ids).logits[0].float()

    engine_sets("neox", src, tmp, "", lambda T, r: expected(sd, cfg, T, r), "attention.attn._",
                lambda ranks, T: tp_forward(ranks, cfg, T, ids), ref, vllm_args=("--target-version", "0.31"))
    transformers_backend(src, tmp, sd, cfg)

    # A wrong set: tpshard's own target keeps HF's per-head interleaved rows.
    d = os.path.join(tmp, "own-2")
    tap.tpshard("split", src, "--tp", 2, "-o", d, "-q")
    probs = vllm_emul.load(d, 0, expected(sd, cfg, 2, 0), torch.float32)
    tap.report(bool(probs), "neox: tpshard's own set fails the engine's loader", "it loaded")
    wrong = os.path.join(tmp, "wrong-2")
    vllm_emul.write_wrong(wrong, 2, lambda r: _interleaved(sd, cfg, 2, r))
    probs = vllm_emul.load(wrong, 0, expected(sd, cfg, 2, 0), torch.float32)
    tap.report(any("query_key_value" in x for x in probs), "neox: interleaved qkv rows under the engine's names: "
               "the loader's values differ", "\n".join(probs))
    with torch.no_grad():
        bad = tp_forward(vllm_emul.rank_tensors(wrong, 2), cfg, 2, ids)
    tap.report((bad - ref).abs().max().item() > 1e-2, "neox: interleaved qkv rows: the forward differs from transformers")

    # reshard 2 -> 4 equals split at 4; merge is bit-exact; check passes.
    re4 = os.path.join(tmp, "re-4")
    p = tap.tpshard("reshard", os.path.join(tmp, "vllm-2"), "--tp", 4, "-o", re4, "-q")
    tap.report(p.returncode == 0 and not vllm_emul.same_sets(re4, os.path.join(tmp, "vllm-4"), 4),
               "neox: reshard of the vllm set 2 -> 4 equals split at 4", p.stderr)
    p = tap.tpshard("check", os.path.join(tmp, "vllm-2"))
    tap.report(p.returncode == 0, "neox: check passes on the vllm set", p.stdout + p.stderr)
    merged = os.path.join(tmp, "merged.safetensors")
    p = tap.tpshard("merge", os.path.join(tmp, "vllm-4"), "-o", merged, "-q")
    ok = p.returncode == 0
    if ok:
        from safetensors.torch import load_file
        m = load_file(merged)
        s = load_file(os.path.join(src, "model.safetensors"))
        ok = m.keys() == s.keys() and all(torch.equal(vllm_emul.raw(m[k]), vllm_emul.raw(s[k])) for k in s)
    tap.report(ok, "neox: merge of the vllm set gives the source's tensors bit-exact", p.stderr)
    p = tap.tpshard("verify", os.path.join(tmp, "vllm-2"), "--source", src, "--layer", "all")
    tap.report(p.returncode == 0, "neox: verify --layer all passes on the vllm set", p.stdout[-500:] + p.stderr)
    # The same set as the engine's saver leaves it (no tpshard.json): adopted, resharded, merged.
    saved = os.path.join(tmp, "saved-2")
    shutil.copytree(os.path.join(tmp, "vllm-2"), saved)
    os.remove(os.path.join(saved, "tpshard.json"))
    p = tap.tpshard("reshard", saved, "--tp", 4, "--target", "vllm", "-o", os.path.join(tmp, "saved-4"), "-q")
    tap.report(p.returncode == 0 and not vllm_emul.same_sets(os.path.join(tmp, "saved-4"), os.path.join(tmp, "vllm-4"), 4),
               "neox: a set without tpshard.json reshards 2 -> 4 as split at 4", p.stderr)
    p = tap.tpshard("merge", saved, "-o", os.path.join(tmp, "saved.safetensors"), "-q")
    ok = p.returncode == 0
    if ok:
        from safetensors.torch import load_file
        m = load_file(os.path.join(tmp, "saved.safetensors"))
        s = load_file(os.path.join(src, "model.safetensors"))
        ok = m.keys() == s.keys() and all(torch.equal(vllm_emul.raw(m[k]), vllm_emul.raw(s[k])) for k in s)
    tap.report(ok, "neox: a set without tpshard.json merges to the source bit-exact", p.stderr)
    gpt2_cases(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    return tap.status()


def gpt2_expected(sd, cfg, T, r):
    import torch
    nh, H = cfg.n_head, cfg.n_embd
    hd, n = H // nh, nh // T
    out = {}
    for k, v in sd.items():
        if k.endswith((".attn.bias", ".attn.masked_bias")) and "c_" not in k:
            continue
        if not k.startswith(("transformer.", "lm_head")):
            k = "transformer." + k
        if k == "lm_head.weight":
            continue  # tied: the embedding's parameter
        if k.endswith(".weight") and any(c in k for c in ("c_attn", "c_proj", "c_fc")):
            v = v.t()  # vLLM's load_weights: Conv1D [in, out] -> [out, in]
        if k == "transformer.wte.weight":
            V = v.shape[0]
            P = (V + 63) // 64 * 64
            w = torch.cat([v, v.new_zeros(P - V, v.shape[1])])
            out["lm_head.weight"] = w[r * P // T:(r + 1) * P // T]
        elif "c_attn" in k:  # QKVParallelLinear: each of q, k, v cut by heads
            out[k] = torch.cat([part[r * n * hd:(r + 1) * n * hd] for part in v.split(H, 0)])
        elif k.endswith("c_proj.weight"):  # RowParallelLinear
            c = v.shape[1] // T
            out[k] = v[:, r * c:(r + 1) * c]
        elif "c_fc" in k:  # ColumnParallelLinear
            c = v.shape[0] // T
            out[k] = v[r * c:(r + 1) * c]
        else:
            out[k] = v
    for i in range(cfg.n_layer):
        for s in ("_k_scale", "_v_scale", "_q_scale", "_prob_scale"):
            out["transformer.h.%d.attn.attn.%s" % (i, s)] = torch.tensor(1.0)
    return {k: v.contiguous() for k, v in out.items()}


def gpt2_forward(R, cfg, T, ids):
    import torch
    import torch.nn.functional as F
    nh, H, V = cfg.n_head, cfg.n_embd, cfg.vocab_size
    hd, n = H // nh, nh // T
    S = ids.shape[1]
    wte = torch.cat([R[r]["lm_head.weight"] for r in range(T)])[:V].float()
    x = wte[ids[0]] + R[0]["transformer.wpe.weight"][:S].float()
    mask = torch.full((S, S), float("-inf")).triu(1)
    eps = cfg.layer_norm_epsilon
    for i in range(cfg.n_layer):
        p = "transformer.h.%d." % i
        g = lambda r, k: R[r][p + k].float()  # noqa: E731
        h = F.layer_norm(x, (H,), g(0, "ln_1.weight"), g(0, "ln_1.bias"), eps)
        attn = 0
        for r in range(T):
            qkv = h @ g(r, "attn.c_attn.weight").T + g(r, "attn.c_attn.bias")
            q, k, v = (t.reshape(S, n, hd).transpose(0, 1) for t in qkv.split(n * hd, -1))
            a = torch.softmax(q @ k.transpose(-1, -2) / hd ** 0.5 + mask, -1) @ v
            attn = attn + a.transpose(0, 1).reshape(S, n * hd) @ g(r, "attn.c_proj.weight").T
        x = x + attn + g(0, "attn.c_proj.bias")
        h = F.layer_norm(x, (H,), g(0, "ln_2.weight"), g(0, "ln_2.bias"), eps)
        mlp = 0
        for r in range(T):
            f = F.gelu(h @ g(r, "mlp.c_fc.weight").T + g(r, "mlp.c_fc.bias"), approximate="tanh")
            mlp = mlp + f @ g(r, "mlp.c_proj.weight").T
        x = x + mlp + g(0, "mlp.c_proj.bias")
    x = F.layer_norm(x, (H,), R[0]["transformer.ln_f.weight"].float(), R[0]["transformer.ln_f.bias"].float(), eps)
    return x @ wte.T


def gpt2_cases(tmp):
    import json
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import GPT2Config, GPT2LMHeadModel
    import vllm_emul

    torch.manual_seed(1)
    cfg = GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=4, n_positions=64, n_inner=None,
                     activation_function="gelu_new", resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(torch.randn_like(prm) * 0.2)
    src = os.path.join(tmp, "gpt2")
    model.save_pretrained(src, safe_serialization=True)
    sd = load_file(os.path.join(src, "model.safetensors"))
    ids = torch.randint(0, cfg.vocab_size, (1, 9))
    with torch.no_grad():
        ref = model(ids).logits[0].float()
    engine_sets("gpt2", src, tmp, "g-", lambda T, r: gpt2_expected(sd, cfg, T, r), "attn.attn._",
                lambda ranks, T: gpt2_forward(ranks, cfg, T, ids), ref)

    d = os.path.join(tmp, "g-own-2")
    tap.tpshard("split", src, "--tp", 2, "-o", d, "-q")
    tap.report(bool(vllm_emul.load(d, 0, gpt2_expected(sd, cfg, 2, 0), torch.float32)),
               "gpt2: tpshard's own set (Conv1D [in, out]) fails the engine's loader", "it loaded")

    def one_block(r):  # c_attn's transposed rows cut as one block, not per q, k and v
        out = gpt2_expected(sd, cfg, 2, r)
        for k, v in sd.items():
            if k.endswith("c_attn.weight"):
                w = v.t()
                out[k] = w[r * w.shape[0] // 2:(r + 1) * w.shape[0] // 2].contiguous()
        return out
    wrong = os.path.join(tmp, "g-wrong-2")
    vllm_emul.write_wrong(wrong, 2, one_block)
    probs = vllm_emul.load(wrong, 0, gpt2_expected(sd, cfg, 2, 0), torch.float32)
    tap.report(any("c_attn" in x for x in probs), "gpt2: c_attn rows cut as one block: the loader's values differ",
               "\n".join(probs))
    with torch.no_grad():
        bad = gpt2_forward(vllm_emul.rank_tensors(wrong, 2), cfg, 2, ids)
    tap.report((bad - ref).abs().max().item() > 1e-2, "gpt2: c_attn rows cut as one block: the forward differs")

    re4 = os.path.join(tmp, "g-re-4")
    p = tap.tpshard("reshard", os.path.join(tmp, "g-vllm-2"), "--tp", 4, "-o", re4, "-q")
    tap.report(p.returncode == 0 and not vllm_emul.same_sets(re4, os.path.join(tmp, "g-vllm-4"), 4),
               "gpt2: reshard of the vllm set 2 -> 4 equals split at 4", p.stderr)
    p = tap.tpshard("check", os.path.join(tmp, "g-vllm-4"))
    tap.report(p.returncode == 0, "gpt2: check passes on the vllm set", p.stdout + p.stderr)
    merged = os.path.join(tmp, "g-merged.safetensors")
    p = tap.tpshard("merge", os.path.join(tmp, "g-vllm-4"), "-o", merged, "-q")
    ok = p.returncode == 0
    if ok:
        m = load_file(merged)
        ok = m.keys() == sd.keys() and all(torch.equal(vllm_emul.raw(m[k]), vllm_emul.raw(sd[k])) for k in sd)
    tap.report(ok, "gpt2: merge of the vllm set gives the source's tensors bit-exact", p.stderr)
    p = tap.tpshard("verify", os.path.join(tmp, "g-vllm-2"), "--source", src, "--layer", "all")
    tap.report(p.returncode == 0, "gpt2: verify --layer all passes on the vllm set", p.stdout[-500:] + p.stderr)

    # A set the engine saved (the emulated saver on the engine's per-rank state dicts: Conv1D
    # weights held [out, in]): adopted (the transpose undone before the shapes are matched),
    # resharded 2 -> 4 as split at 4, merged to the source bit-exact.
    saved = os.path.join(tmp, "g-saved-2")
    os.makedirs(saved)
    vllm_emul.save_sharded_state(saved, [gpt2_expected(sd, cfg, 2, r) for r in range(2)], 1 << 30)
    shutil.copy(os.path.join(src, "config.json"), saved)
    re4 = os.path.join(tmp, "g-saved-re-4")
    p = tap.tpshard("reshard", saved, "--tp", 4, "--target", "vllm", "-o", re4, "-q")
    tap.report(p.returncode == 0 and not vllm_emul.same_sets(re4, os.path.join(tmp, "g-vllm-4"), 4),
               "gpt2: an engine-saved set (no tpshard.json) reshards 2 -> 4 as split at 4", p.stderr)
    p = tap.tpshard("merge", saved, "-o", os.path.join(tmp, "g-saved-merged.safetensors"), "-q")
    ok = p.returncode == 0
    if ok:
        m = load_file(os.path.join(tmp, "g-saved-merged.safetensors"))
        ok = m.keys() == sd.keys() and all(torch.equal(vllm_emul.raw(m[k]), vllm_emul.raw(sd[k])) for k in sd)
    tap.report(ok, "gpt2: an engine-saved set merges to the source bit-exact", p.stderr)

    # A save without the transformer. prefix (GPT2Model's names): the same files.
    bare = os.path.join(tmp, "gpt2-bare")
    os.makedirs(bare)
    save_file({k[len("transformer."):] if k.startswith("transformer.") else k: v.contiguous() for k, v in sd.items()},
              os.path.join(bare, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f, open(os.path.join(bare, "config.json"), "w") as g:
        json.dump(json.load(f), g)
    d = os.path.join(tmp, "g-bare-2")
    p = tap.tpshard("split", bare, "--tp", 2, "--target", "vllm", "-o", d, "-q")
    why = vllm_emul.same_sets(d, os.path.join(tmp, "g-vllm-2"), 2) if p.returncode == 0 else p.stderr
    tap.report(not why, "gpt2 without the transformer. prefix: --target vllm gives the same files", why)


def transformers_backend(src, tmp, sd, cfg):
    """The current class (vLLM 0.32's Transformers backend): HF's rows, cut as HF keeps them,
    under model.* and lm_head; the set adopted without tpshard.json merges bit-exact."""
    import torch
    import vllm_emul
    rename = lambda k: "lm_head.weight" if k == "embed_out.weight" else k.replace("gpt_neox.", "model.", 1)
    for T in (1, 2, 4):
        d = os.path.join(tmp, "current-%d" % T)
        p = tap.tpshard("split", src, "--tp", T, "--target", "vllm", "-o", d, "-q")
        probs = ["rank %d: %s" % (r, x) for r in range(T)
                 for x in vllm_emul.load(d, r, {rename(k): v for k, v in _interleaved(sd, cfg, T, r).items()},
                                         torch.float32)] if p.returncode == 0 else [p.stderr]
        tap.report(not probs, "neox --target vllm tp %d (current: the Transformers backend's names, HF's rows): the "
                   "loader takes every rank exactly" % T, "\n".join(probs[:5]))
    saved = os.path.join(tmp, "current-saved-2")
    shutil.copytree(os.path.join(tmp, "current-2"), saved)
    os.remove(os.path.join(saved, "tpshard.json"))
    merged = os.path.join(tmp, "current-saved.safetensors")
    p = tap.tpshard("merge", saved, "-o", merged, "-q")
    ok = p.returncode == 0
    if ok:
        from safetensors.torch import load_file
        m, s = load_file(merged), load_file(os.path.join(src, "model.safetensors"))
        ok = m.keys() == s.keys() and all(torch.equal(vllm_emul.raw(m[k]), vllm_emul.raw(s[k])) for k in s)
    tap.report(ok, "neox: a current-class set without tpshard.json merges to the source bit-exact", p.stderr)


def _interleaved(sd, cfg, T, r):
    """The expected rank tensors with query_key_value cut in HF's order (heads' [q_h; k_h; v_h])."""
    out = expected(sd, cfg, T, r)
    for k, v in sd.items():
        if "query_key_value" in k:
            c = v.shape[0] // T
            out[k] = v[r * c:(r + 1) * c].contiguous()
    return out


if __name__ == "__main__":
    sys.exit(main())
