"""The torch archive writer read by PyPI torch 2.5.1 with weights_only=True, the way
Megatron-LM loads model_optim_rng.pt under torch >= 2.6: only torch's default globals plus
those Megatron registers (megatron/core/safe_globals.py; here argparse.Namespace and the stub
enums) may appear.  float8 e4m3 tensors go through _rebuild_tensor_v3 and UntypedStorage.
See torch_write_cases.py for what is checked and how."""
import argparse
import sys

import torch

import torch_write_cases as cases


def load(path):
    import megatron.core.enums as e
    import megatron.core.transformer.enums as te
    # builtins.set (a set in args, pickled as protocol 2 does: set(list)) is not among
    # torch 2.5.1's default globals (its _get_allowed_globals has bytearray, not set).
    torch.serialization.add_safe_globals([argparse.Namespace, e.ModelType, te.AttnBackend, set])
    return torch.load(path, weights_only=True)


if __name__ == "__main__":
    sys.exit(cases.run("torch %s weights_only" % torch.__version__, load, float8=True))
