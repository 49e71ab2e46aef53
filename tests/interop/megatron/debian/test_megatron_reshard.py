"""Megatron-LM legacy checkpoints resharded, merged, checked and verified by tpshard, against
megatron_fixture.py (Megatron's saver and loader rules in torch, independent of tpshard).

For each case a random GPT model's FULL tensors (Megatron-Core global names) are written by
megatron_fixture.write_checkpoint at the source tp x pp; `tpshard reshard` writes the new
tp x pp; every output file is read by plain torch.load and must equal, key by key, the file
write_checkpoint gives for the same full model at the new tp x pp: tensors, _extra_state None
entries, the args (tensor/pipeline sizes and padded_vocab_size updated, everything else kept),
checkpoint_version and iteration, the tracker, the iteration directory holding only the rank
directories, no optimizer or RNG state.  TP 4 -> 8 with a vocabulary whose TP-4 padding is no
multiple of 8 x 128-equivalent re-pads from the true size (Megatron's converter keeps the old
rows).  merge equals the full tensors; check passes and catches a flipped byte; verify passes
and fails a set whose qkv was cut blocked (vLLM's order) instead of grouped, also at tp 8 and 16
over 4 query groups (plain row chunks of a group's block) where two swapped ranks fail too;
refusals: a tp the query groups refuse, args missing a field, a truncated rank file."""
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import torch

import megatron_fixture as mf
import tap
from tap import report, tpshard

TRACKER = "latest_checkpointed_iteration.txt"


def compare_dirs(out, exp):
    """Every difference between two Megatron checkpoints, as lines (none: equal)."""
    bad = []
    _, oit = mf.find_iter_dir(out)
    _, eit = mf.find_iter_dir(exp)
    if not os.path.isdir(oit):
        return ["no iteration directory %s" % oit]
    if sorted(os.listdir(oit)) != sorted(os.listdir(eit)):
        bad.append("the iteration directory holds %s, expected %s" % (sorted(os.listdir(oit)), sorted(os.listdir(eit))))
    if open(os.path.join(out, TRACKER)).read().strip() != open(os.path.join(exp, TRACKER)).read().strip():
        bad.append("tracker differs")
    for d in sorted(os.listdir(eit)):
        p = os.path.join(oit, d, "model_optim_rng.pt")
        if not os.path.exists(p):
            bad.append("%s missing" % p)
            continue
        o, e = mf._load(p), mf._load(os.path.join(eit, d, "model_optim_rng.pt"))
        for k in ("checkpoint_version", "iteration"):
            if o.get(k) != e.get(k):
                bad.append("%s %s: %r, expected %r" % (d, k, o.get(k), e.get(k)))
        ka, kb = vars(o["args"]), vars(e["args"])
        diff = sorted(k for k in set(ka) | set(kb) if ka.get(k, "<absent>") != kb.get(k, "<absent>"))
        if diff:
            bad.append("%s args differ: %s" % (d, [(k, ka.get(k, "<absent>"), kb.get(k, "<absent>")) for k in diff]))
        om, em = o["model"], e["model"]
        if list(om) != list(em):
            bad.append("%s model keys %s, expected %s" % (d, list(om), list(em)))
        for k in em:
            if k not in om:
                continue
            a, b = om[k], em[k]
            if a is None or b is None:
                if a is not b:
                    bad.append("%s %s: %r, expected %r" % (d, k, a, b))
            elif a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
                bad.append("%s %s: %s %s, expected %s %s" % (d, k, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape)))
        for k in ("optimizer", "rng_state", "opt_param_scheduler"):
            if k in o:
                bad.append("%s: %s written" % (d, k))
    return bad


def model(**fields):
    args = mf.megatron_args(**fields)
    return args, mf.random_full(args, seed=3)


def write(d, full, args, tp, pp, **kw):
    mf.write_checkpoint(d, full, args, tp, pp, **kw)
    return d


def read_safetensors(path):
    from safetensors.torch import load_file
    return load_file(path)


def reshard_case(tmp, name, fields, src, dst, extra_args=(), src_kw=None, dst_kw=None):
    args, full = model(**fields)
    s = write(os.path.join(tmp, name + "-src"), full, args, *src, **(src_kw or {}))
    e = write(os.path.join(tmp, name + "-exp"), full, args, *dst, **(dst_kw or {}))
    out = os.path.join(tmp, name + "-out")
    r = tpshard("reshard", s, "--tp", dst[0], "--pp", dst[1], *extra_args, "-o", out)
    if not report(r.returncode == 0, "reshard %s: tp %d x pp %d -> tp %d x pp %d" % ((name,) + src + dst),
                  r.stdout + r.stderr):
        return None
    bad = compare_dirs(out, e)
    report(not bad, "reshard %s: every file torch.load reads equals megatron_fixture's at the new tp x pp" % name,
           "\n".join(bad[:20]))
    return out, full, args


def flip_tensor_byte(path):
    """Flips one byte inside the first tensor record of a torch zip."""
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if "/data/" in i.filename and i.file_size > 0)
    with open(path, "r+b") as f:
        f.seek(info.header_offset)
        hdr = f.read(30)
        n, m = int.from_bytes(hdr[26:28], "little"), int.from_bytes(hdr[28:30], "little")
        at = info.header_offset + 30 + n + m
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))


def blocked_qkv_writer(args):
    """A write_checkpoint whose linear_qkv shards are vLLM's blocked [q_r; k_r; v_r] (a wrong
    cut for Megatron, whose ranks hold grouped [q_g; k_g; v_g] per query group)."""
    a = mf._ns(args)
    nq, ng, hd = a.num_attention_heads, a.num_query_groups, a.kv_channels
    real = mf.cut

    def cut(name, t, tp, args_):
        if ".linear_qkv." not in name:
            return real(name, t, tp, args_)
        g = t.reshape((ng, (nq // ng + 2) * hd) + tuple(t.shape[1:]))
        q = g[:, : nq // ng * hd].reshape((-1,) + tuple(t.shape[1:]))
        k = g[:, nq // ng * hd: nq // ng * hd + hd].reshape((-1,) + tuple(t.shape[1:]))
        v = g[:, nq // ng * hd + hd:].reshape((-1,) + tuple(t.shape[1:]))
        return [torch.cat([qc, kc, vc], 0).contiguous()
                for qc, kc, vc in zip(torch.chunk(q, tp), torch.chunk(k, tp), torch.chunk(v, tp))]
    return cut


def write_blocked(d, full, args, tp):
    """write_checkpoint at tp x 1 with blocked_qkv_writer's wrong qkv cut."""
    real_cut = mf.cut
    mf.cut = blocked_qkv_writer(args)
    try:
        return write(d, full, args, tp, 1)
    finally:
        mf.cut = real_cut


def verify_above_groups(tmp, fields):
    """tp 8 and 16 over 4 query groups: each rank a plain row chunk of its group's qkv block,
    which verify computes as Megatron-Core does (the qkv activations all-gathered among the
    group's ranks).  Weights scaled so that float32 rounding stays far below the bound."""
    from safetensors.torch import save_file
    args, full = model(**fields)
    full = {k: (v if "layernorm" in k else v * 0.15) for k, v in full.items()}
    src = os.path.join(tmp, "wide-full.safetensors")
    save_file({k: v.contiguous() for k, v in full.items()}, src)
    for tp, pp, extras in [(8, 1, ((), ("--whole-model",))), (16, 1, ((), ("--whole-model",))),
                           (8, 2, ((),))]:
        d = write(os.path.join(tmp, "v-wide-tp%d-pp%d" % (tp, pp)), full, args, tp, pp)
        for extra in extras:
            r = tpshard("verify", d, "--source", src, *extra)
            report(r.returncode == 0, "verify %s passes at tp %d x pp %d > 4 query groups (qkv row chunks, "
                   "activations all-gathered)" % (" ".join(extra), tp, pp), r.stdout + r.stderr)
    bad = write_blocked(os.path.join(tmp, "v-wide-blocked"), full, args, 8)
    r = tpshard("verify", bad, "--source", src)
    report(r.returncode == 1, "verify fails tp 8 > 4 groups whose qkv chunks come from a blocked [Q; K; V] "
           "(same shapes), exit 1", r.stdout + r.stderr)
    swapped = os.path.join(tmp, "v-wide-tp8-pp1")
    it = os.path.join(swapped, "iter_0000001")
    os.rename(os.path.join(it, "mp_rank_02"), os.path.join(it, "x"))
    os.rename(os.path.join(it, "mp_rank_03"), os.path.join(it, "mp_rank_02"))
    os.rename(os.path.join(it, "x"), os.path.join(it, "mp_rank_03"))
    r = tpshard("verify", swapped, "--source", src)
    report(r.returncode == 1, "verify fails tp 8 with two ranks of one query group swapped, exit 1",
           r.stdout + r.stderr)


def verify_moe_refused(tmp, fields):
    """A Megatron MoE set (router, SequentialMLP local_experts) reshards, and verify refuses it
    by name (exit 3) instead of failing on a missing linear_fc1."""
    args, full = model(**dict(fields, num_experts=2, moe_router_topk=1))
    H, F = args["hidden_size"], args["ffn_hidden_size"]
    moe = {}
    for k, v in full.items():
        if ".mlp.linear_fc1." in k or ".mlp.linear_fc2." in k:
            layer = k[: k.index(".mlp.") + 5]
            if k.endswith("linear_fc1.weight"):
                moe[layer + "router.weight"] = torch.randn(2, H)
                for e in range(2):
                    moe[layer + "experts.local_experts.%d.linear_fc1.weight" % e] = torch.randn(2 * F, H)
                    moe[layer + "experts.local_experts.%d.linear_fc2.weight" % e] = torch.randn(H, F)
            continue
        moe[k] = v
    d = write(os.path.join(tmp, "moe-tp2"), moe, args, 2, 1)
    r = tpshard("reshard", d, "--tp", 1, "-o", os.path.join(tmp, "moe-tp1"))
    report(r.returncode == 0, "reshard of a Megatron MoE set (SequentialMLP local_experts)", r.stdout + r.stderr)
    r = tpshard("verify", d)
    report(r.returncode == 3 and "verify does not compute Megatron MoE layers yet" in r.stderr,
           "verify refuses a Megatron MoE set by name (exit 3)", r.stdout + r.stderr)


def force_onto_megatron(tmp, src):
    """reshard -f replaces a Megatron checkpoint tpshard wrote (its manifest names files inside
    the rank directories), and nothing else: a foreign file in a rank directory is refused."""
    out = os.path.join(tmp, "force")
    r = tpshard("reshard", src, "--tp", 2, "--pp", 2, "-o", out)
    report(r.returncode == 0, "reshard for -f", r.stdout + r.stderr)
    r = tpshard("reshard", src, "--tp", 4, "--pp", 1, "-f", "-o", out)
    it = os.path.join(out, "iter_0000001")
    report(r.returncode == 0 and sorted(os.listdir(it)) == ["mp_rank_%02d" % i for i in range(4)],
           "reshard -f replaces an earlier Megatron output (tp 2 x pp 2 -> tp 4)", r.stdout + r.stderr)
    stray = os.path.join(it, "mp_rank_01", "notes.txt")
    open(stray, "w").close()
    r = tpshard("reshard", src, "--tp", 1, "--pp", 1, "-f", "-o", out)
    report(r.returncode == 3 and "notes.txt" in r.stderr and os.path.exists(stray),
           "reshard -f refuses a Megatron output holding a file tpshard did not write, naming it", r.stdout + r.stderr)


def main():
    if not os.access(tap.TPSHARD, os.X_OK):
        print("not ok - tpshard binary missing at " + tap.TPSHARD)
        return 1
    tmp = tempfile.mkdtemp(prefix="tps-megatron-")
    try:
        gqa = dict(num_layers=4, hidden_size=32, num_attention_heads=8, num_query_groups=4, kv_channels=4,
                   ffn_hidden_size=32, vocab_size=100, make_vocab_size_divisible_by=4)
        reshard_case(tmp, "2to1", gqa, (2, 1), (1, 1))
        reshard_case(tmp, "2to4", gqa, (2, 1), (4, 1))
        reshard_case(tmp, "4to2", gqa, (4, 1), (2, 1))
        reshard_case(tmp, "tp2pp2-tp4pp1", gqa, (2, 2), (4, 1))
        reshard_case(tmp, "tp1pp1-tp2pp2", gqa, (1, 1), (2, 2))
        reshard_case(tmp, "tied-tp1pp1-tp2pp2", dict(gqa, untie_embeddings_and_output_weights=False), (1, 1), (2, 2))
        reshard_case(tmp, "tied-tp2pp2-tp4pp1", dict(gqa, untie_embeddings_and_output_weights=False), (2, 2), (4, 1))
        reshard_case(tmp, "pp-layers", gqa, (2, 1), (2, 2), ("--pp-layers", "1,3"), dst_kw={"pp_layers": [1, 3]})
        reshard_case(tmp, "layernorm-gelu-bias", dict(gqa, normalization="LayerNorm", swiglu=False,
                                                      add_bias_linear=True, position_embedding_type="learned_absolute"),
                     (2, 2), (4, 1))
        # More ranks than query groups (Megatron-Core >= 0.16): plain row chunks of a group's block.
        wide = dict(gqa, num_attention_heads=16, num_query_groups=4, hidden_size=64)
        reshard_case(tmp, "2to16", wide, (2, 1), (16, 1))
        # TP 4 -> 8: 100 rows pad to 112 at tp 4 (4 x 4 x 7), no multiple of 4 x 8; re-padded to 128.
        mha8 = dict(gqa, num_attention_heads=8, num_query_groups=8)
        got8 = reshard_case(tmp, "4to8-vocab", mha8, (4, 1), (8, 1))
        if got8:
            emb = mf._load(os.path.join(got8[0], "iter_0000001", "mp_rank_07", "model_optim_rng.pt"))
            w = emb["model"]["embedding.word_embeddings.weight"]
            report(w.shape[0] == 16 and bool((w[-12:] == 0).all()),
                   "4to8-vocab: rank 7 holds 16 rows of the 128, its last 12 zero padding", tuple(w.shape))

        # merge: the full tensors, vocabulary padding removed.
        args, full = model(**gqa)
        src = write(os.path.join(tmp, "m-src"), full, args, 2, 2)
        merged = os.path.join(tmp, "merged.safetensors")
        r = tpshard("merge", src, "-o", merged)
        if report(r.returncode == 0, "merge of a tp 2 x pp 2 Megatron checkpoint", r.stdout + r.stderr):
            got = read_safetensors(merged)
            bad = [k for k in full if k not in got or not torch.equal(got[k], full[k])]
            bad += [k for k in got if k not in full]
            report(not bad, "merge equals the fixture's full tensors (global names, true vocabulary)", bad[:10])

        # check: a tpshard-written set proves its CRCs, and a flipped byte is found.
        out = os.path.join(tmp, "chk")
        r = tpshard("reshard", src, "--tp", 4, "--pp", 1, "-o", out)
        report(r.returncode == 0, "reshard for check", r.stdout + r.stderr)
        r = tpshard("check", out)
        report(r.returncode == 0, "check passes on a tpshard-written Megatron checkpoint", r.stdout + r.stderr)
        force_onto_megatron(tmp, src)
        r = tpshard("check", src)
        report(r.returncode == 0, "check passes on a Megatron checkpoint tpshard did not write", r.stdout + r.stderr)
        flip_tensor_byte(os.path.join(out, "iter_0000001", "mp_rank_02", "model_optim_rng.pt"))
        r = tpshard("check", out)
        report(r.returncode == 1 and "mp_rank_02" in r.stdout + r.stderr,
               "check finds a flipped byte in a rank file (exit 1, names the file)", r.stdout + r.stderr)

        # verify: passes on a correct set, fails on a blocked qkv cut.
        full_path = os.path.join(tmp, "full.safetensors")
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in full.items()}, full_path)
        good = write(os.path.join(tmp, "v-good"), full, args, 2, 2)
        for extra in ((), ("--whole-model",)):
            r = tpshard("verify", good, "--source", full_path, *extra)
            report(r.returncode == 0, "verify %s passes on a tp 2 x pp 2 Megatron checkpoint" % " ".join(extra),
                   r.stdout + r.stderr)
        bad_set = write_blocked(os.path.join(tmp, "v-blocked"), full, args, 2)
        r = tpshard("verify", bad_set, "--source", full_path)
        report(r.returncode == 1, "verify fails a set whose qkv was cut blocked (vLLM's order), exit 1",
               r.stdout + r.stderr)
        verify_above_groups(tmp, wide)
        verify_moe_refused(tmp, gqa)

        # Refusals.
        r = tpshard("reshard", src, "--tp", 3, "-o", os.path.join(tmp, "r3"))
        report(r.returncode == 3 and "group" in r.stderr and not os.path.exists(os.path.join(tmp, "r3")),
               "reshard to tp 3 with 4 query groups is refused naming the groups, nothing written",
               r.stdout + r.stderr)
        a2 = mf.megatron_args(**gqa)
        del a2["hidden_size"]
        nohid = write(os.path.join(tmp, "nohid"), full, a2, 2, 1)
        r = tpshard("reshard", nohid, "--tp", 1, "-o", os.path.join(tmp, "r-nohid"))
        report(r.returncode == 3 and "hidden_size" in r.stderr, "args without hidden_size are refused naming it",
               r.stdout + r.stderr)
        trunc = os.path.join(tmp, "trunc")
        shutil.copytree(src, trunc)
        p = os.path.join(trunc, "iter_0000001", "mp_rank_01_001", "model_optim_rng.pt")
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) // 2)
        r = tpshard("reshard", trunc, "--tp", 1, "-o", os.path.join(tmp, "r-trunc"))
        report(r.returncode == 3 and "mp_rank_01_001" in r.stderr, "a truncated rank file is refused naming it",
               r.stdout + r.stderr)
        r = tpshard("reshard", src, "--tp", 2, "--pp", 3, "-o", os.path.join(tmp, "r-pp3"))
        report(r.returncode == 2 and "--pp-layers" in r.stderr, "--pp 3 of 4 layers asks for --pp-layers (exit 2)",
               r.stdout + r.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
