"""Writes tests/fuzz/corpus/dcp/ from DCP directories (fuzz_dcp.c's record format:
[u32 length][.metadata] then [u32 length][__k_0.distcp] for k = 0, 1, ...).

    python3 tests/fuzz/make_dcp_corpus.py NAME DCP_DIR [NAME DCP_DIR ...]

The seeds in the corpus were made from directories PyPI torch 2.5.1's dcp.save wrote: one
process (bf16 and int32 tensors and a non-tensor item), and two gloo processes with DTensors
sharded on dim 0 (uneven chunks in two files)."""
import os
import struct
import sys

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "dcp")
os.makedirs(out, exist_ok=True)
args = sys.argv[1:]
for name, d in zip(args[::2], args[1::2]):
    parts = [os.path.join(d, ".metadata")]
    k = 0
    while os.path.exists(os.path.join(d, "__%d_0.distcp" % k)):
        parts.append(os.path.join(d, "__%d_0.distcp" % k))
        k += 1
    with open(os.path.join(out, name), "wb") as f:
        for p in parts:
            data = open(p, "rb").read()
            f.write(struct.pack("<I", len(data)) + data)
