"""The GPTQ and AWQ fixtures (testdata/gen_quant_int.py) and the tests' numpy dequantizer
(quant_ref.py) against the producers' own code from PyPI (tests/interop/quant/setup_quant_refs.sh):

  - AutoGPTQ 0.7.1's QuantLinear.pack, fed the quantized weight (as GPTQ.fasterquant leaves it in
    the layer) with the fixture's scales, zeros and g_idx, writes the fixture's qweight and
    qzeros words (v1 fixtures);
  - AutoGPTQ's QuantLinear.forward (its torch path, no CUDA extension) on an identity input
    gives quant_ref.gptq_dequant's weight exactly (scales passed as float32 so that nothing
    rounds); the v2 fixture's zeros are first stored the v1 way;
  - AutoAWQ 0.2.9's packing_utils.dequantize_gemm gives quant_ref.awq_dequant's exactly.

Skips loudly when the reference files were not fetched.
"""
import importlib.util
import json
import os
import sys

import tap

sys.path.insert(0, os.path.join(tap.TOP, "testdata"))
sys.dont_write_bytecode = True
REFS = os.path.join(tap.TOP, "build", "quant-refs")
MODELS = os.path.join(tap.TOP, "testdata", "models")
FIXTURES = ["tiny-llama-gptq", "tiny-llama-gptq-actorder", "tiny-llama-awq", "tiny-mixtral-gptq"]


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    try:
        import numpy as np
        import torch
        from safetensors.numpy import load_file
    except Exception as e:  # noqa: BLE001
        print("skip - quant refs: torch/numpy/safetensors cannot be imported (%s)" % e)
        return 0
    if not all(os.path.exists(os.path.join(REFS, f)) for f in ("qlinear_cuda.py", "packing_utils.py")):
        print("skip - quant refs: %s lacks AutoGPTQ's qlinear_cuda.py / AutoAWQ's packing_utils.py; "
              "run tests/interop/quant/setup_quant_refs.sh" % REFS)
        return 0
    import logging
    logging.disable(logging.WARNING)  # "CUDA extension not installed": the torch path is the point
    gq = load(os.path.join(REFS, "qlinear_cuda.py"), "autogptq_qlinear_cuda")
    aw = load(os.path.join(REFS, "packing_utils.py"), "autoawq_packing_utils")
    import gen_fixtures as g
    import quant_ref as R

    for fx in FIXTURES:
        d = os.path.join(MODELS, fx)
        t = load_file(os.path.join(d, "model.safetensors"))
        qc = json.load(open(os.path.join(d, "config.json")))["quantization_config"]
        grp, v2 = qc["group_size"], qc.get("checkpoint_format") == "gptq_v2"
        bases = sorted(n[:-len(".qweight")] for n in t if n.endswith(".qweight"))
        pack_bad, deq_bad, worst = [], [], 0.0
        for b in bases:
            qw, qz, sc = t[b + ".qweight"], t[b + ".qzeros"], t[b + ".scales"]
            if qc["quant_method"] == "gptq":
                K, N = qw.shape[0] * 8, qw.shape[1]
                mine = R.gptq_dequant(qw, qz, sc, t[b + ".g_idx"], v2=v2)
                zeros = R.unpack_cols(qz, 4) + (0 if v2 else 1)  # the zero itself
                ql = gq.QuantLinear(4, grp, K, N, False)
                ql.qweight = torch.from_numpy(qw.copy())
                # AutoGPTQ 0.7.1 reads the v1 layout only: store zero - 1 for it
                ql.qzeros = torch.from_numpy(qz.copy()) if not v2 else torch.from_numpy(
                    pack_cols(np, zeros - 1))
                ql.scales = torch.from_numpy(sc.astype(np.float32))
                ql.g_idx = torch.from_numpy(t[b + ".g_idx"].copy())
                theirs = ql(torch.eye(K, dtype=torch.float32)).numpy().T
                if not np.array_equal(theirs, mine.astype(np.float32)):
                    deq_bad.append(b)
                if not v2:
                    # GPTQ.fasterquant leaves the layer holding its quantized weight Q
                    # (clamped codes), and pack re-derives the codes from Q
                    W = mine.astype(np.float32)
                    lin = torch.nn.Linear(K, N, bias=False)
                    lin.weight.data = torch.from_numpy(W)
                    pk = gq.QuantLinear(4, grp, K, N, False)
                    pk.pack(lin, torch.from_numpy(sc.astype(np.float32).T.copy()),
                            torch.from_numpy(zeros.T.copy()), torch.from_numpy(t[b + ".g_idx"].copy()))
                    if not (np.array_equal(pk.qweight.numpy(), qw) and np.array_equal(pk.qzeros.numpy(), qz)):
                        pack_bad.append(b)
            else:
                mine = R.awq_dequant(qw, qz, sc)
                theirs = aw.dequantize_gemm(torch.from_numpy(qw.copy()), torch.from_numpy(qz.copy()),
                                            torch.from_numpy(sc.astype(np.float32)), 4, grp).numpy().T
                if not np.array_equal(theirs, mine.astype(np.float32)):
                    deq_bad.append(b)
            ref = np.array(g.tensor_values(fx, b + ".weight", mine.shape)).reshape(mine.shape)
            worst = max(worst, float(np.abs(mine - ref).max() / sc.astype(np.float64).max()))
        who = "AutoGPTQ QuantLinear.forward" if qc["quant_method"] == "gptq" else "AutoAWQ dequantize_gemm"
        tap.report(not deq_bad, "%s: %d linears: %s equals quant_ref's dequantization exactly" % (fx, len(bases), who),
                   "differ: " + ", ".join(deq_bad[:5]))
        if qc["quant_method"] == "gptq" and not v2:
            tap.report(not pack_bad, "%s: AutoGPTQ QuantLinear.pack of the quantized weights writes the fixture's "
                       "qweight and qzeros words" % fx, "differ: " + ", ".join(pack_bad[:5]))
        tap.report(worst <= 0.51, "%s: dequantized weights within half a step of the float weights (%.3f of the "
                   "largest scale)" % (fx, worst))
    return tap.status()


def pack_cols(np, fields):
    """[R, C*8] 4-bit fields -> [R, C] int32 words, field j of word c at column 8c + j (the
    numpy uint32 wrap of a negative field smears ones as AutoGPTQ's pack does)."""
    f = fields.astype(np.int64) & 0xFFFFFFFF
    out = np.zeros((f.shape[0], f.shape[1] // 8), dtype=np.int64)
    for j in range(8):
        out |= (f[:, j::8] << (4 * j)) & 0xFFFFFFFF
    return out.astype(np.uint32).view(np.int32)


if __name__ == "__main__":
    sys.exit(main())
