"""safetensors interop, both directions, against the real safetensors and torch packages.

1. tpshard's writer -> safetensors.safe_open and safetensors.torch.load_file.  The file is
   written by the C writer through the unit-test binary's hook
   (`build/tests/test_formats_safetensors --write-fixture PATH`, the same writer code the CLI links),
   because no tpshard subcommand writes safetensors yet.  Its contents are known by rule:
   byte j of tensor k is (37k + 11j + 5) mod 256 (BOOL: that mod 2), which this script
   recomputes on its own.
2. safetensors.torch.save_file -> `tpshard inspect --json`: dtypes, shapes and byte sizes
   must equal what torch says about the tensors it saved, for every dtype this torch has
   (float8 and uint16+ only where torch has them; the rest are skipped loudly).
3. The same package's serializer (the TensorSpec path save_file itself uses), fed plain
   byte buffers, for the dtypes an old torch lacks: float8 variants, uint16/32/64,
   complex64 and float4 (whose header shape doubles the storage's last dimension).

Prints ok / not ok / skip lines and exits non-zero on any failure.  Run from the repository
root with TPSHARD set (tests/run.sh does both) under $TPS_PYTHON.
"""
import json
import os
import subprocess
import sys
import tempfile

failures = 0


def ok(cond, what, detail=""):
    global failures
    if cond:
        print("ok - " + what)
    else:
        failures += 1
        print("not ok - " + what)
        for line in str(detail).splitlines()[:20]:
            print("#   " + line)


def skip(what, why):
    print("skip - %s: %s" % (what, why))


try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError as e:
    skip("safetensors interop", "missing Python package (%s); run tests/interop/setup.sh" % e)
    sys.exit(0)

TOP = os.environ.get("TPS_TOP", os.getcwd())
TPSHARD = os.environ.get("TPSHARD", os.path.join(TOP, "tpshard"))
HOOK = os.path.join(TOP, "build", "tests", "test_formats_safetensors")

# What the fixture holds (tests/unit/test_formats_safetensors.c fixture_write), in order.
FIXTURE = [("f64", torch.float64, [5]), ("f32", torch.float32, [2, 3]), ("f16", torch.float16, [3, 1, 2]),
           ("bf16", torch.bfloat16, [2, 3]), ("i64", torch.int64, [5]), ("i32", torch.int32, [2, 3]),
           ("i16", torch.int16, [5]), ("i8", torch.int8, [5]), ("u8", torch.uint8, [2, 3]),
           ("bool", torch.bool, [5]), ("scalar", torch.float32, []), ("empty", torch.float16, [0, 4])]

# A same-width integer view of each dtype, to compare raw bytes (numpy has no bfloat16).
INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def raw_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    size = t.element_size()
    return t.view(INT_VIEW[size]).numpy().tobytes()


def expected_bytes(k, dtype, shape):
    n = 1
    for d in shape:
        n *= d
    size = n * torch.empty((), dtype=dtype).element_size()
    b = bytes((37 * k + 11 * j + 5) & 0xFF for j in range(size))
    return bytes(x & 1 for x in b) if dtype == torch.bool else b


def writer_to_safetensors(tmp):
    path = os.path.join(tmp, "from_tpshard.safetensors")
    if not os.access(HOOK, os.X_OK):
        ok(False, "tpshard writer fixture", "%s not built (run make %s)" % (HOOK, "build/tests/test_formats_safetensors"))
        return
    r = subprocess.run([HOOK, "--write-fixture", path], capture_output=True, text=True)
    ok(r.returncode == 0, "tpshard writer wrote the fixture", r.stderr)
    if r.returncode != 0:
        return
    with safe_open(path, framework="pt") as f:
        ok(f.metadata() == {"format": "pt", "tp_rank": "0", "tp_size": "1"},
           "safe_open reads the writer's __metadata__", f.metadata())
        ok(sorted(f.keys()) == sorted(n for n, _, _ in FIXTURE), "safe_open lists the writer's tensors", f.keys())
        for k, (name, dtype, shape) in enumerate(FIXTURE):
            t = f.get_tensor(name)
            good = t.dtype == dtype and list(t.shape) == shape and raw_bytes(t) == expected_bytes(k, dtype, shape)
            ok(good, "safe_open reads tensor %s (%s %s) with identical bytes" % (name, dtype, shape),
               "%s %s" % (t.dtype, list(t.shape)))
    sd = load_file(path)
    same = sorted(sd) == sorted(n for n, _, _ in FIXTURE) and all(
        raw_bytes(sd[name]) == expected_bytes(k, dtype, shape) and sd[name].dtype == dtype
        for k, (name, dtype, shape) in enumerate(FIXTURE))
    ok(same, "safetensors.torch.load_file reads the writer's file with identical bytes")


def safetensors_to_inspect(tmp):
    # torch dtype name -> safetensors dtype string (the Dtype enum of safetensors/src/tensor.rs)
    names = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
             "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL", "float8_e4m3fn": "F8_E4M3",
             "float8_e5m2": "F8_E5M2", "uint16": "U16", "uint32": "U32", "uint64": "U64"}
    dtypes = list(names)
    g = torch.Generator().manual_seed(1)
    tensors = {}
    for i, name in enumerate(dtypes):
        dt = getattr(torch, name, None)
        if dt is None:
            skip("inspect reads %s written by safetensors" % name,
                 "torch %s has no torch.%s" % (torch.__version__, name))
            continue
        shape = [[3, 5], [7], [2, 3, 4], [], [0, 6]][i % 5]
        t = torch.randn(shape, generator=g).mul(10)
        try:
            tensors["t." + name] = t.to(dt)
        except (RuntimeError, TypeError) as e:
            skip("inspect reads %s written by safetensors" % name, "torch cannot make one: %s" % e)
    path = os.path.join(tmp, "from_safetensors.safetensors")
    try:
        save_file(tensors, path, metadata={"format": "pt", "who": "interop"})
    except Exception as e:  # a dtype this safetensors cannot save: drop the extended ones
        ok(False, "safetensors.torch.save_file of %d dtypes" % len(tensors), e)
        return
    r = subprocess.run([TPSHARD, "inspect", "--json", path], capture_output=True, text=True)
    ok(r.returncode == 0, "tpshard inspect --json reads a file written by safetensors", r.stderr)
    if r.returncode != 0:
        return
    got = {t["name"]: t for t in json.loads(r.stdout)["tensors"]}
    with safe_open(path, framework="pt") as f:
        header_dtypes = {}
        for name in f.keys():
            header_dtypes[name] = f.get_slice(name).get_dtype()
    for name, t in sorted(tensors.items()):
        g_ = got.get(name)
        want = (names[name[2:]], list(t.shape), t.numel() * t.element_size())
        ok(header_dtypes[name] == want[0], "safetensors itself stores %s as %s" % (name, want[0]),
           header_dtypes[name])
        have = (g_["dtype"], g_["shape"], g_["bytes"]) if g_ else None
        ok(have == want, "inspect sees %s as safetensors wrote it: %s" % (name, want), have)
    ok(len(got) == len(tensors), "inspect lists exactly the %d saved tensors" % len(tensors), sorted(got))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    ok(json.loads(r.stdout)["totals"]["bytes"] == total, "inspect's total bytes equal torch's sum (%d)" % total)


def serializer_to_inspect(tmp):
    """Dtypes an old torch lacks, written through the package's own serializer (the
    TensorSpec + serialize_file path that save_file uses) from plain byte buffers."""
    try:
        import numpy as np
        from safetensors._safetensors_rust import TensorSpec, serialize_file
    except ImportError as e:
        skip("inspect reads float8/uint16+/complex64/float4 written by safetensors", "no serializer API: %s" % e)
        return
    # serializer dtype name, storage shape, storage bytes, expected header dtype and header shape
    specs = [("float8_e4m3fn", [3, 4], 12, "F8_E4M3", [3, 4]), ("float8_e5m2", [5], 5, "F8_E5M2", [5]),
             ("float8_e8m0fnu", [2, 2], 4, "F8_E8M0", [2, 2]), ("float8_e4m3fnuz", [7], 7, "F8_E4M3FNUZ", [7]),
             ("float8_e5m2fnuz", [1, 3], 3, "F8_E5M2FNUZ", [1, 3]), ("uint16", [3], 6, "U16", [3]),
             ("uint32", [2, 3], 24, "U32", [2, 3]), ("uint64", [2], 16, "U64", [2]),
             ("complex64", [3], 24, "C64", [3]),
             # two F4 values per storage byte: the header's last dimension is doubled
             ("float4_e2m1fn_x2", [2, 3], 6, "F4", [2, 6])]
    keep, tensors = [], {}
    for dt, shape, nbytes, _, _ in specs:
        buf = np.arange(nbytes, dtype=np.uint8)
        keep.append(buf)
        try:
            tensors["s." + dt] = TensorSpec(dtype=dt, shape=shape, data_ptr=buf.ctypes.data, data_len=nbytes)
        except Exception as e:
            skip("inspect reads %s written by safetensors" % dt, "this safetensors cannot write it: %s" % e)
    path = os.path.join(tmp, "from_serializer.safetensors")
    serialize_file(tensors, path, metadata={"format": "pt"})
    r = subprocess.run([TPSHARD, "inspect", "--json", path], capture_output=True, text=True)
    ok(r.returncode == 0, "tpshard inspect --json reads extended dtypes written by safetensors", r.stderr)
    if r.returncode != 0:
        return
    got = {t["name"]: t for t in json.loads(r.stdout)["tensors"]}
    for dt, _, nbytes, st_dtype, st_shape in specs:
        if "s." + dt not in tensors:
            continue
        g = got.get("s." + dt)
        have = (g["dtype"], g["shape"], g["bytes"]) if g else None
        ok(have == (st_dtype, st_shape, nbytes),
           "inspect sees %s as %s %s, %d bytes" % (dt, st_dtype, st_shape, nbytes), have)


with tempfile.TemporaryDirectory() as tmp:
    writer_to_safetensors(tmp)
    safetensors_to_inspect(tmp)
    serializer_to_inspect(tmp)
sys.exit(1 if failures else 0)
