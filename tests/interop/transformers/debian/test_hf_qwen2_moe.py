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
import os
import sys
import warnings

import torch

warnings.filterwarnings("ignore", message="nn.functional.sigmoid is deprecated")

import hf_tier as hf  # noqa: E402
from hf_tier import IDS, TPS, report, rotary, tpshard  # noqa: E402
from test_hf_llama_family import tp_forward as llama_forward  # noqa: E402

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


def moe_mlp(mlp, R, cfg, hn, layer, p):
    """Adds a rank's MLP partial sum: a dense layer's SwiGLU, or in a MoE layer each chosen
    expert's on the rank's columns, weighted, and the shared expert scaled by its gate."""
    if not is_moe(cfg, layer):
        mlp += swiglu(hn, R, p + "mlp.")
        return
    wts = route(cfg, hn, R[p + "mlp.gate.weight"])
    for e in range(cfg.num_experts):
        sel = wts[:, e] > 0
        if sel.any():
            mlp[sel] += wts[sel, e, None] * swiglu(hn[sel], R, p + "mlp.experts.%d." % e)
    if p + "mlp.shared_expert_gate.weight" in R:  # Qwen3-MoE has no shared expert
        gate = torch.sigmoid(hn @ R[p + "mlp.shared_expert_gate.weight"].T)
        mlp += gate * swiglu(hn, R, p + "mlp.shared_expert.")


def tp_forward(ranks, cfg, ids, cos, sin):
    """The whole model from the ranks' slices alone: Llama's (Qwen3-MoE's attention with its
    q/k norms), each rank's MLP by moe_mlp."""
    return llama_forward(ranks, cfg, ids, cos, sin, rank_mlp=moe_mlp)


# What the MoE tests claim for each case: every tp of TPS goes through.
CLAIM = ("the torch TP forward from the shard files equals transformers' logits at tp {tps}, and verify "
         "--layer all and --whole-model pass (max abs difference {worst} <= {tol})")


def run_cases(tmp, cases, preset):
    """Every case split by auto-detection at every tp of TPS against transformers' logits."""
    for seed, (name, cfg) in enumerate(cases):
        src = os.path.join(tmp, name, "src")
        model = hf.build(cfg, seed, src)
        cos, sin = rotary(model, len(IDS))
        hf.split_and_compare(tmp, name, src, hf.logits(model, IDS), lambda R: tp_forward(R, cfg, IDS, cos, sin), TPS,
                             detect=preset, claim=CLAIM)


def body(tmp):
    run_cases(tmp, cases(), "qwen2_moe")

    # A tp that does not divide the experts' width: refused in the model's words.
    from transformers import Qwen2MoeConfig
    cfg = Qwen2MoeConfig(**dict(BASE, moe_intermediate_size=36))
    src = os.path.join(tmp, "refuse", "src")
    hf.build(cfg, 7, src)
    r = tpshard("split", src, "--tp", 8, "-o", os.path.join(tmp, "refuse", "out"))
    report(r.returncode != 0 and "expert intermediate size 36" in r.stderr and "1, 2, 4" in r.stderr,
           "tp 8 with moe_intermediate_size 36 is refused naming the expert intermediate size and tp 1, 2, 4 "
           "(exit %d)" % r.returncode, r.stderr)

    # Wrong cuts: caught by the forward and by verify, not by the byte checks.
    shared = ('  - match: "model.layers.*.mlp.{shared_expert.gate_proj,shared_expert.up_proj,gate_proj,up_proj}'
              '.weight"\n    split: column\n')
    experts = ('  - match: "model.layers.*.mlp.experts.*.{gate_proj,up_proj}.weight"\n    split: column\n'
               '    size: moe_intermediate\n')
    dense = '  - match: "model.layers.*.mlp.{gate_proj,up_proj}.weight"\n    split: column\n'
    cfg = Qwen2MoeConfig(**dict(BASE, norm_topk_prob=True, mlp_only_layers=[2]))
    src = os.path.join(tmp, "wrong", "src")
    model = hf.build(cfg, 99, src)
    want = hf.logits(model, IDS)
    cos, sin = rotary(model, len(IDS))
    for wname, text, what in hf.wrong_layouts("qwen2_moe", [
            ("shared-gate-up", shared,
             dense + hf.gate_halves("model.layers.*.mlp.shared_expert", "shared_intermediate", "weight"),
             "the shared expert's gate_proj columns not paired with its up_proj's"),
            ("experts-gate-up", experts, hf.gate_halves("model.layers.*.mlp.experts.*", "moe_intermediate", "weight"),
             "the routed experts' gate_proj columns not paired with their up_proj's")]):
        hf.wrong_cut(os.path.join(tmp, "wrong"), wname, what, src, text, lambda R: tp_forward(R, cfg, IDS, cos, sin),
                     want)


def main():
    return hf.main("hf_qwen2_moe", body)


if __name__ == "__main__":
    sys.exit(main())
