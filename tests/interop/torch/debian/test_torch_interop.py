"""torch.load / numpy.load against tpshard on the torch, npz and npy fixtures.

For every good fixture: the tensors torch.load(weights_only=True) or numpy.load return have
the names, dtypes and shapes `tpshard inspect --json` reports, and their C-order
little-endian bytes equal FIXTURE.expect, the file tests/unit/test_formats_torch_read.c holds
tpshard's reader to; so tpshard's bytes equal torch's and numpy's.  The hostile pickles are
shown to be live (plain pickle would run them) while torch's weights-only loader and tpshard
both refuse them.  Prints ok / not ok / skip lines; exits non-zero on any failure.
"""
import json
import os
import pickle
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import torch

from tap import TOP, TPSHARD

TD = os.path.join(TOP, "testdata", "torch")
failures = 0

TORCH_DT = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
            torch.bool: "BOOL", torch.complex64: "C64"}
NP_DT = {"f8": "F64", "f4": "F32", "f2": "F16", "i8": "I64", "i4": "I32", "i2": "I16", "i1": "I8", "u8": "U64",
         "u4": "U32", "u2": "U16", "u1": "U8", "b1": "BOOL", "c8": "C64"}


def torch_version():
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2] if x.isdigit())


def report(good, what, detail=""):
    global failures
    if good:
        print("ok - " + what)
    else:
        failures += 1
        print("not ok - " + what)
        for line in str(detail).splitlines()[:10]:
            print("#   " + line)


def le_bytes(t):
    if isinstance(t, torch.Tensor):
        t = t.detach().contiguous()
        a = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
    else:
        a = np.ascontiguousarray(t)
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def flatten(obj, prefix, out):
    """The naming rule of formats/torch/torch.h: key paths joined with '.', list items by index."""
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            flatten(v, "%s.%s" % (prefix, k) if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flatten(v, "%s.%d" % (prefix, i) if prefix else str(i), out)


def choose(d):
    while not any(isinstance(v, torch.Tensor) for v in d.values()):
        nxt = next((d[k] for k in ("state_dict", "model", "module") if isinstance(d.get(k), dict)), None)
        if nxt is None:
            break
        d = nxt
    return d


def reference(path):
    """name -> (dtype string, shape list, bytes) from torch or numpy."""
    out = {}
    if path.endswith(".npy"):
        a = np.load(path)
        base = os.path.basename(path)[:-4]
        return {base: (NP_DT[a.dtype.str[1:]], list(a.shape), le_bytes(a))}
    if path.endswith(".npz"):
        with np.load(path) as z:
            return {k: (NP_DT[z[k].dtype.str[1:]], list(z[k].shape), le_bytes(z[k])) for k in z.files}
    if os.path.isdir(path) or path.endswith(".index.json"):
        idx = path if path.endswith(".json") else os.path.join(path, "pytorch_model.bin.index.json")
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        for fn in files:
            out.update(reference(os.path.join(os.path.dirname(idx), fn)))
        return out
    flat = {}
    try:
        obj = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as e:
        # torch < 2 has no BINFLOAT in its weights-only set; the nested fixtures hold an
        # optimizer's float lr.  They are this repository's own generated files, so the full
        # unpickler is safe for them; tpshard's handling of floats is what is under test.
        if "Unsupported operand 71" not in str(e) or torch_version() >= (2, 0):
            raise
        print("# %s: torch %s weights-only loader lacks BINFLOAT; loading our own fixture fully" % (os.path.basename(path), torch.__version__))
        obj = torch.load(path)
    flatten(choose(obj), "", flat)
    return {k: (TORCH_DT[v.dtype], list(v.shape), le_bytes(v)) for k, v in flat.items()}


def expected_file(path):
    rows = {}
    with open(path) as f:
        for line in f:
            name, dt, shape, hexd = line.rstrip("\n").split("\t")
            rows[name] = (dt, [int(x) for x in shape.split(",")] if shape else [], bytes.fromhex(hexd))
    return rows


def inspect(path):
    p = subprocess.run([TPSHARD, "inspect", "--json", path], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("tpshard inspect exited %d: %s" % (p.returncode, p.stderr))
    return {t["name"]: (t["dtype"], t["shape"]) for t in json.loads(p.stdout)["tensors"]}


def main():
    if not os.access(TPSHARD, os.X_OK):
        print("skip - torch interop: %s is not built" % TPSHARD)
        return 0
    names = sorted(f for f in os.listdir(TD) if f.endswith((".bin", ".npz", ".npy"))) + ["multi"]
    for name in names:
        path = os.path.join(TD, name)
        exp = expected_file(os.path.join(TD, "multi/pytorch_model.bin.index.json.expect" if name == "multi" else name + ".expect"))
        try:
            ref = reference(path)
        except Exception as e:  # torch 1.13 has no float8 / uint16 dtypes
            if name == "float8_v3.bin" and not hasattr(torch, "float8_e4m3fn"):
                print("skip - %s: torch %s cannot load float8 tensors (%s); tpshard is checked against the crafted .expect only"
                      % (name, torch.__version__, type(e).__name__))
                continue
            report(False, "%s loads with torch/numpy" % name, e)
            continue
        try:
            got = inspect(path)
        except Exception as e:
            report(False, "%s: tpshard inspect" % name, e)
            continue
        meta_ref = {k: (v[0], v[1]) for k, v in ref.items()}
        report(got == meta_ref, "%s: tpshard names, dtypes and shapes equal %s's" % (name, "numpy" if name.endswith(("npz", "npy")) else "torch"),
               "tpshard: %s\nreference: %s" % (sorted(got.items())[:4], sorted(meta_ref.items())[:4]))
        if name == "bigendian.bin":
            # torch < 2.1 ignores the byteorder record, so its values are byte-swapped here.
            if torch_version() < (2, 1):
                print("skip - %s: torch %s ignores the byteorder record; bytes checked against the original tensors in .expect"
                      % (name, torch.__version__))
                continue
        same = {k: v[2] for k, v in ref.items()} == {k: v[2] for k, v in exp.items()}
        report(same, "%s: torch/numpy bytes equal the .expect bytes tpshard's reader is tested against" % name)

    # Hostile pickles: live payloads, refused by torch's weights-only loader and by tpshard.
    for case in ("global_os_system", "builtins_eval"):
        path = os.path.join(TOP, "testdata", "bad", "torch", case + ".bin")
        with tempfile.TemporaryDirectory() as d:
            with zipfile.ZipFile(path) as z:
                pkl = z.read("archive/data.pkl")
            cwd = os.getcwd()
            os.chdir(d)
            try:
                try:
                    pickle.loads(pkl)  # our own fixture: its payload is `touch tpshard_pwned_marker`
                except Exception:
                    pass
                live = os.path.exists("tpshard_pwned_marker")
                os.remove("tpshard_pwned_marker") if live else None
                try:
                    torch.load(path, weights_only=True)
                    torch_refused = False
                except Exception:
                    torch_refused = True
                p = subprocess.run([TPSHARD, "inspect", path], capture_output=True, text=True)
                report(live, "%s: the payload is live under plain pickle" % case)
                report(torch_refused, "%s: torch.load(weights_only=True) refuses it" % case)
                report(p.returncode == 3 and not os.path.exists("tpshard_pwned_marker"),
                       "%s: tpshard refuses it (exit 3) and runs nothing" % case, p.stderr)
            finally:
                os.chdir(cwd)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
