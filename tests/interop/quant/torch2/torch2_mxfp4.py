"""Truth from outside for GPT-OSS as released in MXFP4: transformers 4.57 (torch-2 tier) with
`accelerate` loads the checkpoint on the CPU with Mxfp4Config(dequantize=True), which gives
every expert's values (its integrations/mxfp4.py convert_moe_packed_tensors) and the model's
logits.

The checkpoint (tests/interop/quant/mxfp4_fixture.py, numpy only) has I = 15 blocks of 32, so
vLLM's cut (cdiv(15, T) blocks a rank, the last rank the rest; the rule is re-derived here
from models/gpt_oss.py _load_weights_mxfp4, and vllm_real_mxfp4_slices.py runs the engine's
own code) is uneven at tp 2, 4 and 8.  At each tp, the experts of every rank's shard file,
dequantized here with numpy (FP4 e2m1 times 2^(scale - 127)), must equal transformers'
dequantized gate_up_proj [E, H, 2I] columns [2s, 2e) and down_proj [E, I, H] rows [s, e)
exactly, and the gate_up bias the same columns; an even cut of the same columns must not
(the comparison tells the two apart).  `tpshard verify --layer all` and `--whole-model`
pass from the MXFP4 shards, and its float64 reference and tensor-parallel logits equal
transformers' within 1e-4.  check passes; merge gives back every source tensor bit for bit;
reshard 8 -> 4, 4 -> 8 and 2 -> 8 give the files split writes directly.  A scale of 255
(NaN in e8m0) is bad input: verify exits 3 naming the tensor.
"""
import filecmp
import json
import os
import sys
import tempfile

import tap
from tap import report, tpshard

# setup_torch2.sh installs accelerate (and its psutil, pyyaml) here, beside the shared venv.
ACCEL = os.path.join(tap.TOP, "build", "py-accelerate")
if os.path.isdir(ACCEL):
    sys.path.insert(0, ACCEL)

import numpy as np  # noqa: E402

import mxfp4_fixture  # noqa: E402

TPS = (2, 4, 8)
TOL = 1e-4
BLOCKS = 15


def vllm_range(I, T, r):
    """models/gpt_oss.py _load_weights_mxfp4: per = cdiv(I // 32, T) * 32; [r per, min((r+1) per, I))."""
    per = -(-(I // 32) // T) * 32
    return r * per, min((r + 1) * per, I)


def main():
    early = tap.transformers_tier("torch2_mxfp4")
    if early is not None:
        return early
    try:
        import accelerate  # noqa: F401
        import torch
        from safetensors.numpy import load_file
        from transformers import AutoModelForCausalLM, Mxfp4Config
    except ImportError as e:
        print("skip - torch2_mxfp4: %s (tests/interop/setup_torch2.sh installs accelerate into build/py-accelerate)" % e)
        return 0
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        cfg = mxfp4_fixture.write(src, seed=1, intermediate_size=32 * BLOCKS)
        I, L = cfg["intermediate_size"], cfg["num_hidden_layers"]
        model = AutoModelForCausalLM.from_pretrained(src, quantization_config=Mxfp4Config(dequantize=True),
                                                     dtype=torch.float32).float().eval()
        hf = [(m.mlp.experts.gate_up_proj.detach().double().numpy(), m.mlp.experts.down_proj.detach().double().numpy(),
               m.mlp.experts.gate_up_proj_bias.detach().double().numpy()) for m in model.model.layers]
        whole = load_file(os.path.join(src, "model.safetensors"))
        for T in TPS:
            out = os.path.join(tmp, "tp%d" % T)
            r = tpshard("split", src, "--tp", T, "-o", out)
            if not report(r.returncode == 0 and "preset gpt_oss" in r.stderr,
                          "split --tp %d of the MXFP4 checkpoint chooses preset gpt_oss and exits 0" % T, r.stderr):
                continue
            bad, even_hits = [], 0
            for rank in range(T):
                sh = load_file(os.path.join(out, "model-rank-%d-of-%d.safetensors" % (rank, T)))
                s, e = vllm_range(I, T, rank)
                for l in range(L):
                    p = "model.layers.%d.mlp.experts." % l
                    gu = mxfp4_fixture.dequant(sh[p + "gate_up_proj_blocks"], sh[p + "gate_up_proj_scales"])
                    dn = mxfp4_fixture.dequant(sh[p + "down_proj_blocks"], sh[p + "down_proj_scales"])
                    gu, dn = gu.transpose(0, 2, 1), dn.transpose(0, 2, 1)  # [E, H, 2I_r], [E, I_r, H]
                    want_gu, want_dn, want_b = hf[l][0][:, :, 2 * s:2 * e], hf[l][1][:, s:e, :], hf[l][2][:, 2 * s:2 * e]
                    if gu.shape != want_gu.shape or not np.array_equal(gu, want_gu):
                        bad.append("%sgate_up_proj rank %d: %s vs transformers' %s" % (p, rank, gu.shape, want_gu.shape))
                    if dn.shape != want_dn.shape or not np.array_equal(dn, want_dn):
                        bad.append("%sdown_proj rank %d: %s vs transformers' %s" % (p, rank, dn.shape, want_dn.shape))
                    b = sh[p + "gate_up_proj_bias"].astype(np.float64)
                    if b.shape != want_b.shape or not np.array_equal(b, want_b):
                        bad.append("%sgate_up_proj_bias rank %d" % (p, rank))
                    es, ee = rank * I // T, (rank + 1) * I // T  # the even cut: must differ from rank 0 on
                    even = hf[l][1][:, es:ee, :]
                    even_hits += rank > 0 and dn.shape == even.shape and np.array_equal(dn, even)
            report(not bad, "tp %d: every rank's dequantized experts equal transformers' dequantized slices "
                   "[s, e) of vLLM's rule (blocks a rank: %s)" % (T, [(vllm_range(I, T, k)[1] - vllm_range(I, T, k)[0]) // 32
                                                                   for k in range(T)]), "\n".join(bad[:8]))
            report(even_hits == 0, "tp %d: an even cut of the intermediate columns would not match (the test can fail)" % T)
            c = tpshard("check", out, "-q")
            report(c.returncode == 0, "check of the MXFP4 set at tp %d exits 0" % T, c.stdout + c.stderr)
            for mode in (("--layer", "all"), ("--whole-model",)):
                v = tpshard("verify", out, "--source", src, *mode, "-q")
                report(v.returncode == 0, "verify %s from the MXFP4 shards at tp %d exits 0" % (" ".join(mode), T),
                       "exit %d\n%s%s" % (v.returncode, v.stdout, v.stderr))
            dump = os.path.join(tmp, "logits%d.json" % T)
            v = tpshard("verify", out, "--source", src, "--whole-model", "--tokens", 12, "--seed", T,
                        "--dump-logits", dump, "-q")
            if report(v.returncode == 0, "verify --whole-model --dump-logits at tp %d exits 0" % T, v.stdout + v.stderr):
                d = json.load(open(dump))
                with torch.no_grad():
                    want = model(input_ids=torch.tensor(d["tokens"])[None]).logits[0].double()
                dr = float((torch.tensor(d["reference"], dtype=torch.float64) - want).abs().max())
                dg = float((torch.tensor(d["ranks"], dtype=torch.float64) - want).abs().max())
                report(dr <= TOL and dg <= TOL, "tp %d: verify's float64 reference and tensor-parallel logits from "
                       "the MXFP4 shards equal transformers' (max abs difference %.2g and %.2g <= %g)" % (T, dr, dg, TOL))
            merged = os.path.join(tmp, "merged%d.safetensors" % T)
            m = tpshard("merge", out, "-o", merged, "-q")
            if report(m.returncode == 0, "merge of the tp %d set exits 0" % T, m.stderr):
                back = load_file(merged)
                diff = [n for n in whole if n not in back or back[n].dtype != whole[n].dtype
                        or back[n].tobytes() != whole[n].tobytes()]
                report(not diff and set(back) == set(whole), "merge of the tp %d set gives back every tensor bit for bit"
                       % T, " ".join(diff[:5]))
        for a, b in ((8, 4), (4, 8), (2, 8)):
            out = os.path.join(tmp, "r%d_%d" % (a, b))
            r = tpshard("reshard", os.path.join(tmp, "tp%d" % a), "--tp", b, "-o", out, "-q")
            names = ["model-rank-%d-of-%d.safetensors" % (k, b) for k in range(b)]
            same = r.returncode == 0 and all(filecmp.cmp(os.path.join(out, n), os.path.join(tmp, "tp%d" % b, n),
                                                         shallow=False) for n in names)
            report(same, "reshard %d -> %d writes the files split --tp %d writes (uneven cuts both sides)" % (a, b, b),
                   r.stderr)
        # e8m0 255 is NaN (OCP MX): a non-finite weight is bad input, exit 3 naming the tensor.
        t = load_file(os.path.join(src, "model.safetensors"))
        t["model.layers.1.mlp.experts.down_proj_scales"][2, 5, 3] = 255
        from safetensors.numpy import save_file
        save_file(t, os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
        out = os.path.join(tmp, "nan")
        r = tpshard("split", src, "--tp", 2, "-o", out, "-q")
        v = tpshard("verify", out, "--layer", "all", "-q")
        report(r.returncode == 0 and v.returncode == 3 and "down_proj_scales: scale 255 at [2, 5, 3]" in v.stderr,
               "a scale of 255 (NaN in e8m0) makes verify exit 3 naming the tensor and the place",
               "split %d, verify %d: %s" % (r.returncode, v.returncode, v.stderr))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
