"""Output serving stacks load as is, checked with the real safetensors and torch.

--max-shard-size: every part of every rank loads with safetensors.safe_open and
safetensors.torch, each rank's index names exactly its parts with the right total_size, the
tensors equal slices of the source computed independently (test_split_slices.expected), and
merge of a parts set gives back the source.  --dtype bf16/f16/f32: every tensor equals torch's
own .to(dtype) of the source slice bit for bit, on the fixtures and on crafted values (ties,
overflow, subnormals, -0, NaN as NaN); an integer tensor is refused with exit 3 naming it."""
import json
import math
import os
import re
import subprocess
import struct
import sys
import tempfile
from fractions import Fraction

import numpy
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import test_split_slices
from test_split_slices import FAMILY, MODELS, TPSHARD, expected, report

CAP = 40_000  # bytes of tensor data per part: several parts per rank on every fixture
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def run(*args):
    return subprocess.run([TPSHARD, *args], capture_output=True, text=True)


def bits(t):
    """A tensor's raw bytes, so -0.0, NaN payloads and rounding are compared exactly."""
    return t.contiguous().view(torch.uint8) if t.dtype != torch.bool else t


def same(got, want):
    """Bit for bit, except that any NaN equals any NaN: torch's own NaN bits are not stable
    (1.13 turns a float NaN into BF16 0xFFFF, later versions into 0x7FC0)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if not got.is_floating_point():
        return torch.equal(bits(got), bits(want))
    nan = want.isnan()
    return torch.equal(got.isnan(), nan) and torch.equal(bits(got[~nan]), bits(want[~nan]))


def load_source(d):
    src = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            src.update(load_file(os.path.join(d, f)))
    return src


def source_path(d):
    single = os.path.join(d, "model.safetensors")
    return single if os.path.exists(single) else d


def check_parts(fixture, family, tp, tmp):
    d = os.path.join(MODELS, fixture)
    cfg = json.load(open(os.path.join(d, "config.json")))
    source = load_source(d)
    out = os.path.join(tmp, f"{fixture}-{tp}")
    p = run("split", source_path(d), "--tp", str(tp), "--preset", family, "--config", os.path.join(d, "config.json"),
            "--max-shard-size", str(CAP), "-o", out, "-q")
    if p.returncode:
        report(False, f"{fixture} tp {tp} --max-shard-size: split", p.stderr)
        return
    bad = []
    names = sorted(os.listdir(out))
    for r in range(tp):
        parts = sorted((f for f in names if re.fullmatch(rf"model-rank-{r}-part-\d+\.safetensors", f)),
                       key=lambda f: int(f.split("-part-")[1].split(".")[0]))
        numbers = [int(f.split("-part-")[1].split(".")[0]) for f in parts]
        if numbers != list(range(len(parts))) or len(parts) < 2:
            bad.append(f"rank {r}: parts {parts} are not numbered 0..n-1, or there is only one")
        where, total = {}, 0
        for f in parts:
            path = os.path.join(out, f)
            with safe_open(path, framework="pt") as sf:
                meta = sf.metadata()
                if meta.get("tp_rank") != str(r) or meta.get("tp_size") != str(tp) or meta.get("format") != "pt":
                    bad.append(f"{f}: metadata {meta}")
                keys = list(sf.keys())
            tensors = load_file(path)
            if sorted(keys) != sorted(tensors):
                bad.append(f"{f}: safe_open and load_file disagree")
            data = sum(t.numel() * t.element_size() for t in tensors.values())
            if data > CAP and len(tensors) > 1:
                bad.append(f"{f}: {data} bytes of data in {len(tensors)} tensors, over the cap {CAP}")
            total += data
            for name, got in tensors.items():
                if name in where:
                    bad.append(f"{name} in {where[name]} and {f}")
                where[name] = f
                want = expected(family, name, source[name], cfg, tp, r)
                if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(bits(got), bits(want)):
                    bad.append(f"{f}: {name} differs from the source slice")
        if set(where) != set(source):
            bad.append(f"rank {r}: its parts hold {len(where)} tensors, the source {len(source)}")
        try:
            index = json.load(open(os.path.join(out, f"model-rank-{r}-of-{tp}.safetensors.index.json")))
        except (OSError, ValueError) as e:
            bad.append(f"rank {r}: index: {e}")
            continue
        if index.get("weight_map") != where:
            bad.append(f"rank {r}: index weight_map differs from the parts' contents")
        if sorted(set(index.get("weight_map", {}).values())) != sorted(parts):
            bad.append(f"rank {r}: the index names {sorted(set(index['weight_map'].values()))}, the parts are {parts}")
        if index.get("metadata", {}).get("total_size") != total:
            bad.append(f"rank {r}: total_size {index.get('metadata')}, the parts hold {total} bytes")
    report(not bad, f"{fixture} tp {tp} --max-shard-size {CAP}: parts load, indexes exact, tensors equal slices",
           "\n".join(bad))
    merged = os.path.join(tmp, f"{fixture}-{tp}.safetensors")
    p = run("merge", out, "-o", merged, "-q")
    m = load_file(merged) if p.returncode == 0 else {}
    same = p.returncode == 0 and set(m) == set(source) and all(torch.equal(bits(m[k]), bits(source[k])) for k in source)
    report(same, f"{fixture} tp {tp}: merge of the parts set loads and equals the source", p.stderr)


def check_dtype(what, src_path, layout_args, source, slice_of, tp, dtype, tmp):
    out = os.path.join(tmp, re.sub(r"\W+", "-", f"dt-{what}-{tp}-{dtype}"))
    p = run("split", src_path, "--tp", str(tp), *layout_args, "--dtype", dtype, "-o", out, "-q")
    if p.returncode:
        report(False, f"{what} tp {tp} --dtype {dtype}: split", p.stderr)
        return
    manifest = json.load(open(os.path.join(out, "tpshard.json")))
    bad = []
    for fe in manifest["files"]:
        r = fe["rank"]
        got = load_file(os.path.join(out, fe["name"]))
        for name, src in source.items():
            want = rounded_once(slice_of(name, src, tp, r), DTYPES[dtype])
            g = got.get(name)
            if g is None or not same(g, want):
                diff = "missing" if g is None else f"{g.dtype} {tuple(g.shape)}"
                if g is not None and g.shape == want.shape and g.dtype == want.dtype:
                    k = (bits(g).view(-1, want.element_size()) != bits(want).view(-1, want.element_size())).any(1)
                    k &= ~(g.isnan() & want.isnan()).reshape(-1)
                    i = int(k.nonzero()[0])
                    gb, wb = (bytes(x.reshape(-1)[i:i + 1].contiguous().view(torch.uint8).tolist())[::-1].hex()
                              for x in (g, want))
                    diff = (f"element {i} (source {src.reshape(-1)[crafted_index(src, slice_of(name, src, tp, r), i)]!r}):"
                            f" got {g.reshape(-1)[i].item()!r} (0x{gb}), torch {want.reshape(-1)[i].item()!r} (0x{wb})")
                bad.append(f"rank {r}: {name} ({src.dtype}): {diff}")
    report(not bad, f"{what} tp {tp} --dtype {dtype}: every tensor equals the source rounded once to nearest even", "\n".join(bad))


def rounded_once(t, dtype):
    """t in dtype, rounded once to nearest even.  torch's .to() does that for F32/F16/BF16
    sources; from F64 it rounds to F32 first and then again (1 + 2^-8 + 2^-30 becomes BF16
    1.0, not 1.0078125), so F64 sources are rounded here another way: numpy's float64 ->
    float16 rounds directly from the double, and BF16 is chosen by exact rational distance."""
    if t.dtype != torch.float64 or dtype == torch.float64:
        return t.to(dtype)
    if dtype == torch.float32:
        return t.to(dtype)  # one rounding: torch converts F64 to F32 directly
    if dtype == torch.float16:
        with numpy.errstate(over="ignore"):  # overflow to infinity is the expected rounding
            return torch.from_numpy(t.numpy().astype(numpy.float16))
    return torch.tensor([bf16_bits_rne(x) for x in t.reshape(-1).tolist()],
                        dtype=torch.int16).view(torch.bfloat16).reshape(t.shape)


def bf16_bits_rne(x):
    """The BF16 nearest to the double x, ties to even, as a signed 16-bit pattern."""
    if math.isnan(x):
        return 0x7fc0
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    if math.isinf(x):
        return (sign | 0x7f80) - (0x10000 if sign else 0)
    a = Fraction(abs(x))
    if a >= Fraction(2) ** 128 * (1 - Fraction(1, 2 ** 9)):  # at or past max + half an ulp
        bits = sign | 0x7f80
    else:
        def value(b):  # the finite, non-negative BF16 with bit pattern b
            return Fraction(struct.unpack("<f", struct.pack("<I", b << 16))[0])
        near = struct.unpack("<I", struct.pack("<f", float(numpy.float32(abs(x)))))[0] >> 16
        cands = [b for b in (near - 1, near, near + 1) if 0 <= b <= 0x7f7f]
        bits = sign | min(cands, key=lambda b: (abs(value(b) - a), b & 1))
    return bits - 0x10000 if bits & 0x8000 else bits


def crafted_index(src, piece, i):
    """Where element i of a slice sits in its source tensor (for the message only)."""
    flat = src.reshape(-1)
    v = piece.reshape(-1)[i]
    hits = ((flat == v) | (flat.isnan() & v.isnan())).nonzero()
    return int(hits[0]) if len(hits) else 0


def crafted_values(dtype):
    """Values where rounding is decided: ties to even for BF16 and F16, overflow, subnormals,
    signed zero, infinity, NaN, plus a spread of magnitudes."""
    v = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"),
         1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1 + 2 ** -8 + 2 ** -23,  # BF16 ties, and just above
         1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -23,  # F16 ties
         65504.0, 65519.0, 65520.0, 70000.0, -1e6,  # F16 largest, last that rounds down, overflow
         3.3895e38, 3.39e38, 3.4e38,  # BF16 largest and overflow
         6.1e-5, 6.0e-8, 5.96e-8, 2.98e-8, 2.9e-8, 1e-10,  # F16 normal/subnormal/underflow
         1e-38, 1e-40, 1e-45]  # F32/BF16 subnormal
    if dtype == torch.float64:
        # where rounding through float32 (as torch does) and rounding once differ
        v += [1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -11 + 2 ** -40, 1e300, -1e-300]
    g = torch.Generator().manual_seed(5)
    spread = torch.randn(256 - len(v), generator=g, dtype=torch.float64) * torch.logspace(-12, 12, 256 - len(v),
                                                                                           dtype=torch.float64)
    return torch.cat([torch.tensor(v, dtype=torch.float64), spread]).to(dtype)


LAYOUT = """name: crafted
rules:
  - match: col.weight
    split: column
  - match: row.weight
    split: row
default:
  split: replicate
"""


def crafted(tmp, with_int):
    tensors = {"col.weight": crafted_values(torch.float32).reshape(16, 16),
               "row.weight": crafted_values(torch.float64).reshape(8, 32),
               "half.bias": crafted_values(torch.float32)[:40].to(torch.float16),
               "brain.bias": crafted_values(torch.float32)[40:80].to(torch.bfloat16)}
    if with_int:
        tensors["step"] = torch.arange(6, dtype=torch.int64)
    path = os.path.join(tmp, "crafted-int.safetensors" if with_int else "crafted.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    with open(os.path.join(tmp, "crafted.yaml"), "w") as f:
        f.write(LAYOUT)
    return path, tensors


def crafted_slice(name, t, tp, r):
    if name == "col.weight":
        return test_split_slices.chunk(t, tp, r, 0)
    if name == "row.weight":
        return test_split_slices.chunk(t, tp, r, 1)
    return t


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for fixture in ("tiny-llama", "tiny-phi3", "tiny-gpt2", "tiny-neox", "tiny-mixtral"):
            cfg = json.load(open(os.path.join(MODELS, fixture, "config.json")))
            nh = cfg.get("num_attention_heads", cfg.get("n_head"))
            for tp in (1, 2, 4):
                if nh % tp == 0:
                    check_parts(fixture, FAMILY[fixture], tp, tmp)

        for fixture in ("tiny-llama", "tiny-gpt2", "tiny-neox"):  # BF16, F32, F16 sources
            d = os.path.join(MODELS, fixture)
            cfg = json.load(open(os.path.join(d, "config.json")))
            family = FAMILY[fixture]
            args = ["--preset", family, "--config", os.path.join(d, "config.json")]
            for dtype in DTYPES:
                check_dtype(fixture, source_path(d), args, load_source(d),
                            lambda n, t, tp, r, f=family, c=cfg: expected(f, n, t, c, tp, r), 2, dtype, tmp)

        path, tensors = crafted(tmp, False)
        layout = ["--layout", os.path.join(tmp, "crafted.yaml")]
        for dtype in DTYPES:
            single = {k: v for k, v in tensors.items() if v.dtype != torch.float64}
            doubles = {k: v for k, v in tensors.items() if v.dtype == torch.float64}
            for what, subset in (("crafted F32/F16/BF16", single), ("crafted F64", doubles)):
                check_dtype(what, path, layout, subset, crafted_slice, 2, dtype, tmp)

        ipath, _ = crafted(tmp, True)
        p = run("split", ipath, "--tp", "2", *layout, "-o", os.path.join(tmp, "int-plain"), "-q")
        report(p.returncode == 0, "a source with an I64 tensor splits without --dtype", p.stderr)
        for dtype in DTYPES:
            out = os.path.join(tmp, f"int-{dtype}")
            p = run("split", ipath, "--tp", "2", *layout, "--dtype", dtype, "-o", out)
            report(p.returncode == 3 and "'step'" in p.stderr and "I64" in p.stderr and not os.path.exists(out),
                   f"--dtype {dtype} on an I64 tensor: exit 3 naming it, nothing written",
                   f"exit {p.returncode}: {p.stderr}")
    return 1 if test_split_slices.failures else 0


if __name__ == "__main__":
    sys.exit(main())
