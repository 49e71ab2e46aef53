"""Truth from outside for GPT-OSS: transformers' GptOssForCausalLM (torch-2 tier; 4.46 has no
GPT-OSS), attn_implementation="eager".

A tiny GptOssConfig model (random weights including norms, every bias, the attention sinks
and the router bias; 8 heads and 2 KV heads of head_dim 16 where hidden / heads is 8; 4
experts top-2 fused in gate_up_proj / down_proj; sliding and full layers with a window of 4;
RoPE yarn with truncate false over original_max_position_embeddings 4096, where truncating
would move the logits by 4.5e-3) is saved with save_pretrained and split by auto-detection
at tp 1, 2, 4, 8.  An independent tensor-parallel forward in torch, fed only each rank's shard
file, must equal transformers' logits within 1e-4 (float32); so must the logits of tpshard's
own float64 reference and of its tensor-parallel pass (verify --whole-model --dump-logits),
and `tpshard verify --layer all` and `--whole-model` must pass.  Wrong cuts whose bytes are
intact (`tpshard check` passes) must fail both verify modes and the torch forward:
gate_up_proj cut as if gate and up were concatenated halves, the sinks cut in two halves
(the right shape, other heads' sinks), the sinks replicated (a loader sized as vLLM's, one
sink per local head, cannot take them).
"""
import json
import math
import os
import sys
import tempfile
import time

import torch

import tap
from tap import report, tpshard
from test_hf_llama_family import hf_logits, load_ranks, rms, rotary, rotate_half

TPS = (1, 2, 4, 8)
TOL = 1e-4
CFG = dict(vocab_size=100, hidden_size=64, intermediate_size=32, num_hidden_layers=2, num_attention_heads=8,
           num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
           max_position_embeddings=16384, rms_norm_eps=1e-5, rope_theta=150000.0,
           rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096},
           layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=False)


def build(cfg, seed, path):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("sinks"):  # trained sinks are logits of order 1
                p.copy_(torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:  # [out, in] Linear or [experts, in, out]: scaled by the input width
                p.normal_(0, 1 / math.sqrt(p.shape[-1] if p.dim() == 2 else p.shape[-2]))
    model.save_pretrained(path, safe_serialization=True)
    return model


def tp_forward(ranks, cfg, ids, cos, sin):
    """The whole model from the ranks' slices alone, as vLLM runs it: a rank's q/k/v and
    sinks hold its heads (local query head j reads local KV head j * kv_local // q_local);
    its gate_up_proj columns are (gate, up) pairs of its intermediate columns and down_proj
    holds their rows; the router is replicated and the expert down biases, weighted by the
    routing, are added once after the sum."""
    n, H, hd, eps = ids.shape[0], cfg.hidden_size, cfg.head_dim, cfg.rms_norm_eps
    rows = ranks[0]["model.embed_tokens.weight"].shape[0]
    x = torch.zeros(n, H)
    for r, R in enumerate(ranks):  # vocabulary-parallel lookup: each rank its rows, summed
        local = ids - r * rows
        hit = (local >= 0) & (local < rows)
        x[hit] += R["model.embed_tokens.weight"][local[hit]]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    for layer in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % layer
        allowed = j <= i
        if cfg.layer_types[layer] == "sliding_attention":
            allowed &= j > i - cfg.sliding_window
        mask = torch.zeros(n, n).masked_fill(~allowed, float("-inf"))
        attn = torch.zeros(n, H)
        for R in ranks:
            xn = rms(x, R[p + "input_layernorm.weight"], eps)
            proj = {s: xn @ R[p + "self_attn.%s_proj.weight" % s].T + R[p + "self_attn.%s_proj.bias" % s] for s in "qkv"}
            q, k, v = (proj[s].view(n, -1, hd).transpose(0, 1) for s in "qkv")
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            sinks = R[p + "self_attn.sinks"]
            if sinks.shape != (q.shape[0],):
                raise ValueError("%s holds %d sinks for %d local heads" % (p + "self_attn.sinks", sinks.shape[0],
                                                                           q.shape[0]))
            kv_of = [h * k.shape[0] // q.shape[0] for h in range(q.shape[0])]
            k, v = k[kv_of], v[kv_of]
            s = q @ k.transpose(1, 2) / math.sqrt(hd) + mask
            s = torch.cat([s, sinks[:, None, None].expand(-1, n, 1)], dim=-1)
            w = torch.softmax(s, dim=-1)[..., :-1]  # the sink's share dropped
            attn += (w @ v).transpose(0, 1).reshape(n, -1) @ R[p + "self_attn.o_proj.weight"].T
        x = x + attn + ranks[0][p + "self_attn.o_proj.bias"]
        R0 = ranks[0]
        hn = rms(x, R0[p + "post_attention_layernorm.weight"], eps)
        logits = hn @ R0[p + "mlp.router.weight"].T + R0[p + "mlp.router.bias"]
        top, idx = torch.topk(logits, cfg.num_experts_per_tok, dim=-1)
        wt = torch.zeros_like(logits).scatter_(1, idx, torch.softmax(top, dim=-1))  # [n, experts]
        mlp = wt @ R0[p + "mlp.experts.down_proj_bias"]  # once, after the sum
        for R in ranks:
            hn = rms(x, R[p + "post_attention_layernorm.weight"], eps)
            for e in range(cfg.num_local_experts):
                gu = hn @ R[p + "mlp.experts.gate_up_proj"][e] + R[p + "mlp.experts.gate_up_proj_bias"][e]
                gate, up = gu[:, 0::2].clamp(max=7.0), gu[:, 1::2].clamp(-7.0, 7.0)
                a = (up + 1) * gate * torch.sigmoid(1.702 * gate)
                mlp += wt[:, e:e + 1] * (a @ R[p + "mlp.experts.down_proj"][e])
        x = x + mlp
    x = rms(x, ranks[0]["model.norm.weight"], eps)
    logits = torch.cat([x @ R["lm_head.weight"].T for R in ranks], dim=1)  # gathered over ranks
    return logits[:, :cfg.vocab_size]  # the padding rows dropped


def tp_diff(out, cfg, ids, cos, sin, want):
    """Max abs difference of the torch forward from out's shards, or the reason it cannot run."""
    try:
        return float((tp_forward(load_ranks(out), cfg, ids, cos, sin) - want).abs().max()), ""
    except ValueError as e:
        return float("inf"), str(e)


def main():
    early = tap.transformers_tier("torch2_gpt_oss")
    if early is not None:
        return early
    import transformers
    try:
        from transformers import GptOssConfig
    except ImportError:
        print("skip - torch2_gpt_oss: transformers %s has no GptOssConfig (the torch-2 tier installs 4.57)"
              % transformers.__version__)
        return 0
    torch.set_num_threads(2)
    t0 = time.time()
    ids = torch.tensor([3, 97, 41, 0, 99, 12, 64, 88, 5, 70, 23, 50, 96, 1, 33, 77])
    cfg = GptOssConfig(**CFG)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        model = build(cfg, 0, src)
        want = hf_logits(model, ids)
        cos, sin = rotary(model, len(ids))  # GPT-OSS's: one per rotary pair, [n, hd / 2]
        cos, sin = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
        detail, worst, done = [], 0.0, []
        for t in TPS:
            out = os.path.join(tmp, "tp%d" % t)
            r = tpshard("split", src, "--tp", t, "-o", out)
            if r.returncode != 0 or "preset gpt_oss" not in r.stderr:
                report(False, "split --tp %d chooses preset gpt_oss from config.json" % t, r.stderr)
                continue
            diff, why = tp_diff(out, cfg, ids, cos, sin, want)
            worst = max(worst, diff)
            detail.append("tp %d: max abs logit difference %.3g %s" % (t, diff, why))
            for mode in (("--layer", "all"), ("--whole-model",)):
                v = tpshard("verify", out, "--source", src, *mode, "-q")
                if v.returncode != 0:
                    report(False, "tpshard verify %s at tp %d exits 0" % (" ".join(mode), t),
                           "exit %d\n%s%s" % (v.returncode, v.stdout, v.stderr))
            # verify's own math (sinks, swiglu_oai, router bias, yarn truncate, window) against
            # transformers: its float64 reference and its TP pass on verify's tokens.
            dump = os.path.join(tmp, "logits%d.json" % t)
            v = tpshard("verify", out, "--source", src, "--whole-model", "--tokens", 12, "--seed", t,
                        "--dump-logits", dump, "-q")
            if report(v.returncode == 0, "verify --whole-model --dump-logits at tp %d exits 0" % t, v.stdout + v.stderr):
                d = json.load(open(dump))
                with torch.no_grad():
                    hf = model(input_ids=torch.tensor(d["tokens"])[None]).logits[0].double()
                dr = float((torch.tensor(d["reference"], dtype=torch.float64) - hf).abs().max())
                dg = float((torch.tensor(d["ranks"], dtype=torch.float64) - hf).abs().max())
                report(dr <= TOL and dg <= TOL,
                       "tp %d: tpshard's float64 reference and tensor-parallel logits equal transformers' (max abs "
                       "difference %.2g and %.2g <= %g)" % (t, dr, dg, TOL))
            done.append(t)
        report(done == list(TPS) and worst <= TOL,
               "the torch TP forward from the shard files equals transformers' logits at tp %s, and verify --layer "
               "all and --whole-model pass (max abs difference %.2g <= %g)" % (",".join(map(str, done)), worst, TOL),
               "\n".join(detail))

        # config.json's layer_types decide which layers slide, not the preset's alternation:
        # a model whose first layer is the full one.
        swapped = GptOssConfig(**dict(CFG, layer_types=["full_attention", "sliding_attention"]))
        src2 = os.path.join(tmp, "swapped", "src")
        model2 = build(swapped, 1, src2)
        out2 = os.path.join(tmp, "swapped", "tp2")
        dump = os.path.join(tmp, "swapped.json")
        r = tpshard("split", src2, "--tp", 2, "-o", out2, "-q")
        v = tpshard("verify", out2, "--whole-model", "--tokens", 12, "--dump-logits", dump, "-q") \
            if r.returncode == 0 else r
        if report(v.returncode == 0, "layer_types [full, sliding]: split and verify --whole-model exit 0",
                  v.stdout + v.stderr):
            d = json.load(open(dump))
            with torch.no_grad():
                hf = model2(input_ids=torch.tensor(d["tokens"])[None]).logits[0].double()
            dr = float((torch.tensor(d["reference"], dtype=torch.float64) - hf).abs().max())
            report(dr <= TOL, "layer_types [full, sliding]: verify's float64 logits follow config.json's layer types "
                   "(max abs difference from transformers %.2g <= %g)" % (dr, TOL))

        text = tpshard("layout", "--preset", "gpt_oss").stdout
        gate_up = ('  - match: "model.layers.*.mlp.experts.{gate_up_proj,gate_up_proj_bias}"\n    split: dim\n'
                   '    dim: -1\n    unit: 2\n    size: 2*intermediate\n')
        sinks = '  - match: model.layers.*.self_attn.sinks\n    split: column\n    size: heads\n'
        wrong = [
            ("gate_up_proj cut as concatenated [gate | up] halves", gate_up,
             '  - match: "model.layers.*.mlp.experts.{gate_up_proj,gate_up_proj_bias}"\n    split: dim\n'
             '    dim: -1\n    segments:\n      - {name: gate, size: intermediate}\n'
             '      - {name: up, size: intermediate}\n'),
            ("sinks cut in two halves, not with the heads", sinks,
             '  - match: model.layers.*.self_attn.sinks\n    split: column\n    segments:\n'
             '      - {name: a, size: heads/2}\n      - {name: b, size: heads/2}\n'),
            ("sinks replicated, not cut with the heads", sinks,
             '  - match: model.layers.*.self_attn.sinks\n    split: replicate\n'),
        ]
        for what, rule, bad in wrong:
            if not report(rule in text, "the gpt_oss preset's rule is where this test replaces it (%s)" % what, text):
                continue
            lay = os.path.join(tmp, "wrong.yaml")
            open(lay, "w").write(text.replace(rule, bad))
            out = os.path.join(tmp, "wrong-%d" % len(what))
            r = tpshard("split", src, "--tp", 2, "--layout", lay, "-o", out, "-q")
            c = tpshard("check", out, "-q")
            diff, why = tp_diff(out, cfg, ids, cos, sin, want) if r.returncode == 0 else (0.0, "")
            v1 = tpshard("verify", out, "--source", src, "--layer", "all", "-q")
            v2 = tpshard("verify", out, "--source", src, "--whole-model", "-q")
            report(r.returncode == 0 and c.returncode == 0 and diff > 100 * TOL and v1.returncode == 1 and
                   v2.returncode == 1,
                   "wrong cut (%s) at tp 2: check passes, the torch forward %s, verify --layer all exits %d, "
                   "--whole-model exits %d" % (what, "cannot load it (%s)" % why if why else "differs by %.2g" % diff,
                                               v1.returncode, v2.returncode),
                   r.stderr + c.stderr + v1.stdout + v1.stderr + v2.stderr)
    print("# transformers %s, torch %s: %.1f s" % (transformers.__version__, torch.__version__, time.time() - t0))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
