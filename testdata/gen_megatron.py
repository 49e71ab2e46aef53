#!/usr/bin/python3
"""Writes a tiny Megatron-LM legacy checkpoint (--ckpt-format torch) for CLI tests, at test
time (no committed binaries): the writer is tests/interop/megatron/megatron_fixture.py, which follows
the specification (the targets spec Part 2), independently of tpshard.  Run with a Python that has
torch (Debian's /usr/bin/python3 or the interop venvs):

    gen_megatron.py OUT [--tp 2] [--pp 2] [--pp-layers 1,3] [--layers 4] [--legacy]
                    [--extra none|bytesio|uint8|empty|absent] [--release | --iteration N]
                    [--tied] [--optimizer] [--rng] [--vocab 37] [--seed 0]
                    [--full FULL.safetensors]

OUT receives latest_checkpointed_iteration.txt and iter_NNNNNNN/ (or release/);
--full also writes the model's full tensors (Megatron-Core global names, true vocabulary).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "interop", "megatron"))
import megatron_fixture as mf  # noqa: E402
from gen_torch_fixtures import write_safetensors  # noqa: E402  (beside this script)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--pp-layers")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--legacy", action="store_true")
    p.add_argument("--extra", default="none", choices=mf.EXTRA_KINDS)
    p.add_argument("--release", action="store_true")
    p.add_argument("--iteration", type=int, default=1)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--optimizer", action="store_true")
    p.add_argument("--rng", action="store_true")
    p.add_argument("--vocab", type=int, default=37)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--full")
    o = p.parse_args()
    args = mf.megatron_args(num_layers=o.layers, vocab_size=o.vocab, untie_embeddings_and_output_weights=not o.tied)
    full = mf.random_full(args, seed=o.seed)
    mf.write_checkpoint(o.out, full, args, o.tp, o.pp,
                        pp_layers=[int(x) for x in o.pp_layers.split(",")] if o.pp_layers else None,
                        iteration="release" if o.release else o.iteration, legacy_names=o.legacy,
                        extra_state=o.extra, with_optimizer=o.optimizer, with_rng=o.rng)
    if o.full:
        write_safetensors(o.full, {k: v.float() for k, v in full.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
