"""Truth from outside for Qwen2-MoE: Hugging Face transformers' Qwen2MoeForCausalLM.

Each case builds a tiny model from transformers' Qwen2MoeConfig (random weights under
torch.manual_seed, norms and q/k/v biases included, nothing downloaded): 4 routed experts,
top-2, a gated shared expert, dense layers by mlp_only_layers or decoder_sparse_step, with
norm_topk_prob both ways.  It saves it with save_pretrained (safetensors), splits it with
auto-detection (config.json's Qwen2MoeForCausalLM) at every legal tp of 1, 2, 4, 8, and:

  * runs the whole model the tensor-parallel way in torch, fed only each rank's shard file:
    vocabulary-parallel embedding, Qwen2 attention by heads, and in a MoE layer each rank
    routing with its own replicated router (softmax in float, top-k, renormalized only under
    norm_topk_prob), running every chosen expert and the shared expert on the intermediate
    columns it holds, the shared expert scaled by sigmoid(x . shared_expert_gate), all
    summed over ranks (the all-reduce); the logits must equal transformers' within 1e-4
    (float32, eager attention);
  * requires `tpshard verify SET --source SRC --layer all` and `--whole-model` to exit 0.

A refused tp names the expert intermediate size and the tp values that fit.  The test can
fail: two wrong layouts (the shared expert's gate_proj columns not paired with its
up_proj's; the routed experts' gate_proj likewise) give sets whose bytes are intact (`tpshard
check` passes) but whose torch forward differs from transformers' and which `tpshard verify`
refuses with exit 1.
"""
import math
import os
import sys
import tempfile
import time
import warnings

import torch

warnings.filterwarnings("ignore", message="nn.functional.sigmoid is deprecated")

import tap
from tap import report, tpshard
from test_hf_llama_family import linear, load_ranks, rms, rotary, rotate_half

TPS = (1, 2, 4, 8)
TOL = 1e-4

BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            shared_expert_intermediate_size=48, num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2,
            num_experts=4, num_experts_per_tok=2, max_position_embeddings=64, rms_norm_eps=1e-6)


def cases():
    from transformers import Qwen2MoeConfig
    Q = lambda **kw: Qwen2MoeConfig(**dict(BASE, **kw))
    return [
        ("qwen2-moe-norm", Q(norm_topk_prob=True, mlp_only_layers=[1])),
        ("qwen2-moe-sparse-step", Q(norm_topk_prob=False, decoder_sparse_step=2)),  # layers 0, 2 dense
        ("qwen2-moe-tied", Q(norm_topk_prob=False, tie_word_embeddings=True, mlp_only_layers=[0])),
    ]


def is_moe(cfg, layer):
    return layer not in cfg.mlp_only_layers and (layer + 1) % cfg.decoder_sparse_step == 0


def build(cfg, seed, path):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif pname.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 1 / math.sqrt(p.shape[1]))
    model.save_pretrained(path, safe_serialization=True)
    return model


def legal_tps(cfg):
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    widths = (cfg.intermediate_size, cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size)
    return [t for t in TPS if heads % t == 0 and all(w % t == 0 for w in widths) and (kv % t == 0 or t % kv == 0)]


def swiglu(x, R, pre):
    a = torch.nn.functional.silu(x @ R[pre + "gate_proj.weight"].T) * (x @ R[pre + "up_proj.weight"].T)
    return a @ R[pre + "down_proj.weight"].T


def route(cfg, x, router):
    """(weights [n, E], zero where not chosen) by the rank's own replicated router."""
    probs = torch.softmax(x @ router.T, dim=-1, dtype=torch.float)
    w, idx = torch.topk(probs, cfg.num_experts_per_tok, dim=-1)
    if cfg.norm_topk_prob:
        w = w / w.sum(dim=-1, keepdim=True)
    return torch.zeros_like(probs).scatter(1, idx, w)


def tp_forward(ranks, cfg, ids, cos, sin):
    n, H = ids.shape[0], cfg.hidden_size
    hd = getattr(cfg, "head_dim", None) or H // cfg.num_attention_heads
    eps = cfg.rms_norm_eps
    rows = ranks[0]["model.embed_tokens.weight"].shape[0]
    x = torch.zeros(n, H)
    for r, R in enumerate(ranks):
        local = ids - r * rows
        hit = (local >= 0) & (local < rows)
        x[hit] += R["model.embed_tokens.weight"][local[hit]]
    causal = torch.full((n, n), float("-inf")).triu(1)
    for layer in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % layer
        attn = torch.zeros(n, H)
        for R in ranks:
            xn = rms(x, R[p + "input_layernorm.weight"], eps)
            q = linear(xn, R, p + "self_attn.q_proj").view(n, -1, hd).transpose(0, 1)
            k = linear(xn, R, p + "self_attn.k_proj").view(n, -1, hd).transpose(0, 1)
            v = linear(xn, R, p + "self_attn.v_proj").view(n, -1, hd).transpose(0, 1)
            if p + "self_attn.q_norm.weight" in R:  # Qwen3: each head's RMSNorm before RoPE
                q, k = rms(q, R[p + "self_attn.q_norm.weight"], eps), rms(k, R[p + "self_attn.k_norm.weight"], eps)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            kv_of = [j * k.shape[0] // q.shape[0] for j in range(q.shape[0])]
            k, v = k[kv_of], v[kv_of]
            w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + causal, dim=-1)
            attn += (w @ v).transpose(0, 1).reshape(n, -1) @ R[p + "self_attn.o_proj.weight"].T
        x = x + attn
        mlp = torch.zeros(n, H)
        for R in ranks:
            hn = rms(x, R[p + "post_attention_layernorm.weight"], eps)
            if not is_moe(cfg, layer):
                mlp += swiglu(hn, R, p + "mlp.")
                continue
            wts = route(cfg, hn, R[p + "mlp.gate.weight"])
            for e in range(cfg.num_experts):
                sel = wts[:, e] > 0
                if sel.any():
                    mlp[sel] += wts[sel, e, None] * swiglu(hn[sel], R, p + "mlp.experts.%d." % e)
            if p + "mlp.shared_expert_gate.weight" in R:  # Qwen3-MoE has no shared expert
                gate = torch.sigmoid(hn @ R[p + "mlp.shared_expert_gate.weight"].T)
                mlp += gate * swiglu(hn, R, p + "mlp.shared_expert.")
        x = x + mlp
    x = rms(x, ranks[0]["model.norm.weight"], eps)
    head = "lm_head.weight" if "lm_head.weight" in ranks[0] else "model.embed_tokens.weight"
    return torch.cat([x @ R[head].T for R in ranks], dim=1)[:, :cfg.vocab_size]


def hf_logits(model, ids):
    with torch.no_grad():
        return model(ids[None]).logits[0]


def wrong_layouts():
    text = tpshard("layout", "--preset", "qwen2_moe").stdout
    shared = ('  - match: "model.layers.*.mlp.{shared_expert.gate_proj,shared_expert.up_proj,gate_proj,up_proj}.weight"\n'
              '    split: column\n')
    experts = ('  - match: "model.layers.*.mlp.experts.*.{gate_proj,up_proj}.weight"\n    split: column\n'
               '    size: moe_intermediate\n')
    if shared not in text or experts not in text:
        report(False, "the qwen2_moe preset's gate/up rules are where this test replaces them", text)
        return []

    def halves(glob, size):  # gate_proj's columns as two halves (rank r: quarters r, r + 2), up_proj's whole
        return ('  - match: "%s.gate_proj.weight"\n    split: column\n    segments:\n'
                '      - {name: a, size: %s/2}\n      - {name: b, size: %s/2}\n'
                '  - match: "%s.up_proj.weight"\n    split: column\n    size: %s\n' % (glob, size, size, glob, size))
    dense = '  - match: "model.layers.*.mlp.{gate_proj,up_proj}.weight"\n    split: column\n'
    return [("shared-gate-up", text.replace(shared, dense + halves("model.layers.*.mlp.shared_expert", "shared_intermediate")),
             "the shared expert's gate_proj columns not paired with its up_proj's"),
            ("experts-gate-up", text.replace(experts, halves("model.layers.*.mlp.experts.*", "moe_intermediate")),
             "the routed experts' gate_proj columns not paired with their up_proj's")]


def main():
    early = tap.transformers_tier("hf_qwen2_moe")
    if early is not None:
        return early
    import transformers
    torch.set_num_threads(2)
    t0 = time.time()
    ids = torch.tensor([3, 97, 41, 0, 99, 12, 64, 88, 5, 70, 23, 50, 96, 1, 33, 77])
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, cfg) in enumerate(cases()):
            src = os.path.join(tmp, name, "src")
            model = build(cfg, seed, src)
            want = hf_logits(model, ids)
            cos, sin = rotary(model, len(ids))
            detail, worst, done = [], 0.0, []
            for t in legal_tps(cfg):
                out = os.path.join(tmp, name, "tp%d" % t)
                r = tpshard("split", src, "--tp", t, "-o", out)
                if r.returncode != 0 or "qwen2_moe" not in r.stderr:
                    report(False, "%s: split --tp %d chooses preset qwen2_moe from config.json" % (name, t), r.stderr)
                    continue
                got = tp_forward(load_ranks(out), cfg, ids, cos, sin)
                diff = float((got - want).abs().max())
                worst = max(worst, diff)
                detail.append("tp %d: max abs logit difference %.3g" % (t, diff))
                for mode in (("--layer", "all"), ("--whole-model",)):
                    v = tpshard("verify", out, "--source", src, *mode, "-q")
                    if v.returncode != 0:
                        report(False, "%s: tpshard verify %s at tp %d exits 0" % (name, " ".join(mode), t),
                               "exit %d\n%s%s" % (v.returncode, v.stdout, v.stderr))
                done.append(t)
            report(done == legal_tps(cfg) == list(TPS) and worst <= TOL,
                   "%s: the torch TP forward from the shard files equals transformers' logits at tp %s, and verify "
                   "--layer all and --whole-model pass (max abs difference %.2g <= %g)"
                   % (name, ",".join(map(str, done)), worst, TOL), "\n".join(detail))

        # A tp that does not divide the experts' width: refused in the model's words.
        from transformers import Qwen2MoeConfig
        cfg = Qwen2MoeConfig(**dict(BASE, moe_intermediate_size=36))
        src = os.path.join(tmp, "refuse", "src")
        build(cfg, 7, src)
        r = tpshard("split", src, "--tp", 8, "-o", os.path.join(tmp, "refuse", "out"))
        report(r.returncode != 0 and "expert intermediate size 36" in r.stderr and "1, 2, 4" in r.stderr,
               "tp 8 with moe_intermediate_size 36 is refused naming the expert intermediate size and tp 1, 2, 4 "
               "(exit %d)" % r.returncode, r.stderr)

        # Wrong cuts: caught by the forward and by verify, not by the byte checks.
        cfg = Qwen2MoeConfig(**dict(BASE, norm_topk_prob=True, mlp_only_layers=[2]))
        src = os.path.join(tmp, "wrong", "src")
        model = build(cfg, 99, src)
        want = hf_logits(model, ids)
        cos, sin = rotary(model, len(ids))
        for wname, text, what in wrong_layouts():
            lay = os.path.join(tmp, "wrong", wname + ".yaml")
            open(lay, "w").write(text)
            out = os.path.join(tmp, "wrong", wname)
            r = tpshard("split", src, "--tp", 2, "--layout", lay, "-o", out, "-q")
            if r.returncode != 0:
                report(False, "wrong cut %s: split" % wname, r.stderr)
                continue
            c = tpshard("check", out, "-q")
            diff = float((tp_forward(load_ranks(out), cfg, ids, cos, sin) - want).abs().max())
            v_layers = tpshard("verify", out, "--source", src, "--layer", "all", "-q")
            v_whole = tpshard("verify", out, "--source", src, "--whole-model", "-q")
            report(c.returncode == 0 and diff > 100 * TOL and v_layers.returncode == 1 and v_whole.returncode == 1,
                   "wrong cut (%s) at tp 2: check passes, the torch forward differs from transformers' by %.2g, "
                   "verify --layer all exits %d, --whole-model exits %d"
                   % (what, diff, v_layers.returncode, v_whole.returncode),
                   "check exit %d %s\nverify --layer all: %s%s\nverify --whole-model: %s%s"
                   % (c.returncode, c.stderr, v_layers.stdout, v_layers.stderr, v_whole.stdout, v_whole.stderr))
    print("# transformers %s, torch %s: %.1f s" % (transformers.__version__, torch.__version__, time.time() - t0))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
