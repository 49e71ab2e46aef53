"""Megatron-Core torch_dist checkpoints WRITTEN by tpshard (split/reshard --target megatron
--ckpt-format torch_dist, lib/registry/megatron_dist_out.h, formats/dcp/dcp_write.h; issue #25)
loaded by real megatron-core (0.16.1, build/venv-megatron, GPTModel ranks on gloo,
dist_checkpointing.load as Megatron's load_checkpoint calls it):

  * a random transformers Llama (GQA, untied) split --tp 2 --ckpt-format torch_dist: real
    megatron-core loads it at TP1, TP2 and TP2 x PP2 and its logits equal transformers' own
    forward; the .metadata (read by torch's own unpickler) holds exactly the keys and global
    sizes that real megatron-core's own dist_checkpointing.save of a GPTModel of the same
    config writes (RNG and optimizer state left out), and every chunk is readable by DCP's
    FileSystemReader path (torch.load of each chunk's bytes); common.pt loads with
    weights_only and says ckpt_format torch_dist, tensor_model_parallel_size 2 and the vocab
    padded for tp 2; tpshard reads it back (inspect --json: torch_dist, saved at tp 2) and
    merge --target hf gives back the Hugging Face tensors bit for bit;
  * a random transformers Qwen2 (q/k/v biases, tied embeddings) split the same way: real
    megatron-core's logits at TP2 and at TP1 x PP2 equal transformers';
  * reshard --ckpt-format torch_dist of a torch_dist checkpoint real megatron-core saved at
    TP2 (random GPTModel): loaded at TP1 its logits equal those of the original at TP2.
"""
import io
import json
import os
import pickle
import sys
import tempfile

import torch

import megatron_real as mr
from megatron_real_dist import run_ok
from tap import TPSHARD, report, status

TOKENS = [3, 17, 99, 42, 0, 64, 5, 77, 31]


def iter_dir(ck):
    return os.path.join(ck, "iter_%07d" % int(open(os.path.join(ck, "latest_checkpointed_iteration.txt")).read()))


def dcp_metadata(ck):
    with open(os.path.join(iter_dir(ck), ".metadata"), "rb") as f:
        return pickle.load(f)


def model_entries(md):
    """{key: global size or None (a non-tensor entry)} of the model's entries (no RNG, no
    optimizer state)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    return {k: (tuple(v.size) if isinstance(v, TensorStorageMetadata) else None)
            for k, v in md.state_dict_metadata.items()
            if not k.startswith("rng_state") and not k.startswith("optimizer.")}


def chunks_load(ck, md):
    """Problems reading each chunk as DCP's FileSystemReader does (torch.load of the bytes at
    its storage range, weights_only) and checking it against its ChunkStorageMetadata."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    probs = []
    sizes = {}
    for k, v in md.state_dict_metadata.items():
        if isinstance(v, TensorStorageMetadata):
            for c in v.chunks:
                sizes[(k, tuple(c.offsets))] = (tuple(c.sizes), v.properties.dtype)
    for idx, info in md.storage_data.items():
        with open(os.path.join(iter_dir(ck), info.relative_path), "rb") as f:
            f.seek(info.offset)
            raw = f.read(info.length)
        obj = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        if idx.offset is None:
            if obj != [None]:
                probs.append("%s: %r" % (idx.fqn, obj))
            continue
        want = sizes.get((idx.fqn, tuple(idx.offset)))
        if want is None or tuple(obj.shape) != want[0] or obj.dtype != want[1]:
            probs.append("%s at %s: %s %s, metadata says %s" % (idx.fqn, tuple(idx.offset), tuple(obj.shape),
                                                              obj.dtype, want))
    return probs


def common_state(ck):
    try:
        from megatron.core.safe_globals import register_safe_globals
        register_safe_globals()
    except ImportError:
        pass
    return torch.load(os.path.join(iter_dir(ck), "common.pt"), map_location="cpu", weights_only=True)


def random_qwen2(out_dir, seed=7):
    """A random HF Qwen2 (q/k/v biases, tied embeddings) saved with save_pretrained."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-6, tie_word_embeddings=True, torch_dtype="float32")
    m = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if n.endswith("norm.weight") else 0.05 * torch.randn_like(p))
    m.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def split_and_load(tmp, hf, what, grids):
    """split --tp 2 --target megatron --ckpt-format torch_dist of the Hugging Face model hf,
    loaded by real megatron-core at each (tp, pp) of grids and compared with transformers'
    logits; the checkpoint's directory, or None when the split failed."""
    ck = hf + "-dist"
    if not run_ok("split --tp 2 --target megatron --ckpt-format torch_dist of a %s" % what, "split", hf,
                  "--tp", 2, "--target", "megatron", "--ckpt-format", "torch_dist", "-o", ck, "-q"):
        return None
    ref = mr.hf_logits(hf, TOKENS)
    for tp, pp in grids:
        mr.close(mr.load_dist_and_forward(ck, TOKENS, tp, pp), ref,
                 "megatron torch_dist write: real megatron-core loads tpshard's torch_dist of a %s at TP%d x "
                 "PP%d (dist_checkpointing.load, then load_state_dict strict): its logits equal transformers'"
                 % (what, tp, pp))
    return ck


def llama_case(tmp):
    from safetensors.torch import load_file
    hf = mr.random_llama(os.path.join(tmp, "hf-llama"), vocab=100, hidden=64, layers=4, heads=8,
                         kv_heads=2, inter=128, tie=False, seed=5)
    want = load_file(os.path.join(hf, "model.safetensors"))
    ck = split_and_load(tmp, hf, "Llama (GQA, untied)", ((1, 1), (2, 1), (2, 2)))
    if not ck:
        return
    # The keys and global sizes real megatron-core writes for a GPTModel of that config.
    args = mr.llama_args(100, 64, 4, 8, 2, 128, make_vocab_size_divisible_by=128)
    real = os.path.join(tmp, "real-tp2")
    mr.save_dist_checkpoint(args, 2, 1, real, optimizer=False)
    md = dcp_metadata(ck)
    ours, theirs = model_entries(md), model_entries(dcp_metadata(real))
    report(ours == theirs, "megatron torch_dist write: .metadata holds the %d keys and global sizes real "
           "megatron-core's save of the same GPTModel config writes (RNG state aside)" % len(theirs),
           "only ours: %s\nonly theirs: %s\ndiffer: %s" % (
               sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours)),
               sorted(k for k in ours if k in theirs and ours[k] != theirs[k])))
    probs = chunks_load(ck, md)
    report(not probs, "megatron torch_dist write: every one of the %d storage entries is a torch.save stream "
           "torch.load reads with weights_only, of the chunk's sizes and dtype" % len(md.storage_data),
           "\n".join(probs[:8]))
    c = common_state(ck)
    a = c["args"]
    report(a.ckpt_format == "torch_dist" and a.tensor_model_parallel_size == 2 and a.padded_vocab_size == 256
           and c["iteration"] == 1 and c["checkpoint_version"] == 3.0,
           "megatron torch_dist write: common.pt loads with weights_only: args say torch_dist, tp 2, the "
           "vocabulary padded to 256 (128 x 2), iteration 1, checkpoint_version 3.0",
           "%s %s %s %s %s" % (a.ckpt_format, a.tensor_model_parallel_size, a.padded_vocab_size,
                               c.get("iteration"), c.get("checkpoint_version")))
    r = run_ok("inspect --json of what it wrote", "inspect", "--json", ck)
    if r:
        j = json.loads(r.stdout)
        report(j.get("backend") == "torch_dist" and j.get("saved_tp") == 2 and j.get("iteration") == 1,
               "megatron torch_dist write: tpshard inspect reads it back as torch_dist saved for tp 2",
               r.stdout[:600])
    back = os.path.join(tmp, "llama-back")
    if run_ok("merge --target hf of what it wrote", "merge", ck, "--target", "hf", "-o", back + "/", "-q"):
        import vllm_emul as ve
        report(ve.is_source(os.path.join(back, "model.safetensors"), want),
               "megatron torch_dist write: merge --target hf of it gives back the Hugging Face tensors bit "
               "for bit")
    # reshard of real megatron-core's own torch_dist (random GPTModel, saved at TP2)
    rd = os.path.join(tmp, "real-resharded")
    if run_ok("reshard --tp 1 --ckpt-format torch_dist of a real torch_dist checkpoint", "reshard", real,
              "--tp", 1, "--ckpt-format", "torch_dist", "-o", rd, "-q"):
        mr.close(mr.load_dist_and_forward(rd, TOKENS, 1, 1), mr.load_dist_and_forward(real, TOKENS, 2, 1),
                 "megatron torch_dist write: reshard --ckpt-format torch_dist of real megatron-core's TP2 "
                 "checkpoint, loaded at TP1, gives the original's logits")


def qwen2_case(tmp):
    split_and_load(tmp, random_qwen2(os.path.join(tmp, "hf-qwen2")), "Qwen2 (q/k/v biases, tied embeddings)",
                   ((2, 1), (1, 2)))


def main():
    if not os.access(TPSHARD, os.X_OK):
        print("not ok - tpshard binary missing at " + TPSHARD)
        return 1
    import importlib.util
    if importlib.util.find_spec("psutil") is None:  # a venv made before setup_megatron.sh added it
        print("skip - megatron_real_dist_write: dist_checkpointing needs psutil, missing from %s; "
              "rerun tests/interop/megatron/setup_megatron.sh" % sys.prefix)
        return 0
    with tempfile.TemporaryDirectory(prefix="mgdistw") as tmp:
        llama_case(tmp)
        qwen2_case(tmp)
    return status()


if __name__ == "__main__":
    # line by line: a library that forks would otherwise flush a second copy of the buffer
    sys.stdout.reconfigure(line_buffering=True)
    sys.exit(main())
