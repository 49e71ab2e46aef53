#!/usr/bin/python3
"""Writes the fixtures with non-persistent buffers under testdata/models/ (committed; rerun
to regenerate).  Older checkpoints carry buffers that every loader rebuilds and none reads:

  tiny-llama-bin      tiny-llama's tensors (same values, BF16) plus each layer's
                      model.layers.N.self_attn.rotary_emb.inv_freq (F32 [head_dim/2]), as a
                      PyTorch .bin (torch.save zip archive, pickle protocol 2,
                      _rebuild_tensor_v2 over typed storages, as torch 1.x wrote them)
  tiny-gpt2-buffers   tiny-gpt2's tensors plus transformer.h.N.attn.bias (the causal mask,
                      F32 [1, 1, n_positions, n_positions]) and attn.masked_bias (F32 [],
                      -1e4), as safetensors

Each has its model's config.json.  The weights are byte for byte those of gen_fixtures.py's
tiny-llama and tiny-gpt2, so a split that skips the buffers must write the same rank files
as a split of those.  Only the standard library is used: the zip and the pickle are written
here, opcode by opcode.

Usage: testdata/gen_buffer_fixtures.py [OUTDIR]   (default: testdata/models beside this script)
"""
import io
import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures  # noqa: E402  (beside this script; standard library only)
from gen_torch_fixtures import op_int, op_tuple, op_unicode  # noqa: E402  (the same pickle opcodes)

STORAGE = {"BF16": "BFloat16Storage", "F32": "FloatStorage"}
ELEM = {"BF16": 2, "F32": 4}


def strides(shape):
    out, s = [], 1
    for d in reversed(shape):
        out.insert(0, s)
        s *= d
    return out


def torch_bin(tensors):
    """tensors: list of (name, shape, dtype, data bytes) -> the bytes of a torch.save archive
    of an OrderedDict state dict, one storage per tensor."""
    body, records = b"", []
    for key, (name, shape, dtype, data) in enumerate(tensors):
        numel = len(data) // ELEM[dtype]
        pid = op_tuple([op_unicode("storage"), b"ctorch\n" + STORAGE[dtype].encode() + b"\n", op_unicode(str(key)),
                        op_unicode("cpu"), op_int(numel)]) + b"Q"
        args = [pid, op_int(0), op_tuple([op_int(d) for d in shape]), op_tuple([op_int(s) for s in strides(shape)]),
                b"\x89", b"ccollections\nOrderedDict\n)R"]
        body += op_unicode(name) + b"ctorch._utils\n_rebuild_tensor_v2\n" + op_tuple(args) + b"R"
        records.append((str(key), data))
    pkl = b"\x80\x02ccollections\nOrderedDict\n)R(" + body + b"u."
    entries = [("archive/data.pkl", pkl)] + [("archive/data/" + k, d) for k, d in records]
    entries.append(("archive/version", b"3\n"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in entries:
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def llama_bin(out):
    tensors, config, dtype = gen_fixtures.build("tiny-llama")
    hd, theta = config["head_dim"], config["rope_theta"]
    inv_freq = [gen_fixtures.f32(1.0 / theta ** (2 * i / hd)) for i in range(hd // 2)]
    rows = [(n, list(s), dtype, d) for n, s, d in tensors]
    for i in range(config["num_hidden_layers"]):
        rows.append(("model.layers.%d.self_attn.rotary_emb.inv_freq" % i, [hd // 2], "F32",
                     gen_fixtures.encode(inv_freq, "F32")))
    rows.sort()
    d = os.path.join(out, "tiny-llama-bin")
    os.makedirs(d, exist_ok=True)
    gen_fixtures.write(os.path.join(d, "pytorch_model.bin"), torch_bin(rows))
    gen_fixtures.write_config(d, config)


def gpt2_buffers(out):
    tensors, config, dtype = gen_fixtures.build("tiny-gpt2")
    n = config["n_positions"]
    mask = [1.0 if c <= r else 0.0 for r in range(n) for c in range(n)]
    rows = list(tensors)
    for i in range(config["n_layer"]):
        rows.append(("transformer.h.%d.attn.bias" % i, (1, 1, n, n), gen_fixtures.encode(mask, dtype)))
        rows.append(("transformer.h.%d.attn.masked_bias" % i, (), gen_fixtures.encode([-1e4], dtype)))
    d = os.path.join(out, "tiny-gpt2-buffers")
    os.makedirs(d, exist_ok=True)
    gen_fixtures.write(os.path.join(d, "model.safetensors"), gen_fixtures.safetensors_bytes(rows, dtype))
    gen_fixtures.write_config(d, config)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
    llama_bin(out)
    gpt2_buffers(out)


if __name__ == "__main__":
    main()
