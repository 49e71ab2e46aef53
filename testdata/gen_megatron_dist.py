#!/usr/bin/env python3
"""Writes the Megatron-Core torch_dist catalogue, testdata/bad/megatron_dist/: one tiny
checkpoint saved by real megatron-core (GPTModel ranks at tp 2 on gloo, dist_checkpointing.
save, with the RNG state as Megatron saves it; no optimizer, to keep it small) and the hostile
copies made from it (CASES lines in the format of tests/cli/bad_inputs.sh; each FILE is an
iteration directory).  tests/cli/megatron_dist.sh runs split and merge on the same cases and
checks that nothing is written.

Run with the Megatron tier (build/venv-megatron, tests/interop/megatron/setup_megatron.sh):
    build/venv-megatron/bin/python3 testdata/gen_megatron_dist.py
The committed directories are what matters, not re-running this (pickles and zip streams
are not promised identical across versions).
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop", "megatron"))
sys.path.insert(0, HERE)


def bad_common(d):
    """common.pt whose args hold a class no allow-list has."""
    import datetime
    import torch
    p = os.path.join(d, "common.pt")
    common = torch.load(p, weights_only=False)
    common["args"].started = datetime.datetime(2024, 1, 1)
    torch.save(common, p)


def zero_layers(d):
    """args.num_layers = 0: no layer to place the stacked decoder tensors in."""
    import torch
    p = os.path.join(d, "common.pt")
    common = torch.load(p, weights_only=False)
    common["args"].num_layers = 0
    torch.save(common, p)


def bad_backend(d):
    with open(os.path.join(d, "metadata.json"), "w") as f:
        f.write('{"sharded_backend": "zarr", "sharded_backend_version": 1}')


def main():
    import megatron_real as mr
    from gen_dcp_fixtures import mutations, write_cases
    bad = os.path.join(HERE, "bad", "megatron_dist")
    shutil.rmtree(bad, ignore_errors=True)
    os.makedirs(bad)
    args = mr.llama_args(16, 8, 2, 2, 1, 16, max_pos=16, make_vocab_size_divisible_by=4)
    root = os.path.join(bad, "saved")
    mr.save_dist_checkpoint(args, 2, 1, root, optimizer=False)
    good = os.path.join(bad, "tp2_iter")
    os.rename(os.path.join(root, "iter_0000001"), good)
    shutil.rmtree(root)
    cases = mutations("embedding.word_embeddings.weight")
    cases = [c for c in cases if c[0] in ("truncated_metadata", "truncated_distcp", "chunk_past_tensor")]
    cases += [("unknown_class_in_common", bad_common, "refused GLOBAL datetime.datetime"),
              ("zarr_backend", bad_backend, "only torch_dist"),
              ("zero_layers", zero_layers, "args.num_layers is not a positive integer")]
    write_cases(bad, "gen_megatron_dist.py", "an iteration directory", good, "torch_dist, saved at tp 2 x pp 1",
                cases)


if __name__ == "__main__":
    main()
