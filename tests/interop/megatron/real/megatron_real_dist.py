"""Megatron-Core torch_dist checkpoints saved by real megatron-core (0.16.1, build/venv-megatron,
GPTModel ranks on gloo, dist_checkpointing.save as Megatron's save_checkpoint calls it) read
by tpshard (formats/megatron/megatron_dist.h, issue #25):

  * a randomly initialized GQA Llama-style GPTModel saved at TP2 x PP2 with an optimizer state
    (Megatron's make_sharded_optimizer_tensor) and the RNG state: inspect --json says
    torch_dist, the grid, the iteration, and as many optimizer tensors left out as the DCP
    metadata (read by torch's own unpickler) holds; merge --target hf gives a checkpoint whose
    transformers logits equal megatron-core's own (dist_checkpointing.load into GPTModel at
    TP2 x PP2, and at TP1 x PP1: the harness agrees with itself first); reshard --tp 4 --pp 1
    writes a legacy checkpoint with exactly the real GPTModel's keys that loads strict and
    gives the same logits;
  * a random transformers Llama (untied at TP2 x PP2, tied at TP2 x PP1) taken into real
    GPTModel ranks (Megatron's own conversion rules, megatron_real.hf_llama_to_megatron, a
    strict load) and saved as torch_dist: merge --target hf gives back the very tensors of
    the Hugging Face model, bit for bit, and split iter_0000001/ --tp 2, 4 and 8 --target vllm
    (8: more ranks than KV heads) gives every rank exactly what vLLM's loader expects from
    that Hugging Face model by its own rules (vllm_emul.py, written from vLLM's sources, not
    from tpshard); so does split of the legacy checkpoint it was made from.
"""
import json
import os
import pickle
import sys
import tempfile

import torch

import megatron_real as mr
from tap import TPSHARD, report, status, tpshard

TOKENS = [3, 17, 99, 42, 0, 64, 5, 77, 31]


def run_ok(what, *args):
    r = tpshard(*args)
    report(r.returncode == 0, "megatron torch_dist: %s exits 0" % what,
           "exit %d\n%s" % (r.returncode, (r.stderr or r.stdout)[-3000:]))
    return r if r.returncode == 0 else None


def optimizer_tensors(iter_dir):
    """How many optimizer.* tensors the DCP metadata holds, read by torch's own unpickler."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    with open(os.path.join(iter_dir, ".metadata"), "rb") as f:
        md = pickle.load(f)
    return sum(1 for k, v in md.state_dict_metadata.items()
               if k.startswith("optimizer.") and isinstance(v, TensorStorageMetadata))


def random_case(tmp):
    args = mr.llama_args(100, 64, 4, 8, 2, 128, max_pos=64, make_vocab_size_divisible_by=4)
    args.init_method_std = 0.2  # O(1) logits
    ck = os.path.join(tmp, "random-tp2-pp2")
    mr.save_dist_checkpoint(args, 2, 2, ck)
    it = os.path.join(ck, "iter_0000001")
    ref = mr.load_dist_and_forward(ck, TOKENS, 2, 2)
    mr.close(mr.load_dist_and_forward(ck, TOKENS, 1, 1), ref,
             "megatron torch_dist: real megatron-core loads its TP2 x PP2 torch_dist checkpoint at "
             "TP1 x PP1 with the same logits (the harness)")
    r = run_ok("inspect --json of the tracker directory", "inspect", "--json", ck)
    if r:
        j = json.loads(r.stdout)
        nopt = optimizer_tensors(it)
        report(j.get("backend") == "torch_dist" and j.get("saved_tp") == 2 and j.get("saved_pp") == 2
               and j.get("iteration") == 1 and nopt > 0 and j.get("optimizer_tensors_left_out") == nopt
               and j.get("model", {}).get("num_layers") == 4,
               "megatron torch_dist: inspect says torch_dist, saved at tp 2 x pp 2, iteration 1, "
               "%d optimizer tensors left out, the args' model" % nopt, r.stdout[:800])
    hf = os.path.join(tmp, "random-hf")
    r = run_ok("merge --target hf of iter_0000001/", "merge", it + "/", "--target", "hf", "-o", hf + "/")
    if r:
        report("optimizer tensors" in r.stderr and "saved at tp 2 x pp 2" in r.stderr,
               "megatron torch_dist: merge says in one note line what it leaves out", r.stderr)
        mr.close(mr.hf_logits(hf, TOKENS), ref,
                 "megatron torch_dist: merge --target hf of real megatron-core's TP2 x PP2 "
                 "checkpoint: transformers' logits equal megatron-core's")
    legacy = os.path.join(tmp, "random-legacy-tp4")
    if run_ok("reshard --tp 4 --pp 1 to the legacy format", "reshard", ck, "--tp", 4, "--pp", 1,
              "-o", legacy):
        from megatron_real_tpshard import keys_equal_real
        keys_equal_real(legacy, "reshard of a torch_dist checkpoint to tp4/pp1")
        report(mr.load_state(legacy)[(0, 0)]["args"].ckpt_format == "torch",
               "megatron torch_dist: the resharded legacy checkpoint's args say ckpt_format torch")
        mr.close(mr.load_and_forward(legacy, TOKENS), ref,
                 "megatron torch_dist: reshard of real megatron-core's TP2 x PP2 torch_dist checkpoint "
                 "to the legacy format at TP4 x PP1 loads strict and equals its logits")


def hf_case(tmp, name, tie, tp, pp):
    import vllm_emul as ve
    from safetensors.torch import load_file
    hf = mr.random_llama(os.path.join(tmp, "hf-" + name), vocab=100, hidden=64, layers=4, heads=8,
                         kv_heads=2, inter=128, tie=tie, seed=5)
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(hf)
    want = load_file(os.path.join(hf, "model.safetensors"))
    legacy = os.path.join(tmp, "legacy-" + name)
    mr.hf_llama_to_megatron(hf, tp, pp, legacy, make_vocab_size_divisible_by=4)
    ck = mr.legacy_to_dist(legacy, os.path.join(tmp, "dist-" + name))
    it = os.path.join(ck, "iter_0000001")
    what = "%s HF Llama in real GPTModel ranks saved as torch_dist at TP%d x PP%d" % (name, tp, pp)
    mr.close(mr.load_dist_and_forward(ck, TOKENS, tp, pp), mr.hf_logits(hf, TOKENS),
             "megatron torch_dist: %s: megatron-core's logits equal transformers' (the harness)"
             % what)
    back = os.path.join(tmp, "merged-" + name)
    if run_ok("merge --target hf (%s)" % what, "merge", ck, "--target", "hf", "-o", back + "/", "-q"):
        report(ve.is_source(os.path.join(back, "model.safetensors"), want),
               "megatron torch_dist: %s: merge --target hf gives back the Hugging Face tensors "
               "bit for bit" % what)
    # tp 8: more ranks than the 2 KV heads (each replicated on 4 ranks); the legacy
    # checkpoint the torch_dist one was made from splits the same way
    for src, T in ((it, 2), (it, 4), (it, 8), (legacy, 2)):
        kind = "torch_dist" if src == it else "legacy"
        out = os.path.join(tmp, "vllm-%s-%s-%d" % (name, kind, T))
        if run_ok("split --tp %d --target vllm of the %s checkpoint (%s)" % (T, kind, what), "split",
                  src + "/", "--tp", T, "--target", "vllm", "-o", out, "-q"):
            probs = ve.loads(out, want, cfg, T, torch.float32)
            report(not probs, "megatron torch_dist: %s: split of the %s checkpoint --tp %d --target "
                   "vllm: every rank is what vLLM's loader expects from the Hugging Face model"
                   % (what, kind, T), "\n".join(probs[:8]))


def main():
    if not os.access(TPSHARD, os.X_OK):
        print("not ok - tpshard binary missing at " + TPSHARD)
        return 1
    import importlib.util
    if importlib.util.find_spec("psutil") is None:  # a venv made before setup_megatron.sh added it
        print("skip - megatron_real_dist: dist_checkpointing.save needs psutil, missing from %s; "
              "rerun tests/interop/megatron/setup_megatron.sh" % sys.prefix)
        return 0
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="mgdist") as tmp:
        random_case(tmp)
        hf_case(tmp, "untied", False, 2, 2)
        hf_case(tmp, "tied", True, 2, 1)
    return status()


if __name__ == "__main__":
    # line by line: a library that forks would otherwise flush a second copy of the buffer
    sys.stdout.reconfigure(line_buffering=True)
    sys.exit(main())
