"""The Python baseline of `make bench`: a tensor-parallel splitter of the kind users write.

    torch_split.py SRC.safetensors --tp T -o DIR     split with safetensors + torch.chunk
    torch_split.py --compare A.safetensors B.safetensors   exit 1 unless same names and tensors

It applies the Llama rules the way Megatron/vLLM users code them by hand: vocabulary, q/k/v
and gate/up cut along dim 0 (vocabulary padded with zero rows to a multiple of T, K/V heads
replicated when T exceeds their count), o_proj and down_proj along dim 1, norms replicated.
Every rank's tensors are collected, then each rank is written with safetensors' save_file.
It shares no code with tpshard, so equal output is an independent check of the split.
"""
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

HEAD_DIM = 128


def rank_slices(name, t, tp):
    """The tp slices of tensor t, rank order."""
    if name.endswith("norm.weight"):
        return [t] * tp
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        pad = (-t.shape[0]) % tp
        if pad:
            t = torch.cat([t, t.new_zeros((pad,) + tuple(t.shape[1:]))])
        return torch.chunk(t, tp, dim=0)
    if name.endswith(("k_proj.weight", "v_proj.weight")):
        heads = t.shape[0] // HEAD_DIM
        if tp > heads:  # GQA: each KV head is shared by tp/heads ranks
            per = torch.chunk(t, heads, dim=0)
            return [per[r * heads // tp] for r in range(tp)]
        return torch.chunk(t, tp, dim=0)
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return torch.chunk(t, tp, dim=1)
    return torch.chunk(t, tp, dim=0)


def split(src, tp, out):
    os.makedirs(out, exist_ok=True)
    ranks = [dict() for _ in range(tp)]
    with safe_open(src, framework="pt") as f:
        for name in f.keys():
            for r, piece in enumerate(rank_slices(name, f.get_tensor(name), tp)):
                ranks[r][name] = piece.contiguous()
    for r in range(tp):
        save_file(ranks[r], os.path.join(out, f"model-rank-{r}-of-{tp}.safetensors"),
                  metadata={"format": "pt", "tp_rank": str(r), "tp_size": str(tp)})


def compare(a, b):
    with safe_open(a, framework="pt") as fa, safe_open(b, framework="pt") as fb:
        ka, kb = sorted(fa.keys()), sorted(fb.keys())
        if ka != kb:
            print(f"torch_split: {a} and {b} hold different tensor names", file=sys.stderr)
            return 1
        for k in ka:
            x, y = fa.get_tensor(k), fb.get_tensor(k)
            if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x.view(torch.int16), y.view(torch.int16)):
                print(f"torch_split: tensor {k} differs between {a} and {b}", file=sys.stderr)
                return 1
    print(f"torch_split: {len(ka)} tensors identical in {os.path.basename(a)} and {os.path.basename(b)}")
    return 0


def main(argv):
    if len(argv) == 3 and argv[0] == "--compare":
        return compare(argv[1], argv[2])
    if len(argv) == 5 and argv[1] == "--tp" and argv[3] == "-o":
        split(argv[0], int(argv[2]), argv[4])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
