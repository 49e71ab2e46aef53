#!/usr/bin/python3
"""Copies a safetensors checkpoint directory and plants non-finite weights in it, written
with nothing but the file format (not tpshard), for tests/cli/verify_nonfinite.sh.

  poison_weights.py SRC DST nan TENSOR INDEX  one NaN at flat element INDEX of TENSOR
  poison_weights.py SRC DST random SEED       every tensor's bytes random (seeded); prints
                                              per tensor: NAME COUNT FIRST (its non-finite
                                              values by the dtype's bit pattern; FIRST -1: none)
"""
import json
import os
import random
import shutil
import struct
import sys

NAN = {"BF16": b"\xc0\x7f", "F16": b"\x00\x7e", "F32": b"\x00\x00\xc0\x7f"}
SIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8}


def nonfinite(dtype, e):
    v = int.from_bytes(e, "little")
    if dtype == "BF16":
        return v & 0x7F80 == 0x7F80
    if dtype == "F16":
        return v & 0x7C00 == 0x7C00
    if dtype == "F32":
        return v & 0x7F800000 == 0x7F800000
    if dtype == "F64":
        return v & 0x7FF0000000000000 == 0x7FF0000000000000
    return False


def main():
    src, dst, mode = sys.argv[1:4]
    shutil.copytree(src, dst)
    files = [f for f in sorted(os.listdir(dst)) if f.endswith(".safetensors")]
    rng = random.Random(int(sys.argv[4]) if mode == "random" else 0)
    for f in files:
        path = os.path.join(dst, f)
        with open(path, "rb") as fh:
            blob = bytearray(fh.read())
        n = struct.unpack("<Q", blob[:8])[0]
        header = json.loads(blob[8:8 + n])
        base = 8 + n
        for name, t in sorted(header.items()):
            if name == "__metadata__":
                continue
            lo, hi = t["data_offsets"]
            if mode == "nan" and name == sys.argv[4]:
                at = base + lo + int(sys.argv[5]) * SIZE[t["dtype"]]
                blob[at:at + SIZE[t["dtype"]]] = NAN[t["dtype"]]
            elif mode == "random":
                blob[base + lo:base + hi] = bytes(rng.getrandbits(8) for _ in range(hi - lo))
                es = SIZE.get(t["dtype"], 0)
                bad = [i for i in range((hi - lo) // es if es else 0)
                       if nonfinite(t["dtype"], blob[base + lo + i * es:base + lo + (i + 1) * es])]
                print(name, len(bad), bad[0] if bad else -1)
        with open(path, "wb") as fh:
            fh.write(blob)


main()
