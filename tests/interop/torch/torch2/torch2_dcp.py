"""PyTorch Distributed Checkpoint (DCP) directories as a source, saved by PyPI torch 2.5.1.

A tiny Llama (transformers' own class, bfloat16, vocabulary 99 so that FSDP2's dim-0 shards
are uneven) is saved three ways: save_pretrained (safetensors, the reference), dcp.save from
one process (one chunk per tensor), and dcp.save from two gloo processes with every parameter
a DTensor sharded on dim 0 (FSDP2 style: two chunks per tensor, in two .distcp files).  Each
DCP directory gets the model's config.json, so the preset is auto-detected as for the
safetensors copy.  Then:

  * `tpshard split DCP --tp T` at T = 2 and 4 must write rank files byte-identical to
    `tpshard split model.safetensors --tp T`;
  * `tpshard merge` of the DCP's split must equal the model's own state dict bit for bit
    (torch's tensors, not tpshard's reading of them);
  * inspect, plan and `verify --source DCP` accept the directory;
  * hostile copies (truncated .metadata, truncated .distcp, a chunk past its tensor, two
    chunks overlapping, a missing chunk, an unknown class in the pickle) exit 3 naming the
    problem, with no output directory left behind.

The test can fail: reading a chunk at the wrong offset (the torch.save stream's header
instead of its data record), or assembling the dim-0 chunks out of order, changes bytes of
the split; accepting a chunk past its tensor leaves exit 0.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import torch

import tap
from tap import report, tpshard

CFG = dict(vocab_size=99, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
           num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)


def model():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(**CFG)).to(torch.bfloat16)
    with torch.no_grad():
        for p in m.parameters():  # norms too: ones would hide a misplaced chunk
            p.copy_(torch.randn_like(p, dtype=torch.float32).to(p.dtype))
    return m


def save_fsdp2(rank, out, store):
    """One of two gloo processes: every parameter a DTensor cut on dim 0, saved with DCP."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed._tensor import DeviceMesh, Shard, distribute_tensor
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
    mesh = DeviceMesh("cpu", [0, 1])
    sd = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in model().state_dict().items()}
    dcp.save(sd, checkpoint_id=out)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # destroy_process_group can hang on gloo's teardown; the checkpoint is complete


def run(*args):
    r = tpshard(*args)
    if r.returncode != 0:
        report(False, "tpshard " + " ".join(map(str, args)), r.stderr)
    return r


def raw(t):
    return t.contiguous().flatten().view(torch.uint8)


def same_files(a, b):
    """"" when a and b hold the same rank files with the same metadata and, tensor for tensor,
    the same dtype, shape and bytes (the order inside a file follows the source's)."""
    from safetensors import safe_open
    names = sorted(n for n in os.listdir(a) if n.endswith(".safetensors"))
    if names != sorted(n for n in os.listdir(b) if n.endswith(".safetensors")) or not names:
        return "rank files differ: %s vs %s" % (names, sorted(os.listdir(b)))
    for n in names:
        with safe_open(os.path.join(a, n), "pt") as f, safe_open(os.path.join(b, n), "pt") as g:
            if f.metadata() != g.metadata() or sorted(f.keys()) != sorted(g.keys()):
                return "%s: metadata or tensor names differ" % n
            for k in f.keys():
                x, y = f.get_tensor(k), g.get_tensor(k)
                if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(raw(x), raw(y)):
                    return "%s: tensor %s differs" % (n, k)
    return ""


def hostile(src, tmp):
    """The catalogue's damage (testdata/gen_dcp_fixtures.py) applied to the model's DCP."""
    sys.path.insert(0, os.path.join(tap.TOP, "testdata"))
    import gen_dcp_fixtures
    for name, damage, want in gen_dcp_fixtures.mutations("model.embed_tokens.weight"):
        d = os.path.join(tmp, "hostile-" + name)
        shutil.copytree(src, d)
        damage(d)
        out = os.path.join(tmp, "out-" + name)
        r = tpshard("split", d, "--tp", 2, "-o", out)
        report(r.returncode == 3 and want in r.stderr and not os.path.exists(out),
               "dcp hostile %s: split exits 3 (%s), nothing written" % (name, want),
               "rc %d: %s" % (r.returncode, r.stderr))


def main():
    import safetensors.torch
    import torch.distributed.checkpoint as dcp
    if tap.tpshard_missing():
        return 1
    tmp = tempfile.mkdtemp(prefix="tps-dcp-")
    try:
        m = model()
        truth = {k: v.clone() for k, v in m.state_dict().items()}
        st = os.path.join(tmp, "st")
        m.save_pretrained(st, safe_serialization=True)
        one, two = os.path.join(tmp, "dcp1"), os.path.join(tmp, "dcp2")
        dcp.save(m.state_dict(), checkpoint_id=one)  # no process group: one process
        store = os.path.join(tmp, "store")
        procs = [subprocess.Popen([sys.executable, __file__, "--save-rank", str(r), two, store]) for r in range(2)]
        codes = [p.wait(timeout=300) for p in procs]
        if not report(codes == [0, 0], "two gloo processes save an FSDP2-style DCP", "exit codes %s" % codes):
            return tap.status()
        distcp = sorted(n for n in os.listdir(two) if n.endswith(".distcp"))
        report(len(distcp) == 2, "the two-process DCP spreads its chunks over two .distcp files", distcp)
        for d in (one, two):
            shutil.copy(os.path.join(st, "config.json"), d)
        r = run("inspect", two)
        report(r.returncode == 0 and "dcp, 2 files" in r.stdout and "model.embed_tokens.weight" in r.stdout,
               "inspect reads the two-process DCP under its saved names", r.stdout + r.stderr)
        for tp in (2, 4):
            ref = os.path.join(tmp, "st-tp%d" % tp)
            run("split", st, "--tp", tp, "-o", ref)
            for name, src in (("one process", one), ("two processes", two)):
                out = os.path.join(tmp, "%s-tp%d" % (os.path.basename(src), tp))
                r = run("split", src, "--tp", tp, "-o", out)
                if r.returncode:
                    continue
                diff = same_files(ref, out)
                report(not diff, "split of the DCP (%s) at tp %d equals the split of the safetensors, tensor for tensor, "
                       "byte for byte"
                       % (name, tp), diff)
        r = run("plan", two, "--tp", 4)
        report(r.returncode == 0, "plan accepts a DCP directory", r.stderr)
        r = run("verify", os.path.join(tmp, "dcp2-tp2"), "--source", two)
        report(r.returncode == 0, "verify --source reads a DCP directory", r.stdout + r.stderr)
        merged = os.path.join(tmp, "merged") + "/"
        if run("merge", os.path.join(tmp, "dcp2-tp4"), "-o", merged).returncode == 0:
            files = [os.path.join(merged, n) for n in os.listdir(merged) if n.endswith(".safetensors")]
            got = {}
            for f in files:
                got.update(safetensors.torch.load_file(f))
            bad = [k for k in truth if k not in got or got[k].dtype != truth[k].dtype or
                   not torch.equal(raw(got[k]), raw(truth[k]))]
            report(not bad and len(got) == len(truth), "merge of the DCP's tp 4 split equals torch's state dict bit for bit",
                   "differ: %s; %d vs %d tensors" % (bad[:5], len(got), len(truth)))
        hostile(two, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tap.status()


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--save-rank":
        save_fsdp2(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    sys.exit(main())
