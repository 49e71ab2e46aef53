#!/usr/bin/python3
"""Writes the torch.save / NumPy fixtures and the malformed torch/zip/npy catalogue.

Run with Debian's /usr/bin/python3 (python3-torch, python3-numpy):
    /usr/bin/python3 testdata/gen_torch_fixtures.py
It rewrites testdata/torch/, testdata/bad/torch/, testdata/bad/zip/ and testdata/bad/npy/.
torch.save uses the current time nowhere, but miniz and zipfile do not promise identical
bytes across versions, so the committed files are what matters, not re-running this.

Good fixtures (testdata/torch/): each FIXTURE comes with FIXTURE.expect, one line per tensor
    NAME <TAB> DTYPE <TAB> SHAPE (comma-separated, "" for 0-d) <TAB> HEX of the C-order
    little-endian bytes
written from torch/numpy values (never from tpshard), which tests/unit/test_formats_torch_read.c
compares with what the reader produces.

Crafted variants, because torch 1.13 cannot write them:
  - bigendian.bin: a torch archive with a "byteorder" = "big" record (torch >= 2.1 writes
    it on big-endian hosts) made by re-zipping a little-endian save with every storage
    byte-swapped per element (per component for complex).
  - float8_v3.bin: new dtypes (float8_e4m3fn, float8_e5m2, uint16) saved the torch 2.x way,
    UntypedStorage + _rebuild_tensor_v3; the pickle is assembled opcode by opcode exactly
    as torch 2.x's torch.save emits it.
  - zip64_central.npz: a stored npz whose central directory saturates every size and
    offset field and carries them in ZIP64 extras.
Hostile fixtures are built with the same hand-written zip writer; CASES lines are
    FILE <TAB> EXIT <TAB> FRAGMENT    (tests/cli/bad_inputs.sh replays them with inspect).
"""
import io
import json
import os
import shutil
import struct
import sys
import zipfile
import zlib

import numpy as np
import torch

TOP = os.path.dirname(os.path.abspath(__file__))
GOOD = os.path.join(TOP, "torch")
BAD_TORCH = os.path.join(TOP, "bad", "torch")
BAD_ZIP = os.path.join(TOP, "bad", "zip")
BAD_NPY = os.path.join(TOP, "bad", "npy")
MARKER = "tpshard_pwned_marker"  # what the hostile payloads would create in the cwd

DTYPE_NAMES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL", torch.complex64: "C64",
}
NP_NAMES = {"f8": "F64", "f4": "F32", "f2": "F16", "i8": "I64", "i4": "I32", "i2": "I16", "i1": "I8",
            "u8": "U64", "u4": "U32", "u2": "U16", "u1": "U8", "b1": "BOOL", "c8": "C64"}


def le_bytes_np(a):
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def le_bytes_torch(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return le_bytes_np(t.view(torch.int16).numpy())
    return le_bytes_np(t.numpy())


def write_expect(path, rows):
    with open(path + ".expect", "w") as f:
        for name, dt, shape, data in rows:
            f.write("%s\t%s\t%s\t%s\n" % (name, dt, ",".join(str(d) for d in shape), data.hex()))


def torch_rows(sd, prefix=""):
    rows = []
    for k, v in sd.items():
        rows.append((prefix + k, DTYPE_NAMES[v.dtype], list(v.shape), le_bytes_torch(v)))
    return rows


def save_torch(name, obj, rows):
    path = os.path.join(GOOD, name)
    torch.save(obj, path)
    write_expect(path, rows)


def llama_state_dict(dtype):
    g = torch.Generator().manual_seed(7)
    hidden, heads, kv, inter, vocab, layers = 16, 4, 2, 32, 32, 2
    hd = hidden // heads
    sd = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g)}
    for i in range(layers):
        p = "model.layers.%d." % i
        sd[p + "input_layernorm.weight"] = torch.rand(hidden, generator=g) + 0.5
        sd[p + "self_attn.q_proj.weight"] = torch.randn(heads * hd, hidden, generator=g)
        sd[p + "self_attn.k_proj.weight"] = torch.randn(kv * hd, hidden, generator=g)
        sd[p + "self_attn.v_proj.weight"] = torch.randn(kv * hd, hidden, generator=g)
        sd[p + "self_attn.o_proj.weight"] = torch.randn(hidden, heads * hd, generator=g)
        sd[p + "post_attention_layernorm.weight"] = torch.rand(hidden, generator=g) + 0.5
        sd[p + "mlp.gate_proj.weight"] = torch.randn(inter, hidden, generator=g)
        sd[p + "mlp.up_proj.weight"] = torch.randn(inter, hidden, generator=g)
        sd[p + "mlp.down_proj.weight"] = torch.randn(hidden, inter, generator=g)
    sd["model.norm.weight"] = torch.rand(hidden, generator=g) + 0.5
    sd["lm_head.weight"] = torch.randn(vocab, hidden, generator=g)
    return {k: (v * 0.1).to(dtype) for k, v in sd.items()}


def write_safetensors(path, sd):
    """A minimal safetensors writer (the safetensors README's "Format"), so the same model
    exists in both formats without the safetensors package."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k, v in sd.items():
        b = le_bytes_torch(v)
        header[k] = {"dtype": DTYPE_NAMES[v.dtype], "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---------------------------------------------------------------- hand-made zip writer

def zip_bytes(entries, zip64_central=False, comment=b""):
    """entries: list of dicts name, data, and optionally method (0/8), comp (the stored
    bytes), flags, crc, usize, csize, ofs (central offset), local_name: hostile cases lie in
    exactly the field they test."""
    out, central = bytearray(), bytearray()
    for e in entries:
        name = e["name"].encode() if isinstance(e["name"], str) else e["name"]
        data = e["data"]
        method = e.get("method", 0)
        comp = data if method == 0 else (lambda c: c.compress(data) + c.flush())(zlib.compressobj(9, zlib.DEFLATED, -15))
        comp = e.get("comp", comp)
        crc = e.get("crc", zlib.crc32(data))
        usize, csize = e.get("usize", len(data)), e.get("csize", len(comp))
        flags = e.get("flags", 0x800)
        ofs = e.get("ofs", len(out))
        lname = e.get("local_name", name)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, method, 0, 0, crc, csize & 0xFFFFFFFF,
                           usize & 0xFFFFFFFF, len(lname), 0) + lname + comp
        if zip64_central:
            extra = struct.pack("<HHQQQ", 1, 24, usize, csize, ofs)
            central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, flags, method, 0, 0, crc, 0xFFFFFFFF,
                                   0xFFFFFFFF, len(name), len(extra), 0, 0, 0, 0, 0xFFFFFFFF) + name + extra
        else:
            central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, flags, method, 0, 0, crc, csize,
                                   usize, len(name), 0, 0, 0, 0, 0, ofs) + name
    cd_ofs = len(out)
    out += central
    n = len(entries)
    if zip64_central:
        z64 = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, len(central), cd_ofs)
        out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, len(comment)) + comment
    else:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(central), cd_ofs, len(comment)) + comment
    return bytes(out)


def npy_bytes(a, version=(1, 0), header=None):
    buf = io.BytesIO()
    if header is None:
        np.lib.format.write_array(buf, a, version=version)
        return buf.getvalue()
    h = header.encode("latin1")
    pad = 64 - (10 + len(h) + 1) % 64
    h = h + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + a


def rezip(src, dst, transform):
    """Copies a torch archive entry by entry (stored), passing (name, bytes) through transform,
    which returns the new bytes or None to drop the entry; extra entries via transform(None)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = transform(info.filename, zin.read(info.filename))
            if data is not None:
                zout.writestr(zipfile.ZipInfo(info.filename, (1980, 1, 1, 0, 0, 0)), data)
        for name, data in transform(None, None) or []:
            zout.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)


# ---------------------------------------------------------------- pickles by hand

def op_unicode(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def op_int(i):
    if 0 <= i < 256:
        return b"K" + bytes([i])
    if 0 <= i < 65536:
        return b"M" + struct.pack("<H", i)
    return b"J" + struct.pack("<i", i)


def op_tuple(items):
    return b"(" + b"".join(items) + b"t"


def tensor_v3(key, numel_bytes, size, stride, dtype_name, offset=0):
    pid = op_tuple([op_unicode("storage"), b"ctorch.storage\nUntypedStorage\n", op_unicode(key), op_unicode("cpu"),
                    op_int(numel_bytes)]) + b"Q"
    args = [pid, op_int(offset), op_tuple([op_int(s) for s in size]), op_tuple([op_int(s) for s in stride]),
            b"\x89", b"ccollections\nOrderedDict\n)R", b"ctorch\n" + dtype_name.encode() + b"\n"]
    return b"ctorch._utils\n_rebuild_tensor_v3\n" + op_tuple(args) + b"R"


def state_dict_pickle(items):
    body = b"".join(op_unicode(k) + v for k, v in items)
    return b"\x80\x02ccollections\nOrderedDict\n)R(" + body + b"u."


def torch_archive(pkl, records, root="archive", extra=()):
    entries = [{"name": root + "/data.pkl", "data": pkl}]
    entries += [{"name": "%s/data/%s" % (root, k), "data": v} for k, v in records]
    entries += [{"name": root + "/version", "data": b"3\n"}]
    entries += [{"name": root + "/" + n, "data": d} for n, d in extra]
    return entries


# ---------------------------------------------------------------- good fixtures

def good():
    shutil.rmtree(GOOD, ignore_errors=True)
    os.makedirs(GOOD)

    sd = llama_state_dict(torch.bfloat16)
    save_torch("llama_bf16.bin", sd, torch_rows(sd))
    write_safetensors(os.path.join(GOOD, "llama_bf16.safetensors"), sd)
    with open(os.path.join(GOOD, "llama_config.json"), "w") as f:
        json.dump({"model_type": "llama", "hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 4, "intermediate_size": 32, "vocab_size": 32, "num_hidden_layers": 2,
                   "rms_norm_eps": 1e-5}, f, indent=2)

    # Views: shared storage, storage offsets, a transposed view, a column slice.
    base = torch.arange(24, dtype=torch.float32)
    views = {
        "base": base,
        "view_a": base[2:8].view(2, 3),
        "view_b": base[:12].view(3, 4).t(),
        "cols": base.view(4, 6)[:, 1:4],
        "scalar": base[5],
        "empty": base[3:3],
    }
    save_torch("views.bin", views, torch_rows(views))

    inner = {"encoder.weight": torch.arange(6, dtype=torch.float16).view(2, 3),
             "encoder.bias": torch.tensor([1.5, -2.0], dtype=torch.float16),
             "blocks": [torch.ones(2, dtype=torch.int32), torch.zeros(3, dtype=torch.int64)]}
    rows = [("encoder.weight", "F16", [2, 3], le_bytes_torch(inner["encoder.weight"])),
            ("encoder.bias", "F16", [2], le_bytes_torch(inner["encoder.bias"])),
            ("blocks.0", "I32", [2], le_bytes_torch(inner["blocks"][0])),
            ("blocks.1", "I64", [3], le_bytes_torch(inner["blocks"][1]))]
    save_torch("nested_state_dict.bin", {"state_dict": inner, "epoch": 3, "lr": 0.5}, rows)
    save_torch("nested_model.bin", {"model": inner, "optimizer": {"lr": 0.1, "betas": (0.9, 0.99)}, "step": 10}, rows)

    g = torch.Generator().manual_seed(3)
    src = torch.randn(2, 3, generator=g) * 50
    dts = {"f64": src.double(), "f32": src.float(), "f16": src.half(), "bf16": src.bfloat16(),
           "i64": src.long(), "i32": src.int(), "i16": src.short(), "i8": src.to(torch.int8),
           "u8": src.abs().to(torch.uint8), "bool": src > 0, "c64": torch.complex(src, -src)}
    save_torch("all_dtypes.bin", dts, torch_rows(dts))
    # The same through nn.Parameter (_rebuild_parameter).
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.arange(6.0).view(2, 3))
        lin.bias.copy_(torch.tensor([0.25, -0.5]))
    params = dict(lin.named_parameters())
    save_torch("parameters.bin", params, torch_rows(params))

    # Big-endian: swap each storage per element (per component for complex).
    be = {"w": torch.arange(6, dtype=torch.float32).view(2, 3) / 4, "i": torch.tensor([1, -2, 300], dtype=torch.int64),
          "h": torch.tensor([1.0, 2.5], dtype=torch.bfloat16), "c": torch.complex(torch.tensor([1.0]), torch.tensor([2.0])),
          "t": (torch.arange(6, dtype=torch.int16).view(2, 3)).t()}
    tmp = os.path.join(GOOD, "tmp_le.bin")
    torch.save(be, tmp)
    unit = {"w": 4, "i": 8, "h": 2, "c": 4, "t": 2}
    # torch numbers storages in first-seen order of the state dict: data/0 .. data/4.
    order = list(be.keys())

    def swap(name, data):
        if name is None:
            return [("tmp_le/byteorder", b"big")]
        parts = name.split("/")
        if len(parts) == 3 and parts[1] == "data":
            u = unit[order[int(parts[2])]]
            return b"".join(data[i:i + u][::-1] for i in range(0, len(data), u))
        return data
    rezip(tmp, os.path.join(GOOD, "bigendian.bin"), swap)
    os.remove(tmp)
    write_expect(os.path.join(GOOD, "bigendian.bin"), torch_rows(be))

    # New dtypes the torch 2.x way (UntypedStorage + _rebuild_tensor_v3), crafted.
    f8a = bytes([0x38, 0x40, 0xB8, 0x00, 0x7E, 0x01])      # e4m3fn bit patterns
    f8b = bytes([0x3C, 0xC0, 0x00, 0x7B])                  # e5m2
    u16 = struct.pack("<4H", 1, 65535, 300, 0)
    pkl = state_dict_pickle([("a", tensor_v3("0", 6, [2, 3], [3, 1], "float8_e4m3fn")),
                             ("b", tensor_v3("1", 4, [4], [1], "float8_e5m2")),
                             ("u", tensor_v3("2", 8, [2, 2], [1, 2], "uint16"))])
    with open(os.path.join(GOOD, "float8_v3.bin"), "wb") as f:
        f.write(zip_bytes(torch_archive(pkl, [("0", f8a), ("1", f8b), ("2", u16)])))
    u16t = struct.unpack("<4H", u16)
    write_expect(os.path.join(GOOD, "float8_v3.bin"),
                 [("a", "F8_E4M3", [2, 3], f8a), ("b", "F8_E5M2", [4], f8b),
                  ("u", "U16", [2, 2], struct.pack("<4H", u16t[0], u16t[2], u16t[1], u16t[3]))])

    # NumPy.
    rng = np.random.default_rng(5)
    arrays = {"w": rng.standard_normal((3, 4)).astype("<f4"), "ids": np.arange(5, dtype="<i8"),
              "mask": np.array([True, False, True]), "half": np.linspace(-1, 1, 6, dtype="<f2").reshape(2, 3),
              "be": np.arange(6, dtype=">f4").reshape(2, 3), "fort": np.asfortranarray(np.arange(12, dtype="<i4").reshape(3, 4)),
              "u16": np.array([1, 2, 65535], dtype="<u2"), "c": np.array([1 + 2j, -3j], dtype="<c8"),
              "scalar": np.array(7.5, dtype="<f8")}
    rows = [(k, NP_NAMES[v.dtype.str[1:]], list(v.shape), le_bytes_np(v)) for k, v in arrays.items()]
    np.savez(os.path.join(GOOD, "stored.npz"), **arrays)
    write_expect(os.path.join(GOOD, "stored.npz"), rows)
    np.savez_compressed(os.path.join(GOOD, "compressed.npz"), **arrays)
    write_expect(os.path.join(GOOD, "compressed.npz"), rows)
    # A larger deflated member, so reads cross the 64 KiB inflate buffer several times.
    big = {"big": (np.arange(200 * 300, dtype="<f4") % 97).reshape(200, 300), "bigt": np.asfortranarray(np.arange(300 * 70, dtype="<i4").reshape(300, 70))}
    np.savez_compressed(os.path.join(GOOD, "big_compressed.npz"), **big)
    write_expect(os.path.join(GOOD, "big_compressed.npz"),
                 [(k, NP_NAMES[v.dtype.str[1:]], list(v.shape), le_bytes_np(v)) for k, v in big.items()])
    z64 = [{"name": k + ".npy", "data": npy_bytes(arrays[k])} for k in ("w", "ids")]
    with open(os.path.join(GOOD, "zip64_central.npz"), "wb") as f:
        f.write(zip_bytes(z64, zip64_central=True, comment=b"an archive comment"))
    write_expect(os.path.join(GOOD, "zip64_central.npz"), [r for r in rows if r[0] in ("w", "ids")])
    for name, a, ver in (("c_order.npy", arrays["w"], (1, 0)), ("fortran.npy", arrays["fort"], (1, 0)),
                         ("bigendian.npy", arrays["be"], (2, 0)), ("v3.npy", arrays["half"], (3, 0))):
        with open(os.path.join(GOOD, name), "wb") as f:
            f.write(npy_bytes(a, ver))
        write_expect(os.path.join(GOOD, name), [(name[:-4], NP_NAMES[a.dtype.str[1:]], list(a.shape), le_bytes_np(a))])

    # Multi-file: the llama state dict in two archives plus an index.
    keys = list(sd)
    half = len(keys) // 2
    idx_dir = os.path.join(GOOD, "multi")
    os.makedirs(idx_dir)
    parts = [("pytorch_model-00001-of-00002.bin", keys[:half]), ("pytorch_model-00002-of-00002.bin", keys[half:])]
    wm = {}
    for fname, ks in parts:
        torch.save({k: sd[k] for k in ks}, os.path.join(idx_dir, fname))
        wm.update({k: fname for k in ks})
    with open(os.path.join(idx_dir, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.numel() * 2 for v in sd.values())}, "weight_map": wm}, f, indent=2)
    write_expect(os.path.join(idx_dir, "pytorch_model.bin.index.json"), torch_rows(sd))


# ---------------------------------------------------------------- hostile fixtures

def bad():
    for d in (BAD_TORCH, BAD_ZIP, BAD_NPY):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    cases = {BAD_TORCH: [], BAD_ZIP: [], BAD_NPY: []}

    def put(d, name, data, code, frag):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        cases[d].append((name, code, frag))

    ok_tensor = ("w", b"ctorch._utils\n_rebuild_tensor_v2\n" + op_tuple([
        op_tuple([op_unicode("storage"), b"ctorch\nFloatStorage\n", op_unicode("0"), op_unicode("cpu"), op_int(2)]) + b"Q",
        op_int(0), op_tuple([op_int(2)]), op_tuple([op_int(1)]), b"\x89", b"ccollections\nOrderedDict\n)R"]) + b"R")
    rec = [("0", struct.pack("<2f", 1.0, 2.0))]

    def archive(pkl, records=rec, **kw):
        return zip_bytes(torch_archive(pkl, records, **kw))

    touch = op_unicode("touch " + MARKER)
    put(BAD_TORCH, "global_os_system.bin", archive(b"\x80\x02cos\nsystem\n" + op_tuple([touch]) + b"R."), 3, "refused GLOBAL os.system")
    put(BAD_TORCH, "global_posix_system.bin", archive(b"\x80\x02cposix\nsystem\n" + op_tuple([touch]) + b"R."), 3, "refused GLOBAL posix.system")
    put(BAD_TORCH, "builtins_eval.bin", archive(b"\x80\x02cbuiltins\neval\n" + op_tuple([op_unicode("__import__('os').system('touch %s')" % MARKER)]) + b"R."), 3, "refused GLOBAL builtins.eval")
    put(BAD_TORCH, "reduce_unknown_callable.bin", archive(state_dict_pickle([ok_tensor, ("x", b"ctorch._utils\n_rebuild_device_tensor_from_numpy\n" + op_tuple([]) + b"R")])), 3, "refused GLOBAL torch._utils._rebuild_device_tensor_from_numpy")
    put(BAD_TORCH, "reduce_storage_type.bin", archive(state_dict_pickle([("x", b"ctorch\nFloatStorage\n" + op_tuple([op_int(4)]) + b"R")])), 3, "REDUCE calls a storage type")
    put(BAD_TORCH, "stack_global.bin", archive(b"\x80\x04" + b"\x8c\x02os\x8c\x06system\x93" + op_tuple([touch]) + b"R."), 3, "refused GLOBAL os.system")
    put(BAD_TORCH, "unknown_opcode.bin", archive(b"\x80\x02\xff."), 3, "refused pickle opcode 0xff")
    put(BAD_TORCH, "inst_opcode.bin", archive(b"\x80\x02(ios\nsystem\n" + touch + b"."), 3, "opcode 0x69 (INST)")
    put(BAD_TORCH, "pickle_no_stop.bin", archive(b"\x80\x02}"), 3, "pickle ends without STOP")
    put(BAD_TORCH, "stack_underflow.bin", archive(b"\x80\x02s."), 3, "stack underflow")
    put(BAD_TORCH, "memo_missing.bin", archive(b"\x80\x02h\x05."), 3, "memo lookup of an index never stored")
    put(BAD_TORCH, "setitem_on_list.bin", archive(b"\x80\x02]" + op_unicode("k") + op_unicode("v") + b"s."), 3, "SETITEM on something that is not a dict")
    put(BAD_TORCH, "not_a_dict.bin", archive(b"\x80\x02]."), 3, "not a state dict")
    put(BAD_TORCH, "missing_record.bin", archive(state_dict_pickle([ok_tensor]), records=[]), 3, "which the archive lacks")
    put(BAD_TORCH, "record_size_mismatch.bin", archive(state_dict_pickle([ok_tensor]), records=[("0", b"\0" * 12)]), 3, "has 12 bytes but its persistent id declares 2 elements")
    big_view = ("w", ok_tensor[1].replace(op_tuple([op_int(2)]) + op_tuple([op_int(1)]), op_tuple([op_int(2)]) + op_tuple([op_int(5)]), 1))
    put(BAD_TORCH, "stride_out_of_bounds.bin", archive(state_dict_pickle([big_view])), 3, "reaches past the 8 bytes of record")
    put(BAD_TORCH, "complex128.bin", archive(state_dict_pickle([("z", ok_tensor[1].replace(b"FloatStorage", b"ComplexDoubleStorage"))]), records=[("0", b"\0" * 32)]), 3, "torch.complex128, which has no safetensors equivalent")
    put(BAD_TORCH, "no_version.bin", zip_bytes(torch_archive(state_dict_pickle([ok_tensor]), rec)[:-1]), 3, "without a archive/version record")
    put(BAD_TORCH, "bad_byteorder.bin", archive(state_dict_pickle([ok_tensor]), extra=[("byteorder", b"middle")]), 3, "not 'little' or 'big'")
    put(BAD_TORCH, "torchscript.bin", archive(state_dict_pickle([ok_tensor]), extra=[("constants.pkl", b"\x80\x02)."), ("code/__torch__.py", b"")]), 3, "TorchScript archive")
    put(BAD_TORCH, "legacy_format.bin", bytes.fromhex("80028a0a6cfc9c46f9206aa850192e") + bytes.fromhex("80024de9032e"), 3, "legacy (pre-1.6) torch.save format")
    put(BAD_TORCH, "bare_pickle.bin", state_dict_pickle([("epoch", op_int(3)), ("note", op_unicode("not a torch.save archive"))]), 3, "a bare pickle, not a torch.save zip archive")
    put(BAD_TORCH, "legacy_pid_in_zip.bin", archive(state_dict_pickle([("w", ok_tensor[1].replace(op_int(2) + b"tQ", op_int(2) + b"NtQ"))])), 3, "legacy (pre-1.6) torch.save format inside a zip")
    put(BAD_TORCH, "two_roots.bin", zip_bytes(torch_archive(state_dict_pickle([ok_tensor]), rec) + [{"name": "other/x", "data": b""}]), 3, "outside the archive folder")
    put(BAD_TORCH, "no_root_folder.bin", zip_bytes([{"name": "data.pkl", "data": b"\x80\x02}."}]), 3, "is not in a top-level folder")
    def level(i):  # {'a': level i-1, 'b': the same object again}: 2^25 paths through 26 dicts
        if i == 0:
            return b"}" + op_unicode("w") + ok_tensor[1] + b"sq\x00"
        return (b"}" + op_unicode("a") + level(i - 1) + b"s" + op_unicode("b") + b"h" + bytes([i - 1]) + b"sq" + bytes([i]))
    blow = b"\x80\x02" + level(25)
    put(BAD_TORCH, "shared_subtree_blowup.bin", archive(blow + b"."), 3, "refers to its shared containers too many times")
    put(BAD_TORCH, "cycle.bin", archive(b"\x80\x02}q\x00" + op_unicode("a") + b"h\x00s."), 3, "nested more than 32 deep (or a cycle)")
    put(BAD_TORCH, "bad_utf8_key.bin", archive(b"\x80\x02}X\x02\x00\x00\x00\xff\xfe" + ok_tensor[1] + b"s."), 3, "not valid UTF-8")

    # ZIP container.
    good_entries = torch_archive(state_dict_pickle([ok_tensor]), rec)
    full = zip_bytes(good_entries)
    put(BAD_ZIP, "dotdot_path.bin", zip_bytes(good_entries + [{"name": "archive/../../etc/passwd", "data": b"x"}]), 3, "unsafe name 'archive/../../etc/passwd'")
    put(BAD_ZIP, "absolute_path.bin", zip_bytes(good_entries + [{"name": "/archive/x", "data": b"x"}]), 3, "unsafe name '/archive/x'")
    put(BAD_ZIP, "backslash_path.bin", zip_bytes(good_entries + [{"name": "archive\\..\\x", "data": b"x"}]), 3, "unsafe name")
    enc = [dict(e) for e in good_entries]
    enc[0]["flags"] = 0x801
    put(BAD_ZIP, "encrypted.bin", zip_bytes(enc), 3, "is encrypted or patched")
    dup = good_entries + [dict(good_entries[1])]
    put(BAD_ZIP, "duplicate_name.bin", zip_bytes(dup), 3, "duplicate entry name 'archive/data/0'")
    ov = [dict(e) for e in good_entries]
    ov[1]["ofs"] = 0  # central directory points both entries at the first local header
    put(BAD_ZIP, "overlapping.bin", zip_bytes(ov), 3, "overlapping entries")
    # Overlap with consistent local headers: entry 2 claims a size running into entry 3.
    ov2 = [dict(e) for e in good_entries]
    ov2[1]["csize"] = ov2[1]["usize"] = 100
    put(BAD_ZIP, "overlapping_sizes.bin", zip_bytes(ov2), 3, "overlaps the next")
    bad_crc = [dict(e) for e in good_entries]
    bad_crc[1]["crc"] = zlib.crc32(bad_crc[1]["data"]) ^ 1
    put(BAD_ZIP, "crc_mismatch.bin", zip_bytes(bad_crc), 3, "CRC-32 mismatch")
    bad_crc_pkl = [dict(e) for e in good_entries]
    bad_crc_pkl[0]["crc"] = 0x12345678
    put(BAD_ZIP, "crc_mismatch_pickle.bin", zip_bytes(bad_crc_pkl), 3, "CRC-32 mismatch")
    eocd = full.rfind(b"PK\x05\x06")
    cd = struct.unpack("<I", full[eocd + 16:eocd + 20])[0]
    put(BAD_ZIP, "empty.bin", b"PK\x03\x04", 3, "too short for a zip archive")
    put(BAD_ZIP, "truncated_in_data.bin", full[:cd // 2], 3, "no end of central directory record")
    put(BAD_ZIP, "truncated_central.bin", full[:cd + 20] + full[eocd:], 3, "does not end where the end records start")
    put(BAD_ZIP, "truncated_eocd.bin", full[:-5], 3, "no end of central directory record")
    put(BAD_ZIP, "truncated_local.bin", full[:10] + full[cd:], 3, "")
    z64 = [dict(e) for e in good_entries]
    z64[1]["usize"] = z64[1]["csize"] = 1 << 40
    put(BAD_ZIP, "zip64_bogus_sizes.bin", zip_bytes(z64, zip64_central=True), 3, "overlaps the next")
    z64b = zip_bytes(good_entries, zip64_central=True)
    loc = z64b.rfind(b"PK\x06\x07")
    put(BAD_ZIP, "zip64_bad_locator.bin", z64b[:loc + 8] + struct.pack("<Q", 1 << 50) + z64b[loc + 16:], 3, "ZIP64 locator")
    put(BAD_ZIP, "method_bzip2.bin", zip_bytes([dict(good_entries[0], method=12, comp=b"xx")] + good_entries[1:]), 3, "compression method 12")
    stored_mismatch = [dict(e) for e in good_entries]
    stored_mismatch[0]["usize"] = len(stored_mismatch[0]["data"]) + 1
    put(BAD_ZIP, "stored_size_mismatch.bin", zip_bytes(stored_mismatch), 3, "stored entry 'archive/data.pkl' has compressed size")
    # The headers below are consistent with the declared sizes, so only inflating finds out.
    hdr = npy_bytes(b"", header="{'descr': '<f4', 'fortran_order': False, 'shape': (992,), }")
    put(BAD_ZIP, "deflate_bomb.npz", zip_bytes([{"name": "x.npy", "data": hdr + bytes(64 << 20), "method": 8, "usize": len(hdr) + 3968}]), 3, "inflates past its declared size")
    hdr = npy_bytes(b"", header="{'descr': '<f4', 'fortran_order': False, 'shape': (250,), }")
    put(BAD_ZIP, "deflate_short.npz", zip_bytes([{"name": "x.npy", "data": hdr + bytes(16), "method": 8, "usize": len(hdr) + 1000}]), 3, "deflate stream ends after")
    put(BAD_ZIP, "deflate_corrupt.npz", zip_bytes([{"name": "x.npy", "data": npy_bytes(np.zeros(4, "<f4")), "method": 8, "comp": b"\xff" * 40}]), 3, "corrupt deflate data")
    put(BAD_ZIP, "local_name_differs.bin", zip_bytes([dict(good_entries[0], local_name=b"archive/data.pkX")] + good_entries[1:]), 3, "the local header at offset 0 names 'archive/data.pkX'")
    put(BAD_ZIP, "not_zip.npz", b"PK\x03\x04" + b"\0" * 40, 3, "no end of central directory record")

    # NumPy.
    f4a = np.arange(6, dtype="<f4")
    f4 = f4a.tobytes()
    put(BAD_NPY, "object_dtype.npy", npy_bytes(b"\x80\x02]." , header="{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"), 3, "object arrays")
    put(BAD_NPY, "call_expression.npy", npy_bytes(f4, header="{'descr': __import__('os').system('touch %s'), 'fortran_order': False, 'shape': (6,), }" % MARKER), 3, "expected a quoted string")
    put(BAD_NPY, "structured.npy", npy_bytes(f4, header="{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }"), 3, "structured dtypes")
    put(BAD_NPY, "extra_key.npy", npy_bytes(f4, header="{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1, }"), 3, "unexpected key")
    put(BAD_NPY, "missing_key.npy", npy_bytes(f4, header="{'descr': '<f4', 'shape': (6,), }"), 3, "missing 'descr', 'fortran_order' or 'shape'")
    put(BAD_NPY, "dup_key.npy", npy_bytes(f4, header="{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,), }"), 3, "duplicate key")
    put(BAD_NPY, "short_data.npy", npy_bytes(f4[:-4], header="{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }"), 3, "header + data should be")
    put(BAD_NPY, "trailing_data.npy", npy_bytes(f4 + b"\0" * 4, header="{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }"), 3, "header + data should be")
    put(BAD_NPY, "version_4.npy", b"\x93NUMPY\x04\x00" + npy_bytes(f4a)[8:], 3, ".npy format version 4.0")
    put(BAD_NPY, "header_too_long.npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", 1 << 30) + b"{", 3, "exceeds the 10000-byte limit")
    put(BAD_NPY, "header_truncated.npy", npy_bytes(f4a)[:40], 3, ".npy header needs")
    put(BAD_NPY, "longdouble.npy", npy_bytes(b"\0" * 16, header="{'descr': '<f16', 'fortran_order': False, 'shape': (1,), }"), 3, "unsupported descr '<f16'")
    put(BAD_NPY, "shape_overflow.npy", npy_bytes(b"", header="{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"), 3, "overflows 64 bits")
    put(BAD_NPY, "fortran_not_bool.npy", npy_bytes(f4, header="{'descr': '<f4', 'fortran_order': 0, 'shape': (6,), }"), 3, "'fortran_order' is not True or False")
    put(BAD_NPY, "no_newline.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", 4) + b"{}  " + f4, 3, "does not end with a newline")
    put(BAD_NPY, "object_in_npz.npz", zip_bytes([{"name": "o.npy", "data": npy_bytes(b"\x80\x02].", header="{'descr': '|O', 'fortran_order': False, 'shape': (1,), }")}]), 3, "object arrays")

    for d, rows in cases.items():
        with open(os.path.join(d, "CASES"), "w") as f:
            f.write("# Generated by testdata/gen_torch_fixtures.py; format in tests/cli/bad_inputs.sh.\n")
            f.write("# FILE\tEXIT\tFRAGMENT\t[SUBCOMMAND]\n")
            for name, code, frag in rows:
                f.write("%s\t%d\t%s\n" % (name, code, frag))
    return sum(len(r) for r in cases.values())


if __name__ == "__main__":
    good()
    n = bad()
    print("wrote fixtures under %s and %d malformed cases" % (TOP, n), file=sys.stderr)
