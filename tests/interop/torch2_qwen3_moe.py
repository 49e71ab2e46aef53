"""Truth from outside for Qwen3-MoE: transformers' Qwen3MoeForCausalLM (torch-2 tier; 4.46
has no Qwen3).

As tests/interop/test_hf_qwen2_moe.py, whose torch tensor-parallel forward it reuses: tiny
Qwen3MoeConfig models (random weights including norms and the per-head q_norm/k_norm,
head_dim 16 where hidden / heads is 8, 4 experts top-2, norm_topk_prob both ways, a dense
layer by mlp_only_layers), saved with save_pretrained, split by auto-detection at tp 1, 2,
4, 8; the forward from the shard files must equal transformers' logits within 1e-4 and
`tpshard verify --layer all` and `--whole-model` must pass.  A wrong cut (the experts'
gate_proj columns not paired with up_proj's) passes `tpshard check` and fails both.
"""
import os
import sys
import tempfile
import time

import torch

import tap
from tap import report, tpshard
from test_hf_llama_family import load_ranks, rotary
from test_hf_qwen2_moe import build, hf_logits, tp_forward

TPS = (1, 2, 4, 8)
TOL = 1e-4
BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
            num_attention_heads=8, num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
            max_position_embeddings=64, rms_norm_eps=1e-6)


def main():
    early = tap.transformers_tier("torch2_qwen3_moe")
    if early is not None:
        return early
    import transformers
    try:
        from transformers import Qwen3MoeConfig
    except ImportError:
        print("skip - torch2_qwen3_moe: transformers %s has no Qwen3MoeConfig (the torch-2 tier installs 4.57)"
              % transformers.__version__)
        return 0
    torch.set_num_threads(2)
    t0 = time.time()
    ids = torch.tensor([3, 97, 41, 0, 99, 12, 64, 88, 5, 70, 23, 50, 96, 1, 33, 77])
    cases = [("qwen3-moe-norm", Qwen3MoeConfig(**dict(BASE, norm_topk_prob=True, mlp_only_layers=[1]))),
             ("qwen3-moe-plain", Qwen3MoeConfig(**dict(BASE, norm_topk_prob=False, tie_word_embeddings=True)))]
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, cfg) in enumerate(cases):
            src = os.path.join(tmp, name, "src")
            model = build(cfg, seed, src)
            want = hf_logits(model, ids)
            cos, sin = rotary(model, len(ids))
            detail, worst, done = [], 0.0, []
            for t in TPS:
                out = os.path.join(tmp, name, "tp%d" % t)
                r = tpshard("split", src, "--tp", t, "-o", out)
                if r.returncode != 0 or "qwen3_moe" not in r.stderr:
                    report(False, "%s: split --tp %d chooses preset qwen3_moe from config.json" % (name, t), r.stderr)
                    continue
                diff = float((tp_forward(load_ranks(out), cfg, ids, cos, sin) - want).abs().max())
                worst = max(worst, diff)
                detail.append("tp %d: max abs logit difference %.3g" % (t, diff))
                for mode in (("--layer", "all"), ("--whole-model",)):
                    v = tpshard("verify", out, "--source", src, *mode, "-q")
                    if v.returncode != 0:
                        report(False, "%s: tpshard verify %s at tp %d exits 0" % (name, " ".join(mode), t),
                               "exit %d\n%s%s" % (v.returncode, v.stdout, v.stderr))
                done.append(t)
            report(done == list(TPS) and worst <= TOL,
                   "%s: the torch TP forward from the shard files equals transformers' logits at tp %s, and verify "
                   "--layer all and --whole-model pass (max abs difference %.2g <= %g)"
                   % (name, ",".join(map(str, done)), worst, TOL), "\n".join(detail))

        name, cfg = cases[0]
        src = os.path.join(tmp, name, "src")
        model = build(cfg, 0, src)
        want = hf_logits(model, ids)
        cos, sin = rotary(model, len(ids))
        text = tpshard("layout", "--preset", "qwen3_moe").stdout
        rule = ('  - match: "model.layers.*.mlp.experts.*.{gate_proj,up_proj}.weight"\n    split: column\n'
                '    size: moe_intermediate\n')
        halves = ('  - match: "model.layers.*.mlp.experts.*.gate_proj.weight"\n    split: column\n    segments:\n'
                  '      - {name: a, size: moe_intermediate/2}\n      - {name: b, size: moe_intermediate/2}\n'
                  '  - match: "model.layers.*.mlp.experts.*.up_proj.weight"\n    split: column\n'
                  '    size: moe_intermediate\n')
        if report(rule in text, "the qwen3_moe preset's expert gate/up rule is where this test replaces it", text):
            lay = os.path.join(tmp, "wrong.yaml")
            open(lay, "w").write(text.replace(rule, halves))
            out = os.path.join(tmp, "wrong")
            r = tpshard("split", src, "--tp", 2, "--layout", lay, "-o", out, "-q")
            c = tpshard("check", out, "-q")
            diff = float((tp_forward(load_ranks(out), cfg, ids, cos, sin) - want).abs().max()) if r.returncode == 0 else 0
            v1 = tpshard("verify", out, "--source", src, "--layer", "all", "-q")
            v2 = tpshard("verify", out, "--source", src, "--whole-model", "-q")
            report(r.returncode == 0 and c.returncode == 0 and diff > 100 * TOL and v1.returncode == 1 and
                   v2.returncode == 1,
                   "wrong cut (experts' gate_proj columns not paired with up_proj's) at tp 2: check passes, the torch "
                   "forward differs by %.2g, verify --layer all exits %d, --whole-model exits %d"
                   % (diff, v1.returncode, v2.returncode), r.stderr + c.stderr + v1.stdout + v1.stderr + v2.stderr)
    print("# transformers %s, torch %s: %.1f s" % (transformers.__version__, torch.__version__, time.time() - t0))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
