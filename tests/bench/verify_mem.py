"""make bench's verify memory case (issue 36): peak resident memory of `verify --layer all` and
`--whole-model` on DeepSeek-V3-shaped checkpoints of 16 and 64 routed experts of the same size
(tests/bench/gen_moe.py: hidden 2048, experts of 1024, MLA, layer 0 dense; split --tp 8).

The peak is the child's maximum resident set (wait4's ru_maxrss, what GNU `time -f %M`
reports: mapped file pages included), the median of BENCH_RUNS interleaved runs.  Goals: the
64-expert set under 256 MiB in both modes, and 64 vs 16 experts within 1.25x.  Appends its
table to build/bench/results.md when that file is there (make bench), else prints it.

Environment: BENCH_RUNS (default 3), BENCH_TPSHARD, BENCH_KEEP=1 keeps the sets
(build/bench/verify-mem).
"""
import os
import shutil
import statistics
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(TOP, "build", "bench")
DATA = os.path.join(BUILD, "verify-mem")
TPSHARD = os.environ.get("BENCH_TPSHARD") or os.path.join(TOP, "tpshard")
GEN = os.path.join(TOP, "tests", "bench", "gen_moe.py")
EXPERTS = (16, 64)
MODES = (("--layer all", ["--layer", "all"]), ("--whole-model", ["--whole-model"]))


def run(argv):
    """(seconds, peak resident KiB) of one run of argv."""
    t = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(argv)} exited with status {p.returncode}\n{err.decode(errors='replace')}")
    return time.monotonic() - t, ru.ru_maxrss


def main():
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    sets = {}
    for e in EXPERTS:
        src, out = os.path.join(DATA, f"e{e}"), os.path.join(DATA, f"s{e}")
        if not os.path.exists(os.path.join(out, "tpshard.json")):
            subprocess.run([sys.executable, GEN, src, str(e)], check=True)
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run([TPSHARD, "split", src, "--tp", "8", "-o", out, "-q"], check=True)
        sets[e] = out
    res = {}  # (mode, experts) -> [(s, KiB)]
    for i in range(runs):
        print(f"bench: verify memory, round {i + 1} of {runs}", flush=True)
        for name, args in MODES:
            for e in EXPERTS:
                res.setdefault((name, e), []).append(run([TPSHARD, "verify", sets[e]] + args + ["-q"]))
    lines = ["", "### verify's memory against the expert count (issue 36)", "",
             "DeepSeek-V3-shaped (hidden 2048, routed experts of 1024, MLA, layer 0 dense), split --tp 8; "
             f"maximum resident set (ru_maxrss, as `time -f %M`), median of {runs} runs.", "",
             "| case | 16 experts | 64 experts | 64 / 16 | goal | met |", "|---|---|---|---|---|---|"]
    for name, _ in MODES:
        a, b = (statistics.median(k for _, k in res[(name, e)]) / 1024 for e in EXPERTS)
        ta, tb = (statistics.median(s for s, _ in res[(name, e)]) for e in EXPERTS)
        ok = b < 256 and b <= 1.25 * a
        lines.append(f"| verify {name}: peak MiB (s) | {a:.0f} ({ta:.1f} s) | {b:.0f} ({tb:.1f} s) | {b / a:.2f} | "
                     f"64 experts < 256 MiB, ≤ 1.25x | {'yes' if ok else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    results = os.path.join(BUILD, "results.md")
    if os.path.exists(results) and os.environ.get("BENCH_APPEND", "1") == "1":
        with open(results, "a") as f:
            f.write(text)
    if os.environ.get("BENCH_KEEP", "0") != "1":
        shutil.rmtree(DATA, ignore_errors=True)


if __name__ == "__main__":
    main()
