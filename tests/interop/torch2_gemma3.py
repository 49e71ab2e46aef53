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
import json
import math
import os
import sys
import tempfile
import time

import torch

import tap
from tap import report, tpshard
from test_hf_llama_family import load_ranks, rotate_half

TPS = (1, 2, 4, 8)
TOL = 1e-4
IDS = torch.tensor([3, 97, 41, 0, 99, 12, 64, 88, 5, 70, 23, 50, 96, 1, 33, 77])  # in every rank's rows

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


def build(cfg, seed, path):
    """transformers' model with every parameter drawn again (its init leaves Gemma's norms at
    zero and biases at zero, which would hide a norm or bias cut)."""
    from transformers import AutoModelForCausalLM, Gemma3ForConditionalGeneration
    torch.manual_seed(seed)
    if cfg.model_type == "gemma3":
        model = Gemma3ForConditionalGeneration(cfg)
        model.config._attn_implementation = "eager"
        for sub in (model.config.text_config, model.config.vision_config):
            sub._attn_implementation = "eager"
    else:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = model.float().eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:  # norms and biases
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.normal_(0, 1 / math.sqrt(p.shape[1]))
    model.save_pretrained(path, safe_serialization=True)
    return model


def legal_tps(cfg):
    c = text_config(cfg)
    heads, kv, inter = c.num_attention_heads, c.num_key_value_heads, c.intermediate_size
    return [t for t in TPS if heads % t == 0 and inter % t == 0 and (kv % t == 0 or t % kv == 0)]


def gemma_rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def linear(x, R, name):
    y = x @ R[name + ".weight"].T
    b = R.get(name + ".bias")
    return y if b is None else y + b


def rope(c, n, local):
    """cos, sin of transformers' rotary_emb (global: rope_theta, linear scaling) or
    rotary_emb_local (rope_local_base_freq, no scaling)."""
    hd = c.head_dim
    base = c.rope_local_base_freq if local else c.rope_theta
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    if not local and c.rope_scaling and c.rope_scaling.get("rope_type") == "linear":
        inv = inv / c.rope_scaling["factor"]
    f = torch.outer(torch.arange(n, dtype=torch.float32), inv)
    emb = torch.cat((f, f), dim=-1)
    return emb.cos(), emb.sin()


def tp_forward(ranks, cfg, prefix, ids, off=()):
    """The whole model from the ranks' slices alone; `off` names a feature to leave out
    ("local_rope": every layer rotates as the global ones; "qk_norm": no q/k norms)."""
    c = text_config(cfg)
    n, H, hd, eps = ids.shape[0], c.hidden_size, c.head_dim, c.rms_norm_eps
    emb = prefix + "embed_tokens.weight"
    rows = ranks[0][emb].shape[0]
    x = torch.zeros(n, H)
    for r, R in enumerate(ranks):  # vocabulary-parallel lookup: each rank its rows, summed
        local = ids - r * rows
        hit = (local >= 0) & (local < rows)
        x[hit] += R[emb][local[hit]]
    x = x * torch.tensor(H ** 0.5, dtype=x.dtype)
    scale = c.query_pre_attn_scalar ** -0.5
    causal = torch.full((n, n), float("-inf")).triu(1)
    window = causal.masked_fill(torch.ones(n, n, dtype=torch.bool).tril(-c.sliding_window), float("-inf"))
    for layer in range(c.num_hidden_layers):
        p = prefix + "layers.%d." % layer
        is_local = c.layer_types[layer] == "sliding_attention"
        cos, sin = rope(c, n, is_local and "local_rope" not in off)
        m = window if is_local else causal
        attn = torch.zeros(n, H)
        for R in ranks:
            xn = gemma_rms(x, R[p + "input_layernorm.weight"], eps)
            q = linear(xn, R, p + "self_attn.q_proj").view(n, -1, hd).transpose(0, 1)
            k = linear(xn, R, p + "self_attn.k_proj").view(n, -1, hd).transpose(0, 1)
            v = linear(xn, R, p + "self_attn.v_proj").view(n, -1, hd).transpose(0, 1)
            if "qk_norm" not in off:  # each head over head_dim, before RoPE
                q = gemma_rms(q, R[p + "self_attn.q_norm.weight"], eps)
                k = gemma_rms(k, R[p + "self_attn.k_norm.weight"], eps)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            kv_of = [j * k.shape[0] // q.shape[0] for j in range(q.shape[0])]  # local query head -> KV head
            k, v = k[kv_of], v[kv_of]
            w = torch.softmax(q @ k.transpose(1, 2) * scale + m, dim=-1)
            attn += (w @ v).transpose(0, 1).reshape(n, -1) @ R[p + "self_attn.o_proj.weight"].T  # all-reduce: a sum
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
    return torch.cat([x @ R[head].T for R in ranks], dim=1)[:, :c.vocab_size]  # gathered, padding dropped


def hf_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids[None], use_cache=False).logits[0]


def check_vision_replicated(name, src, ranks):
    """The multimodal case: the vision tower and projector whole on every rank."""
    from safetensors.torch import load_file
    full = load_file(os.path.join(src, "model.safetensors"))
    names = [k for k in full if k.startswith(("vision_tower.", "multi_modal_projector."))]
    bad = [(k, r) for k in names for r, R in enumerate(ranks) if k not in R or not torch.equal(R[k], full[k])]
    report(names and not bad, "%s: every rank holds the %d vision tower and projector tensors whole" %
           (name, len(names)), "differ: %s" % bad[:5])


def wrong_layout():
    """The gemma3_text preset with the K/V rule replaced by a round-robin deal of K/V heads."""
    text = tpshard("layout", "--preset", "gemma3_text").stdout
    kv_rule = ('  - match: "model.layers.*.self_attn.{k_proj,v_proj}.{weight,bias}"\n    split: column\n'
               '    unit: head_dim\n    size: kv_heads*head_dim\n    kv_replicate: true\n')
    if kv_rule not in text:
        report(False, "the gemma3_text preset's K/V rule is where this test replaces it", text)
        return None
    # Rank r of 2 gets KV heads r and r + kv/2 instead of the contiguous pair its queries read.
    round_robin = ('  - match: "model.layers.*.self_attn.{k_proj,v_proj}.{weight,bias}"\n    split: column\n'
                   '    segments:\n'
                   '      - {name: a, size: kv_heads/2*head_dim, unit: head_dim}\n'
                   '      - {name: b, size: kv_heads/2*head_dim, unit: head_dim}\n')
    return text.replace(kv_rule, round_robin)


def run_case(tmp, seed, name, cfg, prefix, preset):
    src = os.path.join(tmp, name, "src")
    model = build(cfg, seed, src)
    want = hf_logits(model, IDS)
    detail, worst, worst_dump, done = [], 0.0, 0.0, []
    for t in legal_tps(cfg):
        out = os.path.join(tmp, name, "tp%d" % t)
        r = tpshard("split", src, "--tp", t, "-o", out)  # auto-detected from config.json
        if r.returncode != 0 or "preset %s," % preset not in r.stderr:
            report(False, "%s: split --tp %d chooses preset %s from config.json" % (name, t, preset), r.stderr)
            continue
        ranks = load_ranks(out)
        got = tp_forward(ranks, cfg, prefix, IDS)
        diff = float((got - want).abs().max())
        worst = max(worst, diff)
        detail.append("tp %d: max abs logit difference %.3g" % (t, diff))
        dump = os.path.join(tmp, name, "logits%d.json" % t)
        for mode in (["--layer", "all"], ["--whole-model", "--tokens", 12, "--dump-logits", dump]):
            v = tpshard("verify", out, "--source", src, *mode, "-q")
            if v.returncode != 0:
                report(False, "%s: tpshard verify %s at tp %d exits 0" % (name, " ".join(map(str, mode)), t),
                       "exit %d\n%s%s" % (v.returncode, v.stdout, v.stderr))
        if os.path.exists(dump):  # verify's own whole-model logits, reference and ranks, against transformers'
            d = json.load(open(dump))
            hf = hf_logits(model, torch.tensor(d["tokens"])).double()
            for what in ("reference", "ranks"):
                e = float((torch.tensor(d[what], dtype=torch.float64) - hf).abs().max())
                worst_dump = max(worst_dump, e)
                detail.append("tp %d: verify --whole-model's %s logits differ from transformers' by %.3g" % (t, what, e))
        if preset == "gemma3" and t == 8:
            check_vision_replicated(name, src, ranks)
        done.append(t)
    report(done == legal_tps(cfg) and worst <= TOL,
           "%s: the torch TP forward from the shard files equals transformers' logits at tp %s "
           "(max abs difference %.2g <= %g)" % (name, ",".join(map(str, done)), worst, TOL), "\n".join(detail))
    report(done and worst_dump <= TOL, "%s: verify --whole-model's reference and tensor-parallel logits equal "
           "transformers' (max abs difference %.2g <= %g)" % (name, worst_dump, TOL), "\n".join(detail))
    if done:  # the local RoPE base and the q/k norms bind on this model: leaving either out misses
        ranks = load_ranks(os.path.join(tmp, name, "tp%d" % done[-1]))
        misses = {f: float((tp_forward(ranks, cfg, prefix, IDS, off=(f,)) - want).abs().max())
                  for f in ("local_rope", "qk_norm")}
        report(all(d > 100 * TOL for d in misses.values()),
               "%s: the local RoPE base and the q/k norms matter (%s)" %
               (name, ", ".join("without %s: %.2g" % kv for kv in misses.items())))


def main():
    early = tap.transformers_tier("torch2_gemma3")
    if early is not None:
        return early
    import transformers
    if not hasattr(transformers, "Gemma3TextConfig"):
        print("skip - torch2_gemma3: transformers %s has no Gemma 3 (4.50 or later; tests/interop/setup_torch2.sh)"
              % transformers.__version__)
        return 0
    torch.set_num_threads(2)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, cfg, prefix, preset) in enumerate(cases()):
            run_case(tmp, seed, name, cfg, prefix, preset)

        # A wrong cut: caught by the forward and by verify, not by the byte checks.
        from transformers import Gemma3TextConfig
        cfg = Gemma3TextConfig(**dict(BASE, num_key_value_heads=4))
        src = os.path.join(tmp, "wrong", "src")
        want = hf_logits(build(cfg, 99, src), IDS)
        text = wrong_layout()
        if text is not None:
            lay = os.path.join(tmp, "wrong", "kv-round-robin.yaml")
            open(lay, "w").write(text)
            out = os.path.join(tmp, "wrong", "kv-round-robin")
            r = tpshard("split", src, "--tp", 2, "--layout", lay, "-o", out, "-q")
            if r.returncode != 0:
                report(False, "wrong cut: split", r.stderr)
            else:
                c = tpshard("check", out, "-q")
                diff = float((tp_forward(load_ranks(out), cfg, "model.", IDS) - want).abs().max())
                v_layer = tpshard("verify", out, "--source", src, "--layer", "all", "-q")
                v_whole = tpshard("verify", out, "--source", src, "--whole-model", "-q")
                report(c.returncode == 0 and diff > 100 * TOL and v_layer.returncode == 1 and v_whole.returncode == 1,
                       "wrong cut (K/V heads dealt round-robin) at tp 2: check passes, the torch forward differs "
                       "from transformers' by %.2g, verify --layer all exits %d, verify --whole-model exits %d"
                       % (diff, v_layer.returncode, v_whole.returncode),
                       "check exit %d %s\nverify --layer all: %s%s\nverify --whole-model: %s%s"
                       % (c.returncode, c.stderr, v_layer.stdout, v_layer.stderr, v_whole.stdout, v_whole.stderr))
    print("# transformers %s, torch %s: %.1f s" % (transformers.__version__, torch.__version__, time.time() - t0))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
