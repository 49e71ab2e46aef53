"""Reading Megatron-LM legacy checkpoints (formats/megatron/megatron_read.h) against torch.

Fixtures are written by megatron_fixture.py (torch alone, the specification's rules) at
several TP x PP grids, Megatron-Core and legacy names, every _extra_state kind, with and
without optimizer and RNG state, release and numbered iterations.  For each:
  - what the reader indexed (build/tests/test_formats_megatron_read --dump) equals, rank file by rank
    file, torch.load's model tensors (legacy nesting mapped to Megatron-Core names, layer
    numbers local), byte for byte, and the _extra_state keys the file holds;
  - args and checkpoint_version as JSON equal an independent Python encoding of the contract;
  - `tpshard inspect --json` reports the grid, iteration and model args the fixture wrote.
Refusals: hostile pickles (GLOBAL os.system / builtins.eval / subprocess.Popen, also by
STACK_GLOBAL and NEWOBJ) exit 3 and create nothing; a missing rank directory, an
expert-parallel directory, virtual pipeline chunks, bad trackers and rank files whose args
disagree exit 3 naming what is wrong.
"""
import argparse
import enum
import io
import json
import math
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

import tap

try:
    import torch
    import megatron_fixture as mf
except Exception as e:  # noqa: BLE001
    print("skip - test_megatron_read: torch cannot be imported (%s)" % e)
    sys.exit(0)

DUMP = os.path.join(tap.TOP, "build", "tests", "test_formats_megatron_read")
DT = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.uint8: "U8"}


def ref_json(v):
    """The contract's JSON encoding of a pickled value, written independently of tpshard."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, enum.Enum):
        return {"$reduce": ["%s.%s" % (type(v).__module__, type(v).__qualname__), [ref_json(v.value)]]}
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return {"$float": "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"}
    if isinstance(v, torch.dtype):
        return {"$dtype": str(v)[len("torch."):]}
    if isinstance(v, argparse.Namespace):
        return {"$newobj": ["argparse.Namespace", [], {k: ref_json(x) for k, x in vars(v).items()}]}
    if isinstance(v, pathlib.PurePosixPath):
        return {"$reduce": ["pathlib.PosixPath", list(v.parts)]}
    if isinstance(v, tuple):
        return {"$tuple": [ref_json(x) for x in v]}
    if isinstance(v, list):
        return [ref_json(x) for x in v]
    if isinstance(v, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in v):
            return {k: ref_json(x) for k, x in v.items()}
        return {"$dict": [[ref_json(k), ref_json(x)] for k, x in v.items()]}
    raise TypeError("no reference encoding for %r" % (v,))


def same(a, b):
    """Equality that keeps int and float apart (3 != 3.0), as the encoding does."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def dump(path):
    p = subprocess.run([DUMP, "--dump", path], capture_output=True, text=True)
    if p.returncode:
        return None, p.stderr
    files, cur, out = {}, None, {}
    for line in p.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "file":
            cur = {"tensors": [], "extra": []}
            files[tuple(int(x) for x in rest.split())] = cur
        elif kind == "tensor":
            name, dt, shape, hexdata = rest.split(" ")
            cur["tensors"].append((name, dt, tuple(int(x) for x in shape.split(",")) if shape else (), hexdata))
        elif kind == "extra":
            cur["extra"].append(rest)
        else:
            out[kind] = rest
    out["files"] = files
    return out, ""


def torch_view(path):
    """(tensors [(name, dtype, shape, hex)], extra keys) of one rank file, as Megatron-Core
    names with local layer numbers, from torch.load."""
    sd = mf._load(path)
    model = sd["model"]
    if "language_model" in model:
        model = mf._from_legacy(model)
    tensors, extra = [], []
    for k, v in model.items():
        if k.endswith("._extra_state"):
            extra.append(k)
        elif k.endswith("rotary_pos_emb.inv_freq"):
            continue
        else:
            b = v.contiguous().view(torch.uint8).numpy().tobytes() if v.dtype == torch.bfloat16 else v.contiguous().numpy().tobytes()
            tensors.append((k, DT[v.dtype], tuple(v.shape), b.hex()))
    return sd, tensors, extra


def rank_path(it, r, p, pp):
    return os.path.join(it, mf.rank_dir_name(r, p, pp), "model_optim_rng.pt")


def check_fixture(tmp, label, tp, pp, **kw):
    layers = kw.pop("layers", 4)
    untie = kw.pop("untie", True)
    dtype = kw.pop("dtype", torch.float32)
    extra_args = kw.pop("extra_args", {})
    args = mf.megatron_args(num_layers=layers, vocab_size=37, untie_embeddings_and_output_weights=untie,
                            params_dtype=dtype, bf16=dtype == torch.bfloat16, **extra_args)
    full = mf.random_full(args, seed=tp * 10 + pp, dtype=dtype)
    d = os.path.join(tmp, label.replace(" ", "_").replace(",", ""))
    it = mf.write_checkpoint(d, full, args, tp, pp, **kw)
    got, why = dump(d)
    if not tap.report(got is not None, label + ": the reader opens it", why):
        return
    ok = got["grid"] == "%d %d" % (tp, pp)
    detail = "grid %s" % got["grid"]
    sd0 = None
    for p in range(pp):
        for r in range(tp):
            sd, tensors, extra = torch_view(rank_path(it, r, p, pp))
            sd0 = sd0 or sd
            mine = got["files"].get((r, p))
            if mine is None or mine["tensors"] != tensors or mine["extra"] != extra:
                ok = False
                mt = [t[:3] for t in mine["tensors"]] if mine else None
                detail += "\nrank %d,%d: tpshard %s / %s\n  torch %s / %s" % (r, p, mt, mine and mine["extra"],
                                                                            [t[:3] for t in tensors], extra)
    tap.report(ok, label + ": every rank file's model tensors and _extra_state keys equal torch.load's", detail)
    args_ok = same(json.loads(got["args"]), ref_json(sd0["args"]))
    tap.report(args_ok and same(json.loads(got["version"]), 3.0),
               label + ": args and checkpoint_version as JSON equal the reference encoding",
               got["args"][:2000] + "\n" + json.dumps(ref_json(sd0["args"]))[:2000])
    release = kw.get("iteration") == "release"
    want_iter = 0 if release else kw.get("iteration", 1)
    tap.report(got["iteration"] == str(want_iter) and got["legacy"] == str(int(kw.get("legacy_names", False))) and
               got["dir"] == "%s %s %d" % (d, "release" if release else "iter_%07d" % want_iter, int(release)),
               label + ": iteration, naming and directories", "%s %s %s" % (got["iteration"], got["legacy"], got["dir"]))
    # inspect --json, on the tracker directory and on the iteration directory (trailing slash)
    for path in (d, it + "/"):
        pr = tap.tpshard("inspect", path, "--json")
        try:
            j = json.loads(pr.stdout)
        except ValueError:
            tap.report(False, label + ": inspect --json " + path, pr.stdout + pr.stderr)
            continue
        a = sd0["args"]
        m = j["model"]
        good = (j["tp"] == tp and j["pp"] == pp and j["iteration"] == want_iter and j["release"] == release and
                j["checkpoint_version"] == 3.0 and m["num_layers"] == a.num_layers and m["hidden_size"] == a.hidden_size and
                m["num_attention_heads"] == a.num_attention_heads and m["num_query_groups"] == a.num_query_groups and
                m["kv_channels"] == a.kv_channels and m["ffn_hidden_size"] == a.ffn_hidden_size and
                m["swiglu"] == a.swiglu and m["vocab_size"] == 37 and m["padded_vocab_size"] == a.padded_vocab_size and
                m["untie_embeddings_and_output_weights"] == untie and m["normalization"] == a.normalization and
                m["position_embedding_type"] == a.position_embedding_type and
                m["params_dtype"] == {"$dtype": str(dtype)[6:]} and len(j["files"]) == tp * pp)
        for f in j["files"]:
            mine = got["files"][(f["tp_rank"], f["pp_rank"])]
            good = good and [(t["name"], tuple(t["shape"])) for t in f["tensors"]] == [(t[0], t[2]) for t in mine["tensors"]]
            good = good and f["extra_state"] == mine["extra"]
        tap.report(good, label + ": inspect --json %s reports the grid, iteration and model args" % path,
                   json.dumps({k: j[k] for k in j if k != "args"})[:3000])
    human = tap.tpshard("inspect", d)
    tap.report(human.returncode == 0 and "tp %d x pp %d" % (tp, pp) in human.stdout and
               "padded vocab %d" % sd0["args"].padded_vocab_size in human.stdout,
               label + ": inspect prints the summary", human.stdout[:1500] + human.stderr)
    # the fixture itself: Megatron's loader rules give back the full model
    _, back = mf.read_checkpoint(d, trim_vocab=True)
    tap.report(list(back) == list(full) and all(torch.equal(back[k], full[k]) for k in full),
               label + ": (fixture) Megatron's loader rules give back the full tensors")


def write_zip_pickle(path, pkl):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("model_optim_rng/data.pkl", pkl)
        z.writestr("model_optim_rng/version", "3\n")


def ustr(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def hostile(tmp):
    touch = "touch tpshard_pwned_marker"
    cases = {
        "os_system": b"\x80\x02cos\nsystem\n(" + ustr(touch) + b"tR.",
        "builtins_eval": b"\x80\x02cbuiltins\neval\n(" + ustr("__import__('os').system('%s')" % touch) + b"tR.",
        "subprocess_popen": b"\x80\x02csubprocess\nPopen\n((" + ustr("touch") + ustr("tpshard_pwned_marker") + b"ltR.",
        "stack_global": b"\x80\x04\x95\x30\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94\x93\x94(" + ustr(touch) + b"tR.",
        "newobj_popen": b"\x80\x02csubprocess\nPopen\n(" + ustr(touch) + b"t\x81.",
        # the refused global sits inside an otherwise normal Megatron top-level dict
        "in_args": b"\x80\x02}(" + ustr("args") + b"cposix\nsystem\n(" + ustr(touch) + b"tR" + ustr("model") + b"}u.",
    }
    want = {"os_system": "os.system", "builtins_eval": "builtins.eval", "subprocess_popen": "subprocess.Popen",
            "stack_global": "os.system", "newobj_popen": "subprocess.Popen", "in_args": "posix.system"}
    for name, pkl in cases.items():
        d = os.path.join(tmp, "hostile_" + name)
        write_zip_pickle(os.path.join(d, "iter_0000001", "mp_rank_00", "model_optim_rng.pt"), pkl)
        with open(os.path.join(d, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("1")
        cwd = os.path.join(tmp, "cwd_" + name)
        os.makedirs(cwd)
        p = subprocess.run([tap.TPSHARD, "inspect", d], capture_output=True, text=True, cwd=cwd)
        tap.report(p.returncode == 3 and "refused GLOBAL " + want[name] in p.stderr and "pickle offset" in p.stderr and
                   not os.listdir(cwd) and not os.path.exists(os.path.join(d, "tpshard_pwned_marker")),
                   "hostile model_optim_rng.pt (%s): exit 3 naming %s, nothing created" % (name, want[name]),
                   "exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))


def shared_dict_bomb(tmp):
    """A model dict whose 30 keys all name one shared dict, 12 levels deep (30^12 paths from a
    5 KB pickle): refused by the walk's visit budget, promptly."""
    p = b"\x80\x02}q\x000"
    for lvl in range(1, 13):
        p += b"}r" + struct.pack("<I", lvl) + b"("
        for i in range(30):
            p += ustr("k%d" % i) + b"j" + struct.pack("<I", lvl - 1)
        p += b"u0"
    p += b"}(" + ustr("model") + b"j" + struct.pack("<I", 12) + b"u."
    d = os.path.join(tmp, "bomb")
    write_zip_pickle(os.path.join(d, "iter_0000001", "mp_rank_00", "model_optim_rng.pt"), p)
    with open(os.path.join(d, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("1")
    try:
        r = subprocess.run([tap.TPSHARD, "inspect", d], capture_output=True, text=True, timeout=60)
        tap.report(r.returncode == 3 and "shared containers too many times" in r.stderr,
                   "a model dict of shared dicts (30^12 paths) is refused (exit 3)", r.stderr)
    except subprocess.TimeoutExpired:
        tap.report(False, "a model dict of shared dicts (30^12 paths) is refused (exit 3)", "still running after 60 s")


def refusals(tmp):
    args = mf.megatron_args(num_layers=2, vocab_size=37)
    full = mf.random_full(args)

    def fresh(name, tp=2, pp=2, **kw):
        d = os.path.join(tmp, name)
        mf.write_checkpoint(d, full, args, tp, pp, **kw)
        return d

    def refused(what, path, fragment):
        p = tap.tpshard("inspect", path)
        tap.report(p.returncode == 3 and fragment in p.stderr, what, "exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))

    d = fresh("missing_rank")
    shutil.rmtree(os.path.join(d, "iter_0000001", "mp_rank_01_000"))
    refused("a missing rank directory is named (exit 3)", d, "mp_rank_01_000 is missing")
    d = fresh("missing_last_rank", pp=1)
    shutil.rmtree(os.path.join(d, "iter_0000001", "mp_rank_01"))
    refused("a missing last rank directory is found from args (exit 3)", d,
            "args.tensor_model_parallel_size is 2 but the rank directories span tp 1")
    d = fresh("expert_parallel")
    os.rename(os.path.join(d, "iter_0000001", "mp_rank_01_001"), os.path.join(d, "iter_0000001", "mp_rank_01_001_001"))
    refused("an expert-parallel rank directory is refused by name (exit 3)", d, "mp_rank_01_001_001: an expert-parallel")
    for text, frag in (("0", "iteration 0"), ("abc", "'abc' is neither"), ("7", "names iter_0000007, but")):
        d = fresh("tracker_" + text, tp=1, pp=1)
        with open(os.path.join(d, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(text)
        refused("tracker %r is refused (exit 3)" % text, d, frag)
    # virtual pipeline: model0/model1 instead of model
    d = fresh("virtual_pp", tp=1, pp=1)
    f = rank_path(os.path.join(d, "iter_0000001"), 0, 0, 1)
    sd = mf._load(f)
    sd["model0"] = sd.pop("model")
    sd["model1"] = {}
    mf.torch_save(sd, f)
    refused("virtual pipeline chunks (model0, ...) are refused by name (exit 3)", d, "holds 'model0': a virtual pipeline")
    # rank files whose args disagree on the model
    d = fresh("args_disagree", pp=1)
    f = rank_path(os.path.join(d, "iter_0000001"), 1, 0, 1)
    sd = mf._load(f)
    sd["args"].hidden_size = 32
    mf.torch_save(sd, f)
    refused("rank files whose args disagree are refused naming the field (exit 3)", d,
            "args.hidden_size differs between rank files: 16 in")
    # a rank that differs only in args.rank (Megatron saves each process's own) is fine
    d = fresh("args_rank_differs", pp=1)
    f = rank_path(os.path.join(d, "iter_0000001"), 1, 0, 1)
    sd = mf._load(f)
    sd["args"].rank = 1
    mf.torch_save(sd, f)
    p = tap.tpshard("inspect", d)
    tap.report(p.returncode == 0, "rank files differing only in args.rank are read", p.stderr)
    # a distributed checkpoint's metadata.json that names no backend (torch_dist is read:
    # tests/interop/megatron/real/megatron_real_dist.py)
    d = fresh("torch_dist", tp=1, pp=1)
    open(os.path.join(d, "iter_0000001", "metadata.json"), "w").write("{}")
    open(os.path.join(d, "iter_0000001", "common.pt"), "w").write("")
    refused("a metadata.json without sharded_backend is refused (exit 3)", d, 'no "sharded_backend" string')


def hf_conversion():
    """hf_llama_to_megatron_full's grouped QKV, checked row by row against the spec's layout:
    group g's block is [q heads g*nq/ng .. (g+1)*nq/ng-1; k_g; v_g]; fc1 = [gate; up]."""
    H, nq, ng, hd, L, V, F = 16, 8, 2, 4, 2, 11, 24
    g = torch.Generator().manual_seed(3)
    sd = {"model.embed_tokens.weight": torch.randn(V, H, generator=g), "model.norm.weight": torch.randn(H, generator=g),
          "lm_head.weight": torch.randn(V, H, generator=g)}
    for i in range(L):
        p = "model.layers.%d." % i
        for n, shape in (("self_attn.q_proj.weight", (nq * hd, H)), ("self_attn.k_proj.weight", (ng * hd, H)),
                         ("self_attn.v_proj.weight", (ng * hd, H)), ("self_attn.q_proj.bias", (nq * hd,)),
                         ("self_attn.k_proj.bias", (ng * hd,)), ("self_attn.v_proj.bias", (ng * hd,)),
                         ("self_attn.o_proj.weight", (H, nq * hd)), ("mlp.gate_proj.weight", (F, H)),
                         ("mlp.up_proj.weight", (F, H)), ("mlp.down_proj.weight", (H, F)),
                         ("input_layernorm.weight", (H,)), ("post_attention_layernorm.weight", (H,))):
            sd[p + n] = torch.randn(*shape, generator=g)
    cfg = {"num_attention_heads": nq, "num_key_value_heads": ng, "hidden_size": H, "num_hidden_layers": L,
           "tie_word_embeddings": False}
    full = mf.hf_llama_to_megatron_full(sd, cfg)
    ok = True
    per = nq // ng
    B = (per + 2) * hd
    for i in range(L):
        p, o = "model.layers.%d.self_attn." % i, "decoder.layers.%d." % i
        for kind in ("weight", "bias"):
            qkv = full[o + "self_attention.linear_qkv." + kind]
            q, k, v = sd[p + "q_proj." + kind], sd[p + "k_proj." + kind], sd[p + "v_proj." + kind]
            ok = ok and qkv.shape[0] == ng * B
            for grp in range(ng):
                blk = qkv[grp * B:(grp + 1) * B]
                ok = ok and torch.equal(blk[:per * hd], q[grp * per * hd:(grp + 1) * per * hd])
                ok = ok and torch.equal(blk[per * hd:per * hd + hd], k[grp * hd:(grp + 1) * hd])
                ok = ok and torch.equal(blk[per * hd + hd:], v[grp * hd:(grp + 1) * hd])
        fc1 = full[o + "mlp.linear_fc1.weight"]
        ok = ok and torch.equal(fc1[:F], sd["model.layers.%d.mlp.gate_proj.weight" % i]) and \
            torch.equal(fc1[F:], sd["model.layers.%d.mlp.up_proj.weight" % i])
    ok = ok and torch.equal(full["output_layer.weight"], sd["lm_head.weight"])
    tap.report(ok, "(fixture) hf_llama_to_megatron_full groups QKV per query group as the spec lays it out")


def args_round_trip(tmp):
    """The contract's JSON is what the torch writer (mg-write's build/tests/tools/torch_write_tool)
    reads: args as this reader encodes them, pickled back by the writer, equal the Namespace
    torch.load gives (enums, PosixPath, Signals, dtypes, tuples included)."""
    tool = os.environ.get("TPS_TORCH_WRITE_TOOL") or os.path.join(tap.TOP, "build", "tests", "tools", "torch_write_tool")
    if not os.access(tool, os.X_OK):
        print("skip - args JSON round trip through the torch writer: %s is not built here" % tool)
        return
    import pickle
    for legacy in (False, True):
        d = os.path.join(tmp, "roundtrip_%d" % legacy)
        a = mf.megatron_args(num_layers=2)
        mf.write_checkpoint(d, mf.random_full(a), a, 2, 1, legacy_names=legacy, with_rng=True)
        got, why = dump(d)
        r = subprocess.run([tool, "pickle", got["args"]], capture_output=True, text=True) if got else None
        if not r or r.returncode:
            tap.report(False, "args JSON round trip through the torch writer", why + (r.stderr if r else ""))
            continue
        back = vars(pickle.loads(bytes.fromhex(r.stdout.strip())))
        orig = vars(mf._load(rank_path(os.path.join(d, "iter_0000001"), 0, 0, 1))["args"])
        bad = [k for k in orig if k not in back or back[k] != orig[k] or type(back[k]) is not type(orig[k])]
        tap.report(not bad and list(back) == list(orig),
                   "args JSON round trip through the torch writer gives the same Namespace (%s)" % ("legacy" if legacy else "mcore"),
                   "; ".join("%s: %r != %r" % (k, back.get(k), orig[k]) for k in bad))


def main():
    if not os.access(DUMP, os.X_OK) or not os.access(tap.TPSHARD, os.X_OK):
        print("not ok - tpshard or build/tests/test_formats_megatron_read missing (run make)")
        return 1
    tmp = tempfile.mkdtemp(prefix="tps_mgread_")
    try:
        check_fixture(tmp, "tp1 pp1 mcore", 1, 1)
        check_fixture(tmp, "tp2 pp2 mcore, optimizer and rng", 2, 2, with_optimizer=True, with_rng=True)
        check_fixture(tmp, "tp2 pp2 legacy names, tied", 2, 2, legacy_names=True, untie=False)
        check_fixture(tmp, "tp4 pp1 legacy, bytesio extra state, release", 4, 1, legacy_names=True,
                      extra_state="bytesio", iteration="release")
        check_fixture(tmp, "tp2 pp3 uneven stages, uint8 extra state, iteration 100", 2, 3, pp_layers=[1, 1, 2],
                      extra_state="uint8", iteration=100, with_rng=True)
        check_fixture(tmp, "tp1 pp2 empty extra state, tied, bf16", 1, 2, extra_state="empty", untie=False,
                      dtype=torch.bfloat16)
        check_fixture(tmp, "tp8 pp1 no extra state, biases, LayerNorm, learned positions", 8, 1, extra_state="absent",
                      extra_args=dict(add_bias_linear=True, normalization="LayerNorm",
                                      position_embedding_type="learned_absolute", num_query_groups=4,
                                      group_query_attention=False, kv_channels=4, num_attention_heads=4,
                                      ffn_hidden_size=32))
        hostile(tmp)
        shared_dict_bomb(tmp)
        refusals(tmp)
        hf_conversion()
        args_round_trip(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
