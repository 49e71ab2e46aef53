"""Truth from outside for `tpshard verify --whole-model`: Hugging Face transformers.

For each built-in preset's family (Llama with an untied head, Qwen2 with a tied one and
q/k/v biases, GPT-2 with learned positions and a tied head, GPT-NeoX, Phi-3, Mixtral) a tiny
model is built with transformers' own classes (random weights under torch.manual_seed,
every parameter drawn again so that norms and biases are not trivially one and zero;
nothing is downloaded), saved with save_pretrained, split with the family's preset at two
tp values (one padding the vocabulary), and `tpshard verify OUT --source SRC --whole-model
--dump-logits FILE` must exit 0.  The dump's float64 reference logits (tpshard's unsharded
forward) and its ranks' logits (the vocabulary-parallel pass, gathered, padding dropped)
must both equal transformers' forward of the full model in float32 on the dump's token
ids, within 1e-4 relative to the logits' scale.

The test can fail: wrong cuts of the vocabulary-parallel tensors (the embedding cut along
its hidden dimension, the LM head replicated; intact bytes, `check` passes) make verify
--whole-model exit 1 naming the stage.  (Wrong cuts with the right shapes are in
tests/cli/verify_whole.sh.)

Skips loudly when transformers cannot be imported (tests/interop/setup.sh installs 4.46.3).
"""
import json
import os
import sys

import torch

import hf_tier as hf
from hf_tier import TOL, report, tpshard

def cases():
    """(name, preset, config, tps): vocab_size 101 pads at every tp above 1."""
    from transformers import (GPT2Config, GPTNeoXConfig, LlamaConfig, MixtralConfig, Phi3Config, Qwen2Config)
    base = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
                num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)
    return [
        ("llama", "llama", LlamaConfig(**base), (2, 8)),
        ("qwen2-tied", "llama", Qwen2Config(**dict(base, tie_word_embeddings=True)), (1, 4)),
        ("gpt2", "gpt2", GPT2Config(vocab_size=101, n_embd=64, n_head=4, n_layer=2, n_positions=32), (2, 4)),
        ("neox", "neox", GPTNeoXConfig(vocab_size=101, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                       num_hidden_layers=2, rotary_pct=0.25, max_position_embeddings=64,
                                       use_parallel_residual=True), (2, 4)),
        ("phi3", "phi3", Phi3Config(**dict(base, pad_token_id=0, bos_token_id=1, eos_token_id=2)), (2, 8)),
        ("mixtral", "mixtral", MixtralConfig(**dict(base, num_local_experts=4, num_experts_per_tok=2)), (2,)),
    ]


def body(tmp):
    for seed, (name, preset, cfg, tps) in enumerate(cases()):
        src = os.path.join(tmp, name, "src")
        model = hf.build(cfg, seed, src, fan_in=64)
        for t in tps:
            out = os.path.join(tmp, name, "tp%d" % t)
            r = tpshard("split", src, "--tp", t, "--preset", preset, "-o", out, "-q")
            if r.returncode != 0:
                report(False, "%s: split --tp %d" % (name, t), r.stderr)
                continue
            dump = os.path.join(tmp, name, "logits%d.json" % t)
            v = tpshard("verify", out, "--source", src, "--whole-model", "--tokens", 12, "--seed", seed + t,
                        "--dump-logits", dump, "-q")
            if not report(v.returncode == 0, "%s tp %d: verify --whole-model --source exits 0" % (name, t),
                          "exit %d\n%s%s" % (v.returncode, v.stdout, v.stderr)):
                continue
            d = json.load(open(dump))
            ids = torch.tensor(d["tokens"])
            want = hf.logits(model, ids).double()
            scale = max(1.0, float(want.abs().max()))
            ref = torch.tensor(d["reference"], dtype=torch.float64)
            got = torch.tensor(d["ranks"], dtype=torch.float64)
            dr, dg = float((ref - want).abs().max()), float((got - want).abs().max())
            report(ref.shape == want.shape and dr <= TOL * scale and dg <= TOL * scale,
                   "%s tp %d: tpshard's reference and tensor-parallel logits equal transformers' (max abs "
                   "difference %.2g and %.2g, logits up to %.3g)" % (name, t, dr, dg, scale),
                   "shapes %s vs %s" % (tuple(ref.shape), tuple(want.shape)))

    # Wrong cuts of a vocabulary-parallel tensor: bytes intact, `check` passes.
    src = os.path.join(tmp, "llama", "src")
    base = tpshard("layout", "--preset", "llama").stdout
    for wname, rule, stage in (("embedding cut along hidden", "  - match: model.embed_tokens.weight\n"
                                "    split: row\n", "embedding stage"),
                               ("lm_head replicated", "  - match: lm_head.weight\n    split: replicate\n",
                                "logits stage")):
        lay = os.path.join(tmp, "wrong.yaml")
        open(lay, "w").write(base.replace("rules:\n", "rules:\n" + rule, 1))
        out = os.path.join(tmp, "wrong-" + wname.replace(" ", "-"))
        r = tpshard("split", src, "--tp", 2, "--layout", lay, "-o", out, "-q")
        if not report(r.returncode == 0, "wrong cut (%s): split" % wname, r.stderr):
            continue
        c = tpshard("check", out, "-q")
        v = tpshard("verify", out, "--source", src, "--whole-model", "-q")
        report(c.returncode == 0 and v.returncode == 1 and stage in v.stderr,
               "wrong cut (%s) at tp 2: check passes (exit %d), verify --whole-model exits %d naming the %s" %
               (wname, c.returncode, v.returncode, stage), v.stdout + v.stderr)


def main():
    return hf.main("whole_model", body)


if __name__ == "__main__":
    sys.exit(main())
