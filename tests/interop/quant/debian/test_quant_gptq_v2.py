"""verify dequantizes a gptq_v2 checkpoint exactly: its zeros as stored, not one higher (issue 17).

checkpoint_format comes from config.json's quantization_config as the manifest records it.
Reading a v2 set's zeros as v1 (zero - 1 stored) shifts every weight by one scale on both
sides of verify's comparison alike, so pass/fail cannot show it; the float64 reference that
`verify --dump-reference` writes can.  For layer 0 of the act-order v2 fixture (tp 1 set of
testdata/models/tiny-llama-gptq-actorder) the MLP stage's reference output must equal the
MLP computed here in numpy from the checkpoint with the test tier's own dequantizer
(quant_ref.gptq_dequant, v2=True) on the dumped input and attention output, and must differ
from the one with v1 zeros (so the comparison can tell the conventions apart).
"""
import json
import os
import sys
import tempfile

import tap
from tap import TOP, report, tpshard

sys.dont_write_bytecode = True
SRC = os.path.join(TOP, "testdata", "models", "tiny-llama-gptq-actorder")


def main():
    try:
        import numpy as np
        from safetensors.numpy import load_file
    except ImportError as e:
        print(f"# SKIP numpy/safetensors unavailable: {e}")
        return 0
    import quant_ref as R
    cfg = json.load(open(os.path.join(SRC, "config.json")))
    qc = cfg["quantization_config"]
    if not report(qc.get("checkpoint_format") == "gptq_v2", "the fixture is gptq_v2"):
        return tap.status()
    full = load_file(os.path.join(SRC, "model.safetensors"))
    with tempfile.TemporaryDirectory() as tmp:
        out, dump = os.path.join(tmp, "tp1"), os.path.join(tmp, "ref.json")
        p = tpshard("split", SRC, "--tp", 1, "-o", out, "-q")
        if not report(p.returncode == 0, "gptq_v2 fixture splits at tp 1", p.stderr):
            return tap.status()
        p = tpshard("verify", out, "--source", SRC, "--layer", 0, "--dump-reference", dump, "-q")
        if not report(p.returncode == 0, "verify --layer 0 --dump-reference passes", p.stdout + p.stderr):
            return tap.status()
        d = json.load(open(dump))
    d = d[0] if isinstance(d, list) else d.get("layers", [d])[0]
    x, attn, mlp = (np.array(d[k], dtype=np.float64) for k in ("x", "attention", "mlp"))

    def W(lin, v2):
        m = f"model.layers.0.mlp.{lin}"
        return R.gptq_dequant(full[m + ".qweight"], full[m + ".qzeros"], full[m + ".scales"], full[m + ".g_idx"],
                              bits=qc["bits"], v2=v2)

    def mlp_of(v2):
        h = x + attn
        nw = full["model.layers.0.post_attention_layernorm.weight"].astype(np.float64)
        hn = h / np.sqrt((h * h).mean(axis=1, keepdims=True) + cfg["rms_norm_eps"]) * nw
        g, u = hn @ W("gate_proj", v2).T, hn @ W("up_proj", v2).T
        return (g / (1 + np.exp(-g)) * u) @ W("down_proj", v2).T

    scale = np.abs(mlp).max()
    e2, e1 = np.abs(mlp - mlp_of(True)).max() / scale, np.abs(mlp - mlp_of(False)).max() / scale
    report(e2 < 1e-6, f"verify's MLP reference equals numpy's with gptq_v2 zeros (max rel err {e2:.2e})")
    report(e1 > 1e-3, f"... and differs from numpy's with v1 zeros (max rel err {e1:.2e}): the test tells them apart")
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
