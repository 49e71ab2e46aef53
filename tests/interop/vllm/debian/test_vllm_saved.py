"""Sets vLLM saved itself (ShardedStateLoader.save_model, emulated from vLLM's
sharded_state_loader.py), read by tpshard: inspect, check, reshard 8 -> 4 --target vllm equal
to split --tp 4 --target vllm, merge bit-exact to the source; missing, extra and misshapen
keys refused, named with their rank.  Sets of the current release hold the attention scale
buffers; one saved by vLLM 0.13 (none) reshards as 0.13's.

The per-rank state dicts and the saver are tests/interop/vllm/vllm_emul.py's, written from vLLM's
source: engine_state_dict() (the weight-loader rules, in the engine's module order, with a tied
lm_head aliasing the embedding's storage) and save_sharded_state() (the saver's steps as
vLLM's code does them: _filter_subtensors (aliases of one storage keep the smallest key), parts
by max size in state_dict order (an empty part 0 when the first tensor alone exceeds it), no
__metadata__, file names model-rank-{rank}-part-{part}.safetensors).
The source's model.safetensors.index.json and config.json are copied beside the rank files."""
import os
import shutil
import sys
import tempfile

import torch

import tap
from tap import report, tpshard
import test_vllm_sharded_state as vs
import vllm_emul as ve


def vllm_saved(tmp, name, src, hf, cfg, T, max_size, scales=True):
    d = os.path.join(tmp, "%s-saved-%d%s" % (name, T, "" if scales else "-013"))
    os.makedirs(d)
    ve.save_sharded_state(d, [ve.engine_state_dict(hf, cfg, T, r, scales=scales) for r in range(T)], max_size)
    shutil.copy(os.path.join(src, "config.json"), d)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:  # stale, as vLLM's tools copy it
        f.write('{"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}')
    return d


def rewrite(d, r, edit):
    """Rank r's tensors edited (edit(dict) -> dict) and written back as one part."""
    import glob
    from safetensors.torch import load_file, save_file
    R = {}
    for f in glob.glob(os.path.join(d, "model-rank-%d-part-*.safetensors" % r)):
        R.update(load_file(f))
        os.unlink(f)
    save_file({k: v.contiguous() for k, v in edit(R).items()}, os.path.join(d, "model-rank-%d-part-0.safetensors" % r))


def split_sets_adopted(tmp):
    """Adopt takes every set split --target vllm writes: the set without its tpshard.json is
    what vLLM would have saved.  Phi-3 with 2 KV heads at tp 4 and 8 (each rank repeats a KV
    head inside the source's fused qkv_proj, so its global rows are no multiple of a rank's;
    intermediate 128, where BASE's 96 equals those rows by chance): check passes, reshard to
    tp 2 equals split --tp 2 byte for byte, merge is the source bit for bit; and every family
    of test_vllm_sharded_state's at tp 4 and 8: check passes."""
    from safetensors.torch import load_file
    from transformers import Phi3Config
    cfg = Phi3Config(**dict(vs.BASE, pad_token_id=0, intermediate_size=128))
    src = os.path.join(tmp, "phi3-kv2")
    hf, _ = vs.build(cfg, torch.float32, 5, src)
    ref2 = os.path.join(tmp, "phi3-kv2-split2")
    q = tpshard("split", src, "--tp", 2, "--target", "vllm", "-o", ref2, "-q")
    for T in (4, 8):
        d = os.path.join(tmp, "phi3-kv2-as-saved-%d" % T)
        p = tpshard("split", src, "--tp", T, "--target", "vllm", "-o", d, "-q")
        if not report(p.returncode == 0, "phi3 (2 KV heads): split --tp %d --target vllm" % T, p.stderr):
            continue
        os.unlink(os.path.join(d, "tpshard.json"))
        p = tpshard("check", d)
        report(p.returncode == 0, "phi3 (2 KV heads) tp %d: the split set without tpshard.json is adopted, check "
               "passes" % T, p.stdout[-1500:] + p.stderr[-1500:])
        out = d + "-re2"
        p = tpshard("reshard", d, "--tp", 2, "--target", "vllm", "-o", out, "-q")
        diff = ve.same_sets(out, ref2, 2) if p.returncode == 0 and q.returncode == 0 else p.stderr + q.stderr
        report(not diff, "phi3 (2 KV heads) tp %d: reshard to tp 2 equals split --tp 2 --target vllm" % T, diff)
        merged = d + "-merged.safetensors"
        p = tpshard("merge", d, "-o", merged, "-q")
        got = load_file(merged) if p.returncode == 0 else {}
        bad = [k for k in hf if k not in got or not torch.equal(got[k], hf[k])]
        report(p.returncode == 0 and not bad and set(got) == set(hf), "phi3 (2 KV heads) tp %d: merge equals the "
               "source bit for bit" % T, p.stderr + " differ/missing %s" % bad[:5])
    # and every family's set at tp 4 and 8 (KV heads replicated): check takes it
    for seed, (name, c, dtype) in enumerate(vs.cases()):
        src = os.path.join(tmp, name + "-src-any")
        vs.build(c, dtype, seed, src)
        for T in (4, 8):
            d = os.path.join(tmp, "%s-as-saved-%d" % (name, T))
            p = tpshard("split", src, "--tp", T, "--target", "vllm", "-o", d, "-q")
            if p.returncode == 0:
                os.unlink(os.path.join(d, "tpshard.json"))
                p = tpshard("check", d)
            report(p.returncode == 0, "%s tp %d: split --target vllm's set without tpshard.json is adopted, check "
                   "passes" % (name, T), p.stdout[-1500:] + p.stderr[-1500:])


def main():
    early = tap.transformers_tier("vllm_saved")
    if early is not None:
        return early
    from safetensors.torch import load_file
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, cfg, dtype) in enumerate(vs.cases()):
            if name == "qwen2-tied":
                continue
            src = os.path.join(tmp, name)
            hf, _ = vs.build(cfg, dtype, seed, src)
            d = vllm_saved(tmp, name, src, hf, cfg, 8, 1500)
            parts = sorted(os.listdir(d))
            from safetensors import safe_open
            with safe_open(os.path.join(d, "model-rank-0-part-0.safetensors"), "pt") as s:
                empty0 = not list(s.keys())
            report((empty0 or cfg.tie_word_embeddings) and "model-rank-0-part-1.safetensors" in parts,
                   "%s: the emulated saver wrote an empty part 0 and more parts" % name, " ".join(parts))
            p = tpshard("inspect", d)
            report(p.returncode == 0 and "sharded_state set saved by the engine" in p.stdout, "%s: inspect shows a vLLM-saved set" % name,
                   p.stdout[-2000:] + p.stderr)
            p = tpshard("check", d)
            report(p.returncode == 0, "%s: check passes on a vLLM-saved set" % name, p.stdout[-2000:] + p.stderr)
            out4 = os.path.join(tmp, "%s-re4" % name)
            p = tpshard("reshard", d, "--tp", 4, "--target", "vllm", "-o", out4, "-q")
            if report(p.returncode == 0, "%s: reshard 8 -> 4 --target vllm" % name, p.stderr):
                ref4 = os.path.join(tmp, "%s-split4" % name)
                q = tpshard("split", src, "--tp", 4, "--target", "vllm", "-o", ref4, "-q")
                diff = ve.same_sets(out4, ref4, 4) if q.returncode == 0 else q.stderr
                report(not diff, "%s: reshard 8 -> 4 equals split --tp 4 --target vllm, byte for byte" % name, diff)
                probs = ve.loads(out4, hf, cfg, 4, dtype)
                report(not probs, "%s: vLLM's loader takes the resharded set" % name, "\n".join(probs[:10]))
            merged = os.path.join(tmp, "%s-merged.safetensors" % name)
            p = tpshard("merge", d, "-o", merged, "-q")
            if report(p.returncode == 0, "%s: merge of a vLLM-saved set" % name, p.stderr):
                got = load_file(merged)
                bad = [k for k in hf if k not in got or not torch.equal(got[k].view(torch.uint8), hf[k].view(torch.uint8))]
                extra = sorted(set(got) - set(hf))
                report(not bad and not extra, "%s: merge equals the source tensors bit for bit" % name,
                       "differ/missing %s extra %s" % (bad[:5], extra[:5]))
            if name == "llama-bf16":  # saved by vLLM 0.13 (no scale buffers): resharded as such
                d13 = vllm_saved(tmp, name, src, hf, cfg, 8, 1500, scales=False)
                out13 = os.path.join(tmp, "%s-re4-013" % name)
                p = tpshard("reshard", d13, "--tp", 4, "-o", out13, "-q")
                ref13 = os.path.join(tmp, "%s-split4-013" % name)
                q = tpshard("split", src, "--tp", 4, "--target", "vllm", "--target-version", "0.13", "-o", ref13, "-q")
                diff = ve.same_sets(out13, ref13, 4) if p.returncode == 0 and q.returncode == 0 else p.stderr + q.stderr
                report(not diff, "%s: a vLLM 0.13-saved set reshards 8 -> 4 keeping its class (equals split "
                       "--target-version 0.13)" % name, diff)
                probs = ve.loads(out13, hf, cfg, 4, dtype, scales=False)
                report(not probs, "%s: vLLM 0.13's loader takes it" % name, "\n".join(probs[:5]))
                p = tpshard("check", d13)
                report(p.returncode == 0, "%s: check passes on a vLLM 0.13-saved set" % name, p.stderr[-1500:])
                # one rank without its scale buffers where the others have them: named
                w = os.path.join(tmp, "%s-noscales" % name)
                shutil.copytree(d, w)
                rewrite(w, 3, lambda R: {k: v for k, v in R.items() if not k.endswith("_scale")})
                p = tpshard("check", w)
                report(p.returncode == 1 and "rank 3 lacks 'model.layers.0.self_attn.attn._k_scale'" in p.stderr,
                       "%s: a rank missing the scale buffers is refused, named" % name, p.stderr[-1500:])
            # Wrong sets: each refused with exit 3, naming the key and the rank.
            key = "model.layers.1.self_attn.o_proj.weight"
            cases = [("missing", lambda R: {k: v for k, v in R.items() if k != key}, "rank 3 lacks '%s'" % key),
                     ("extra", lambda R: dict(R, **{"model.layers.1.mlp.gate_proj.weight": R[key].clone()}),
                      "rank 3 has 'model.layers.1.mlp.gate_proj.weight'"),
                     ("misshapen", lambda R: dict(R, **{key: R[key][:, :-1]}), "rank 3's '%s'" % key)]
            for what, edit, msg in cases:
                w = os.path.join(tmp, "%s-%s" % (name, what))
                shutil.copytree(d, w)
                rewrite(w, 3, edit)
                for verb in (["check", w], ["reshard", w, "--tp", 4, "--target", "vllm", "-o", w + "-out"]):
                    p = tpshard(*verb)
                    report(p.returncode == (1 if verb[0] == "check" else 3) and msg in p.stderr, "%s: %s key refused by %s, named" % (name, what, verb[0]),
                           "rc %d: %s" % (p.returncode, p.stderr[-1500:]))
        split_sets_adopted(tmp)
        # Hostile: a rank missing, a malformed rank file name, no config.json.
        d = os.path.join(tmp, "llama-bf16-saved-8")
        for what, act, msg in [("rank 5 missing", lambda w: [os.unlink(os.path.join(w, f)) for f in os.listdir(w)
                                                             if f.startswith("model-rank-5-")], "no files of rank 5"),
                               ("odd name", lambda w: open(os.path.join(w, "model-rank-01-part-0.safetensors"), "w").close(),
                                "not a rank file name"),
                               ("no config", lambda w: os.unlink(os.path.join(w, "config.json")), "no config.json")]:
            w = os.path.join(tmp, "hostile-" + what.replace(" ", "-"))
            shutil.copytree(d, w)
            act(w)
            p = tpshard("check", w)  # check reports findings with exit 1
            report(p.returncode == 1 and msg in p.stderr, "hostile set (%s) refused" % what,
                   "rc %d: %s" % (p.returncode, p.stderr[-800:]))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
