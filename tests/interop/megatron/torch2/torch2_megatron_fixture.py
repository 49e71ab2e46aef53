"""The Megatron fixture writer (megatron_fixture.py) under PyPI torch 2: every rank file it
writes loads with torch.load(weights_only=True) once Megatron's safe_globals.py allow-list is
registered (the form Megatron itself loads at torch >= 2.6: enums as Class(value), never
getattr), and tpshard reads torch 2's archives (byteorder, .data/serialization_id records,
numpy 2's numpy._core names in rng_state) as it reads torch 1.13's
(test_megatron_read.check_fixture: bytes, _extra_state keys, args JSON, inspect)."""
import argparse
import enum
import io
import os
import pathlib
import pickle
import shutil
import signal
import sys
import tempfile

import tap

try:
    import numpy as np
    import torch
    import megatron_fixture as mf
    import test_megatron_read as tmr
    from megatron.core.enums import ModelType
    from megatron.core.rerun_state_machine import RerunMode, RerunState
    from megatron.core.transformer.enums import AttnBackend
except Exception as e:  # noqa: BLE001
    print("skip - torch2_megatron_fixture: cannot import torch/numpy/the fixture (%s)" % e)
    sys.exit(0)


class Plain(enum.Enum):
    a = 1


def main():
    reconstruct = getattr(getattr(np, "_core", None) or np.core, "multiarray")._reconstruct
    torch.serialization.add_safe_globals([argparse.Namespace, pathlib.PosixPath, ModelType, AttnBackend, RerunMode,
                                          RerunState, signal.Signals, io.BytesIO, reconstruct, np.ndarray, np.dtype,
                                          type(np.dtype(np.uint32))])
    tmp = tempfile.mkdtemp(prefix="tps_mg2_")
    try:
        for ex in mf.EXTRA_KINDS:
            d = os.path.join(tmp, "wo_" + ex)
            a = mf.megatron_args(num_layers=2)
            mf.write_checkpoint(d, mf.random_full(a), a, 2, 2, extra_state=ex, with_rng=True, with_optimizer=True,
                                legacy_names=ex == "bytesio")
            errs = []
            for root, _, files in os.walk(d):
                for f in files:
                    if f.endswith(".pt"):
                        try:
                            sd = torch.load(os.path.join(root, f), weights_only=True)
                            if sd["args"].model_type is not ModelType.encoder_or_decoder:
                                errs.append("%s: model_type %r" % (f, sd["args"].model_type))
                        except Exception as e:  # noqa: BLE001
                            errs.append("%s: %s" % (os.path.join(root, f), e))
            tap.report(not errs, "extra_state %s: every rank file loads with weights_only=True and Megatron's allow-list" % ex,
                       "\n".join(errs))
        # Why the writer pickles enums as Class(value): Python's own Enum pickling,
        # getattr(Class, name), is refused by weights_only even with the class allowed.
        torch.serialization.add_safe_globals([Plain])
        forms = {}
        for label, mod in (("default", pickle), ("Class(value)", mf._PickleModule)):
            b = io.BytesIO()
            torch.save({"m": Plain.a}, b, pickle_module=mod)
            b.seek(0)
            try:
                forms[label] = torch.load(b, weights_only=True)["m"] is Plain.a
            except Exception:  # noqa: BLE001
                forms[label] = False
        tap.report(forms == {"default": False, "Class(value)": True},
                   "weights_only refuses an enum pickled as getattr(Class, name) and accepts Class(value)", forms)
        tmr.check_fixture(tmp, "torch2 tp2 pp2 mcore, rng", 2, 2, with_rng=True, with_optimizer=True)
        tmr.check_fixture(tmp, "torch2 tp4 pp1 legacy, bytesio, bf16", 4, 1, legacy_names=True, extra_state="bytesio",
                          dtype=torch.bfloat16)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
