"""make bench-scale-layer (issue 36): one DeepSeek-V3 MoE layer at its real dimensions (hidden
7168, 128 heads of MLA with q_lora_rank 1536, 256 routed experts of 2048 and a shared one, FP8
block-scaled as released: about 11 GB of random values, tests/bench/gen_moe.py --fp8), split
--tp 8, then `verify --layer all`: its peak resident set (ru_maxrss, as `time -f %M`) against
the goal of 1 GiB, and its time against `cat` of the shards.  The checkpoint and the set are
made on the fly and deleted after (BENCH_KEEP=1 keeps them).

Environment: BENCH_LAYER_EXPERTS (default 256: a smaller count scales the layer down for a quick
run), BENCH_DIR (default build/bench/data; needs about 2.2x the checkpoint free), BENCH_TPSHARD.
"""
import os
import shutil
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TPSHARD = os.environ.get("BENCH_TPSHARD") or os.path.join(TOP, "tpshard")
GEN = os.path.join(TOP, "tests", "bench", "gen_moe.py")
GiB = 1 << 30


def timed(argv, stdout=subprocess.DEVNULL):
    t = time.monotonic()
    p = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench: {' '.join(argv)} failed\n{err.decode(errors='replace')}")
    return time.monotonic() - t, ru.ru_maxrss


def main():
    experts = int(os.environ.get("BENCH_LAYER_EXPERTS", "256"))
    data = os.path.abspath(os.environ.get("BENCH_DIR", os.path.join(TOP, "build", "bench", "data")))
    src, out = os.path.join(data, f"dsv3-layer-{experts}e"), os.path.join(data, f"dsv3-layer-{experts}e-tp8")
    os.makedirs(data, exist_ok=True)
    try:
        if not os.path.exists(os.path.join(src, "model.safetensors")):
            subprocess.run([sys.executable, GEN, src, str(experts), "--fp8", "--layers", "1", "--dense", "0",
                            "--hidden", "7168", "--heads", "128", "--q-lora", "1536", "--moe-inter", "2048",
                            "--vocab", "1024"], check=True)
        size = os.path.getsize(os.path.join(src, "model.safetensors"))
        if not os.path.exists(os.path.join(out, "tpshard.json")):
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run([TPSHARD, "split", src, "--tp", "8", "-o", out, "-q"], check=True)
        shards = sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".safetensors"))
        tcat, _ = timed(["cat"] + shards)
        tver, peak = timed([TPSHARD, "verify", out, "--layer", "all", "-q"])
        mib = peak / 1024
        print(f"\n### one DeepSeek-V3 MoE layer at real size ({experts} routed experts, FP8, "
              f"{size / GiB:.1f} GiB), tp 8\n")
        print("| case | value | goal | met |\n|---|---|---|---|")
        print(f"| verify --layer all: peak resident MiB | {mib:.0f} | < 1024 | {'yes' if mib < 1024 else 'NO'} |")
        print(f"| verify --layer all / cat of the shards | {tver:.1f} s / {tcat:.1f} s = {tver / tcat:.1f}x | "
              "reported | |")
    finally:
        if os.environ.get("BENCH_KEEP", "0") != "1":
            shutil.rmtree(src, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
