"""The torch archive writer (formats/torch/torch_write.h, formats/torch/pickle_write.h) against
torch and Python themselves; shared by test_torch_write.py (Debian torch 1.13, the full
unpickler) and torch2_torch_write.py (PyPI torch 2.5.1, weights_only=True with Megatron's safe
globals).

The writer is driven by build/tests/tools/torch_write_tool (or the one TPS_TORCH_WRITE_TOOL
names, e.g. a sanitizer build's): `pickle JSON` prints the pickle
of a JSON-encoded value (the issue-18 contract's encoding), `write IN.safetensors OUT ...`
streams IN's tensors into a torch archive.  The truth is independent of the C code:

  * pickle bytes: each JSON value is also decoded here, by this file's own reading of the
    contract (from_json), into the Python value, and pickle.dumps(value, protocol=2) must
    give the very bytes the tool printed (strings are interned so Python's by-identity
    memo reuses equal strings as the writer does);
  * archives: torch.load reads every file; tensors are bit-equal to the ones written into
    the safetensors input (bf16, f16, f32, i64, bool, 0-d, empty; float8 e4m3 via
    _rebuild_tensor_v3 where torch has it); the args Namespace, enums (Class(value)),
    dtypes, nested containers, inf/nan, big integers are what the JSON said; the state dict
    is an OrderedDict in the given order with None entries; Python's zipfile finds every
    entry under the root folder "model_optim_rng/", CRCs right (testzip), each record's data
    64-byte aligned; a counting file (OUT "-") has the real file's size and CRC; a file
    forced to ZIP64 (TPS_TORCH_ZIP64=1) has ZIP64 extras, a saturated end record, and loads;
  * data.pkl is byte-identical to what this torch's own torch.save pickles for the same
    dict (args Namespace, OrderedDict state dict with a None entry, every dtype above);
  * refusals: a global outside the allow-list, a tensor value in args, an unknown torch.*
    metadata key, a state dict order that misses a tensor: the tool fails, naming it.

The Megatron enum classes are stubs in a temporary package (megatron.core.enums.ModelType,
megatron.core.transformer.enums.AttnBackend), put first on sys.path.
"""
import argparse
import collections
import json
import math
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib

import torch

import tap
from tap import report

TOOL = os.environ.get("TPS_TORCH_WRITE_TOOL") or os.path.join(tap.TOP, "build", "tests", "tools", "torch_write_tool")

# Megatron's checkpoints hold enums as Class(value) (GLOBAL + REDUCE); Python 3.11's own
# Enum pickling goes through getattr, which weights_only refuses, so the stubs reduce by value.
REDUCE_BY_VALUE = "\n    def __reduce_ex__(self, proto):\n        return (self.__class__, (self._value_,))\n"

STUB_ENUMS = {
    "megatron/core/enums.py": "import enum\n\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n    retro_encoder = 2\n    retro_decoder = 3\n" + REDUCE_BY_VALUE,
    "megatron/core/transformer/enums.py": "import enum\n\nclass AttnBackend(enum.Enum):\n    flash = 1\n    fused = 2\n    unfused = 3\n    local = 4\n    auto = 5\n" + REDUCE_BY_VALUE,
}


def stub_megatron(root):
    """A package megatron.core with the two enums, first on sys.path; returns the classes."""
    for rel, text in STUB_ENUMS.items():
        path = os.path.join(root, rel)
        d = os.path.dirname(path)
        while d != root:
            os.makedirs(d, exist_ok=True)
            init = os.path.join(d, "__init__.py")
            if not os.path.exists(init):
                open(init, "w").close()
            d = os.path.dirname(d)
        with open(path, "w") as f:
            f.write(text)
    sys.path.insert(0, root)
    import importlib
    enums = importlib.import_module("megatron.core.enums")
    tenums = importlib.import_module("megatron.core.transformer.enums")
    return enums.ModelType, tenums.AttnBackend


def resolve(dotted):
    import importlib
    mod, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(mod), name)


def from_json(v):
    """The contract's JSON encoding read back into Python values, independently of tpshard."""
    if isinstance(v, str):
        return sys.intern(v)
    if isinstance(v, list):
        return [from_json(x) for x in v]
    if isinstance(v, dict):
        if len(v) == 1:
            (k, a), = v.items()
            if k == "$int":
                return int(a)
            if k == "$float":
                return float(a)
            if k == "$tuple":
                return tuple(from_json(x) for x in a)
            if k == "$dict":
                return {from_json(p[0]): from_json(p[1]) for p in a}
            if k == "$odict":
                return collections.OrderedDict((from_json(p[0]), from_json(p[1])) for p in a)
            if k == "$bytes":
                return bytes.fromhex(a)
            if k == "$set":
                return set(from_json(x) for x in a)
            if k == "$dtype":
                return getattr(torch, a)
            if k == "$global":
                return resolve(a)
            if k == "$reduce":
                return resolve(a[0])(*[from_json(x) for x in a[1]])
            if k == "$newobj":
                cls = resolve(a[0])
                obj = cls.__new__(cls, *[from_json(x) for x in a[1]])
                if a[2] is not None:
                    obj.__dict__.update(from_json(a[2]))
                return obj
        return {sys.intern(k): from_json(x) for k, x in v.items()}
    return v


def same(a, b):
    """Equality that also holds for nan and tells int from float and tuple from list."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a.keys()) == list(b.keys()) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, argparse.Namespace):
        return same(vars(a), vars(b))
    return a == b


def tool(*args, env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([TOOL] + [str(a) for a in args], capture_output=True, text=True, env=e)


# Values whose protocol-2 pickle Python writes with weights_only-legal opcodes only.
PICKLE_CASES = [
    None, True, False,
    0, 1, 255, 256, 65535, 65536, -1, -129, 2**31 - 1, -2**31, 2**31, -2**31 - 1, 2**63 - 1, -2**63,
    {"$int": str(2**64)}, {"$int": str(-2**100)}, {"$int": str(2**63)}, {"$int": str(-2**63 - 1)}, {"$int": "128"},
    1.5, -0.0, 1e300, 5e-324, 3.0, {"$float": "inf"}, {"$float": "-inf"}, {"$float": "nan"},
    "", "x", "caf\u00e9 \u2603 \U0001f600", "a" * 300,
    [], [1], [1, 2], list(range(1001)), list(range(2000)),
    list(range(1000)), {"k%d" % i: i for i in range(1000)}, {"k%d" % i: i for i in range(2000)},
    {"$odict": [["k%d" % i, i] for i in range(1001)]}, {"$odict": [["k%d" % i, i] for i in range(1000)]},
    {}, {"a": 1}, {"a": 1, "b": "a"}, {"k%d" % i: i for i in range(1001)},
    {"$tuple": []}, {"$tuple": [1]}, {"$tuple": [1, 2]}, {"$tuple": [1, 2, 3]}, {"$tuple": [1, 2, 3, 4]},
    {"$tuple": [{"$tuple": []}, [{"$tuple": ["a", "a"]}]]},
    {"$dict": [[1, "one"], [{"$tuple": [1, 2]}, None], ["$x", 2]]},
    {"$odict": [["b", 1], ["a", [2.5]]]}, {"$odict": []},
    {"$bytes": "00ff10"}, {"$bytes": "".join("%02x" % i for i in range(256))},
    {"$set": [1, 2, 3]},
    {"$dtype": "bfloat16"}, [{"$dtype": "float32"}, {"$dtype": "float32"}],
    {"$reduce": ["megatron.core.enums.ModelType", [1]]},
    [{"$reduce": ["megatron.core.transformer.enums.AttnBackend", [5]]}, "latin1"],
    {"$newobj": ["argparse.Namespace", [], {"num_layers": 2, "params_dtype": {"$dtype": "bfloat16"}, "name": "num_layers"}]},
    {"$newobj": ["argparse.Namespace", [], None]},
    {"$global": "collections.OrderedDict"},
    {"a": [1, {"b": {"$tuple": [None, True]}}], "c": {"d": {"e": [[], {}]}}},
]

# Refused by the writer, and why (a piece of the message).
REFUSED_PICKLES = [
    ({"$reduce": ["os.system", ["true"]]}, "os.system"),
    ({"$global": "builtins.eval"}, "builtins.eval"),
    ({"$newobj": ["subprocess.Popen", [], None]}, "subprocess.Popen"),
    ({"$tensor": {"dtype": "float32", "shape": [2]}}, "tensor"),
    ({"$int": str(2**3000)}, "LONG4"),
    ({"a": 1, "$b": 2}, "$dict"),
    ({"$what": 1}, "$what"),
    ({"$dict": [[[1], 2]]}, "hash"),
    ({"$bytes": "0g"}, "hex"),
    ({"$dtype": "float128"}, "dtype"),
]


def check_pickles():
    bad = []
    for case in PICKLE_CASES:
        text = json.dumps(case)
        r = tool("pickle", text)
        if r.returncode != 0:
            bad.append("%s: tool failed: %s" % (text[:80], r.stderr))
            continue
        want = pickle.dumps(from_json(case), protocol=2)
        got = bytes.fromhex(r.stdout.strip())
        if got != want:
            bad.append("%s:\n  tool   %s\n  python %s" % (text[:80], got.hex()[:200], want.hex()[:200]))
    report(not bad, "the writer's pickle of %d values equals Python's pickle.dumps(protocol=2)" % len(PICKLE_CASES),
           "\n".join(bad[:5]))
    bad = []
    for case, why in REFUSED_PICKLES:
        r = tool("pickle", json.dumps(case))
        if r.returncode != 1 or why not in r.stderr:
            bad.append("%s: exit %d, %s" % (json.dumps(case)[:80], r.returncode, r.stderr.strip()))
    report(not bad, "the writer refuses %d values outside the allow-list, naming them" % len(REFUSED_PICKLES), "\n".join(bad))


def save_safetensors(path, tensors):
    """A plain safetensors writer (the format's README), so torch 1.13 can give float8 too."""
    names = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.int64: "I64",
             torch.bool: "BOOL", torch.int32: "I32", torch.uint8: "U8"}
    if hasattr(torch, "float8_e4m3fn"):
        names[torch.float8_e4m3fn] = "F8_E4M3"
    header, blobs, pos = {}, [], 0
    for k, t in tensors.items():
        b = t.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_tensors(float8):
    g = torch.Generator().manual_seed(5)
    t = collections.OrderedDict()
    t["decoder.layers.0.self_attention.linear_qkv.weight"] = torch.randn(24, 8, generator=g).to(torch.bfloat16)
    t["decoder.layers.0.mlp.linear_fc1.weight"] = torch.randn(16, 8, generator=g).to(torch.float16)
    t["embedding.word_embeddings.weight"] = torch.randn(33, 8, generator=g)
    t["counts"] = torch.arange(-5, 300, dtype=torch.int64)
    t["mask"] = torch.rand(7, generator=g) > 0.5
    t["scalar"] = torch.tensor(2.75, dtype=torch.float32)
    t["empty"] = torch.zeros(0, 8, dtype=torch.bfloat16)
    if float8:
        t["fp8"] = (torch.randn(4, 5, generator=g) * 3).to(torch.float8_e4m3fn)
    return t


TOP = {
    "args": {"$newobj": ["argparse.Namespace", [], {
        "num_layers": 2, "hidden_size": 8, "num_attention_heads": 4, "kv_channels": None,
        "swiglu": True, "untie_embeddings_and_output_weights": False, "norm_epsilon": 1e-05,
        "rotary_base": 10000, "rotary_percent": 1.0, "loss_scale": {"$float": "inf"},
        "weird": {"$float": "nan"}, "neg": {"$float": "-inf"}, "seed": {"$int": str(2**70)},
        "tokenizer_type": "HuggingFaceTokenizer", "params_dtype": {"$dtype": "bfloat16"},
        "main_grads_dtype": {"$dtype": "float32"},
        "model_type": {"$reduce": ["megatron.core.enums.ModelType", [1]]},
        "attention_backend": {"$reduce": ["megatron.core.transformer.enums.AttnBackend", [5]]},
        "data_path": ["a", "b"], "split": {"$tuple": [969, 30, 1]},
        "nested": {"x": [1, {"$tuple": []}, {"y": None}], "$ok": {"$dict": [["$k", 1], [2, "two"]]}},
        "blob": {"$bytes": "0001feff"}, "ids": {"$set": [1, 2, 3]}, "empty_blob": {"$bytes": ""},
        "device": {"$reduce": ["torch.device", ["cpu"]]}, "size": {"$reduce": ["torch.Size", [{"$tuple": [2, 3]}]]}}]},
    "checkpoint_version": 3.0,
    "iteration": 7,
    "num_floating_point_operations_so_far": 0,
}


def expected_top():
    return {k: from_json(v) for k, v in TOP.items()}


def fix_top_json():
    # "nested" holds a key starting with '$' inside a plain object: written through $dict.
    args = TOP["args"]["$newobj"][2]
    args["nested"] = {"$dict": [["x", [1, {"$tuple": []}, {"y": None}]], ["$ok", {"$dict": [["$k", 1], [2, "two"]]}]]}


fix_top_json()

ENTRIES_EXTRA = ["decoder.layers.0.self_attention.linear_qkv._extra_state", "output_layer._extra_state"]


def entries_order(names):
    """A state dict order unlike the sink's, with None entries in between."""
    order = list(reversed(names))
    return order[:2] + [ENTRIES_EXTRA[0]] + order[2:] + [ENTRIES_EXTRA[1]]


def data_offsets(path):
    """{entry name: absolute offset of its data}, from each local header (zipfile's way)."""
    out = {}
    with open(path, "rb") as f, zipfile.ZipFile(path) as z:
        for i in z.infolist():
            f.seek(i.header_offset)
            h = f.read(30)
            nlen, xlen = struct.unpack("<HH", h[26:30])
            out[i.filename] = i.header_offset + 30 + nlen + xlen
    return out


def check_archive(load, float8, workdir, label):
    """Writes the tensors with TOP through the tool and checks what torch/zipfile see.
    load(path) is the tier's torch.load."""
    tensors = make_tensors(float8)
    src = os.path.join(workdir, "in.safetensors")
    save_safetensors(src, tensors)
    names = list(tensors.keys())
    order = entries_order(names)
    meta = ["--meta", "torch.top=" + json.dumps(TOP), "--meta", "torch.model_entries=" + json.dumps(order)]
    for zip64 in (False, True):
        what = "%s%s" % (label, ", ZIP64 forced" if zip64 else "")
        d = os.path.join(workdir, "z64" if zip64 else "plain")
        os.makedirs(d, exist_ok=True)
        out = os.path.join(d, "model_optim_rng.pt")
        env = {"TPS_TORCH_ZIP64": "1"} if zip64 else {"TPS_TORCH_ZIP64": "0"}
        r = tool("write", src, out, "--chunk", "37", *meta, env=env)
        if not report(r.returncode == 0, "%s: the tool writes the archive" % what, r.stderr):
            continue
        try:
            sd = load(out)
        except Exception as e:  # noqa: BLE001 - the failure is the report
            report(False, "%s: torch.load reads the archive" % what, repr(e))
            continue
        report(True, "%s: torch.load reads the archive" % what)
        want = expected_top()
        keys_ok = list(sd.keys()) == list(TOP.keys()) + ["model"]
        report(keys_ok, "%s: the top-level keys are torch.top's in order, then model" % what, list(sd.keys()))
        bad = [k for k in TOP if k in sd and not same(sd[k], want[k])]
        report(not bad, "%s: args Namespace (enums, dtypes, nested, inf/nan, big int), version, iteration as given" % what,
               "\n".join("%s: %r != %r" % (k, sd.get(k), want[k]) for k in bad))
        a = sd.get("args")
        if a is not None:
            ModelType, AttnBackend = resolve("megatron.core.enums.ModelType"), resolve("megatron.core.transformer.enums.AttnBackend")
            report(a.model_type is ModelType.encoder_or_decoder and a.attention_backend is AttnBackend.auto
                   and a.params_dtype is torch.bfloat16 and math.isnan(a.weird) and a.loss_scale == math.inf,
                   "%s: enums are their members, dtypes torch's, nan and inf floats" % what, vars(a))
        m = sd.get("model")
        report(type(m) is collections.OrderedDict and m is not None and list(m.keys()) == order,
               "%s: the state dict is an OrderedDict in the given order" % what, m and list(m.keys()))
        if m is not None:
            bad = []
            for k in order:
                if k in ENTRIES_EXTRA:
                    if m[k] is not None:
                        bad.append("%s: %r is not None" % (k, m[k]))
                    continue
                t, w = m[k], tensors[k]
                if t.dtype != w.dtype or t.shape != w.shape or not torch.equal(t.view(torch.uint8) if t.numel() and t.dim() else t.reshape(-1).view(torch.uint8), w.view(torch.uint8) if w.numel() and w.dim() else w.reshape(-1).view(torch.uint8)):
                    bad.append("%s: %s %s vs %s %s" % (k, t.dtype, tuple(t.shape), w.dtype, tuple(w.shape)))
            report(not bad, "%s: %d tensors bit-equal%s, None entries None" % (what, len(names), " (float8 e4m3 too)" if float8 else ""),
                   "\n".join(bad))
        with zipfile.ZipFile(out) as z:
            infos = z.infolist()
            roots = {i.filename.split("/", 1)[0] for i in infos}
            report(roots == {"model_optim_rng"}, "%s: every entry is under model_optim_rng/" % what, roots)
            report(z.testzip() is None, "%s: zipfile reads every entry with its CRC-32" % what)
            recs = ["model_optim_rng/data/%d" % i for i in range(len(names))]
            have = [i.filename for i in infos]
            report(have == ["model_optim_rng/data.pkl"] + recs + ["model_optim_rng/version", "model_optim_rng/byteorder"],
                   "%s: data.pkl, one record per tensor, version, byteorder" % what, have)
            report(z.read("model_optim_rng/version") == b"3\n" and z.read("model_optim_rng/byteorder") == b"little",
                   "%s: version 3, byteorder little" % what)
            if zip64:
                z64 = all(struct.unpack("<H", i.extra[:2])[0] == 1 for i in infos if i.extra) and all(i.extra for i in infos)
                report(z64, "%s: every central entry carries a ZIP64 extra" % what, [(i.filename, i.extra) for i in infos])
        offs = data_offsets(out)
        mis = {k: v for k, v in offs.items() if v % 64}
        report(not mis, "%s: every record's data starts on a 64-byte boundary" % what, mis)
        with open(out, "rb") as f:
            blob = f.read()
        eocd = blob[-22:]
        n16, cd32, ofs32 = struct.unpack("<H", eocd[10:12])[0], struct.unpack("<I", eocd[12:16])[0], struct.unpack("<I", eocd[16:20])[0]
        if zip64:
            report((n16, cd32, ofs32) == (0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF), "%s: the end record is saturated" % what, (n16, cd32, ofs32))
        r2 = tool("write", src, "-", "--chunk", "4096", *meta, env=env)
        want_line = "%08x %d" % (zlib.crc32(blob), len(blob))
        report(r2.returncode == 0 and r2.stdout.strip() == want_line and r.stdout.strip() == want_line,
               "%s: the counting file and the commit give the file's CRC-32 and size" % what,
               "file %s, commit %s, counting %s %s" % (want_line, r.stdout.strip(), r2.stdout.strip(), r2.stderr))


def check_torch_save_pickle(float8, workdir):
    """The writer's data.pkl against torch.save's own for the same top-level dict (tensors in
    the sink's order, so torch numbers the storages as the writer does; a None entry)."""
    tensors = make_tensors(float8)
    src = os.path.join(workdir, "cmp.safetensors")
    save_safetensors(src, tensors)
    # Empty bytes are the one value written unlike Python (see formats/torch/pickle_write.h); and
    # torch.device('cpu')'s 'cpu' is a string object other than the storages' location 'cpu',
    # which Python's by-identity memo writes twice and the writer's by-value memo once.
    args = json.loads(json.dumps(TOP["args"]))
    del args["$newobj"][2]["empty_blob"]
    del args["$newobj"][2]["device"]
    top = {"iteration": 7, "checkpoint_version": 3.0, "args": args}
    order = list(tensors.keys())
    order.insert(2, ENTRIES_EXTRA[0])
    ours = os.path.join(workdir, "cmp", "model_optim_rng.pt")
    ref = os.path.join(workdir, "cmp", "ref", "model_optim_rng.pt")
    os.makedirs(os.path.dirname(ref), exist_ok=True)
    r = tool("write", src, ours, "--meta", "torch.top=" + json.dumps(top), "--meta", "torch.model_entries=" + json.dumps(order))
    if not report(r.returncode == 0, "the tool writes the torch.save comparison file", r.stderr):
        return
    sd = collections.OrderedDict((k, tensors.get(k)) for k in order)
    torch.save({**{k: from_json(v) for k, v in top.items()}, "model": sd}, ref)
    with zipfile.ZipFile(ours) as a, zipfile.ZipFile(ref) as b:
        pa, pb = a.read("model_optim_rng/data.pkl"), b.read("model_optim_rng/data.pkl")
    at = next((i for i, (x, y) in enumerate(zip(pa, pb)) if x != y), min(len(pa), len(pb)))
    report(pa == pb, "data.pkl is byte-identical to torch %s's torch.save of the same dict%s" % (torch.__version__, " (float8 too)" if float8 else ""),
           "first difference at byte %d of %d/%d:\n  ours  %s\n  torch %s" % (at, len(pa), len(pb), pa[at:at + 40].hex(), pb[at:at + 40].hex()))


def check_refusals(load, workdir):
    tensors = make_tensors(False)
    src = os.path.join(workdir, "in.safetensors")
    save_safetensors(src, tensors)
    names = list(tensors.keys())
    out = os.path.join(workdir, "refused", "model_optim_rng.pt")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cases = [
        (["--meta", "torch.rng=1"], "torch.rng"),
        (["--meta", 'torch.top={"args": {"$reduce": ["os.system", ["touch pwned"]]}}'], "os.system"),
        (["--meta", 'torch.top={"t": {"$tensor": {"dtype": "float32", "shape": [1]}}}'], "tensor"),
        (["--meta", "torch.model_entries=" + json.dumps(names[1:])], names[0]),
        (["--meta", "torch.model_entries=" + json.dumps(names + [names[0]])], names[0]),
        (["--meta", 'torch.top={"model": 1}'], "model"),
    ]
    bad = []
    for args, why in cases:
        r = tool("write", src, out, *args)
        if r.returncode != 1 or why not in r.stderr or os.listdir(os.path.dirname(out)):
            bad.append("%s: exit %d, %s, dir %s" % (args, r.returncode, r.stderr.strip(), os.listdir(os.path.dirname(out))))
    report(not bad, "the writer refuses %d bad descriptions by name and leaves no file" % len(cases), "\n".join(bad))
    r = tool("write", src, out, "--meta", "torch.model_key=state", "--meta", "tp_rank=0")
    ok = r.returncode == 0
    if ok:
        sd = load(out)
        ok = list(sd.keys()) == ["state"] and list(sd["state"].keys()) == names
    report(ok, "torch.model_key names the tensor dict, whose default order is the sink's; non-torch keys ignored", r.stderr)
    os.unlink(out) if os.path.exists(out) else None


def run(tier, load, float8):
    if not os.access(TOOL, os.X_OK):
        report(False, "torch_write_tool missing at " + TOOL + " (make builds it)")
        return tap.status()
    with tempfile.TemporaryDirectory() as tmp:
        stub_megatron(os.path.join(tmp, "stub"))
        check_pickles()
        check_archive(load, float8, tmp, tier)
        check_torch_save_pickle(float8, tmp)
        check_refusals(load, tmp)
    return tap.status()
