"""make bench: tpshard against cp, cat and a Python/torch splitter on a synthetic Llama checkpoint.

Environment (all optional):
  BENCH_SIZE   4G (default, 5 layers, ~4 GiB) or 30G (~30 GiB, 69 layers: disk cases only,
               since tmpfs cannot hold it next to its input on a 24 GiB machine), or a layer
               count such as 12L
  BENCH_RUNS   runs per case (default 5); the table shows medians
  BENCH_DIR    where the input and the disk outputs go (default build/bench/data)
  BENCH_TMPFS  tmpfs directory for the page-cache cases (default /dev/shm)
  BENCH_COLD   auto (default: drop_caches when writable, else fadvise), drop, or fadvise
  BENCH_TORCH  0 skips the torch splitter; BENCH_BIN 0 skips the .bin input case
  BENCH_KEEP   1 keeps the generated checkpoints (a re-run reuses them)
  BENCH_TPSHARD  the binary to measure (default ./tpshard)
  BENCH_SCALE  0 skips the many-tensor cases; BENCH_ONLY=scale runs only them (make bench-scale)
  BENCH_DISK_CACHED  0 skips the disk page-cache cases; BENCH_ONLY=cached runs only the
               page-cache copy cases (cp, split tp8, reshard 8->4, merge tp8, to tmpfs and to disk);
               BENCH_ONLY=verify runs only cat of the tp 8 shards and verify of them (make bench-verify)
  BENCH_TPSHARD_NOBLAS  tpshard built with HAVE_BLAS=0 (make bench builds it): verify's plain
               loops measured beside the BLAS build, the "before" of issue 23
  TPS_VREF_KERNEL  passed on to verify: the float64 reference's kernel (portable, avx2, avx512;
               verify/math/ref_kernel.h), to measure a narrower one than the CPU's widest
The table's first line names the CPU model (/proc/cpuinfo); with the verify cases it also names
the reference's kernel that ran (build/tests/tools/vref_kernel asked, in the same environment):
verify's speed depends on both (issue 46).
Writes build/bench/results.md and prints the same table.

  bench.py --docs RESULTS PAGE   puts RESULTS (build/bench/results.md) in place of what
                                 stands between the lines <!-- bench:begin --> and
                                 <!-- bench:end --> of PAGE (make bench does it for
                                 docs/benchmarks.md)

The disk page-cache cases (issue 27): the source (or shard set) is in the page cache and the
outputs go to the same disk file system as the inputs (BENCH_DIR, not tmpfs), against `cp` of
the same file into that directory, which copies inside the kernel (copy_file_range).  Both
sides are timed up to their exit; tpshard's fsync at commit is part of its time, so the
baseline is `cp` followed by `sync FILE` of its output, the same durability.

The many-tensor cases (issue 14, item 9): two Mixtral-shaped checkpoints of tiny tensors,
about 5,000 and 50,000 (25 and 251 layers of 64 experts), split at tp 2; check and reshard
2->1 of each.  Their cost is per tensor, not per byte, so the 50k/5k ratio of medians shows
whether the tool is linear in the tensor count (about 10) or not (a quadratic look-up gave
60-120 for check).

Method: every case runs BENCH_RUNS times, interleaved (one run of each case per round),
and ratios are ratios of medians of the same round set.  Memory is the peak RssAnon
(anonymous resident memory: file pages in the page cache are not charged), sampled about
every millisecond by benchtool.  Cold cases drop the input's page cache before each run and
report how many bytes the process read from storage (rusage inblock).

The quantized case (issue 17): an FP8 block-scaled checkpoint of the same shapes (F8_E4M3
linears with their [out/128, in/128] weight_scale_inv, embedding and lm_head BF16 as published
FP8 checkpoints keep them) with twice the layers, so its bytes are within a few percent of the
BF16 one's; `split tp8` of each, interleaved.  Its ratio is of seconds per byte (the medians
divided by each input's size), so the small difference in bytes does not count.

The DCP case (issue 25): the same checkpoint saved by torch 2's dcp.save (8 .distcp files of
torch.save streams, one chunk per tensor); `split tp8` of the directory against `cp -r` of it.
"""
import os
import shutil
import statistics
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(TOP, "build", "bench")
TOOL = os.path.join(BUILD, "benchtool")
TPSHARD = os.environ.get("BENCH_TPSHARD") or os.path.join(TOP, "tpshard")
NOBLAS = os.environ.get("BENCH_TPSHARD_NOBLAS")
# The path a pip install takes (issue 46): scipy-openblas32 (the wheel's dependency, from the
# wheelhouse tests/interop/wheel/setup_wheel.sh fills) named in $TPSHARD_BLAS, with the
# system's BLAS hidden in a mount namespace (as tests/cli/lib.sh's blas_hidden does).
WHEELHOUSE = os.path.join(TOP, "build", "wheelhouse")
HIDE_BLAS = ('for n in libopenblas.so.0 libopenblas.so libcblas.so.3; do ldconfig -p | sed -n "s/.*$n .*=> //p"; '
             'done | xargs -r readlink -f | sort -u | while read -r f; do mount --bind /dev/null "$f" || exit 99; done '
             '&& exec "$@"')


def pip_blas_argv():
    """unshare -m ... as the prefix of a command that runs on scipy-openblas32 alone, or None."""
    import glob
    import zipfile
    whl = sorted(glob.glob(os.path.join(WHEELHOUSE, "scipy_openblas32-*.whl")))
    if not whl or not shutil.which("unshare"):
        return None
    site = os.path.join(BUILD, "scipy-openblas32")
    libs = glob.glob(os.path.join(site, "scipy_openblas32", "lib", "libscipy_openblas*.so"))
    if not libs:
        zipfile.ZipFile(whl[-1]).extractall(site)
        libs = glob.glob(os.path.join(site, "scipy_openblas32", "lib", "libscipy_openblas*.so"))
    if not libs:
        return None
    argv = ["unshare", "-m", "env", f"TPSHARD_BLAS={libs[0]}", "sh", "-c", HIDE_BLAS, "hide"]
    return argv if subprocess.run(argv + ["true"], capture_output=True).returncode == 0 else None
VREF_KERNEL_TOOL = os.path.join(TOP, "build", "tests", "tools", "vref_kernel")
GiB = 1 << 30
MiB = 1 << 20


def env(name, default):
    return os.environ.get(name, default)


def layers_for(size):
    s = size.upper()
    if s.endswith("L"):
        return int(s[:-1])
    gib = float(s.rstrip("GIB") or 4)
    # embeddings + lm_head ~1.96 GiB, ~0.406 GiB per layer
    return max(1, round((gib - 1.957) / 0.40625))


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def tree_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def rm(path):
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


def cpu_model():
    """The CPU's model as /proc/cpuinfo gives it: x86's "model name", with its family and model
    numbers (a virtual machine may say only "Intel(R) Xeon(R) Processor"); many ARM kernels give none."""
    info = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    if not info.get("model name"):
        return f"{os.uname().machine}, model not in /proc/cpuinfo"
    nums = f", family {info['cpu family']} model {info['model']}" if "cpu family" in info and "model" in info else ""
    return info["model name"] + nums


def vref_kernel():
    """The reference kernel verify runs here (build/tests/tools/vref_kernel, same environment)."""
    if not os.access(VREF_KERNEL_TOOL, os.X_OK):
        return "unknown (build/tests/tools/vref_kernel not built)"
    name = subprocess.run([VREF_KERNEL_TOOL], capture_output=True, text=True).stdout.strip()
    forced = os.environ.get("TPS_VREF_KERNEL")
    return f"{name} (TPS_VREF_KERNEL={forced})" if forced else name


def round_spread(a, b):
    """The spread of a ratio: each interleaved round's time of a over the same round's of b."""
    rs = [x[0] / y[0] for x, y in zip(a, b)]
    return min(rs), max(rs)


class Bench:
    def __init__(self):
        self.size = env("BENCH_SIZE", "4G")
        self.runs = int(env("BENCH_RUNS", "5"))
        self.data = os.path.abspath(env("BENCH_DIR", os.path.join(BUILD, "data")))
        self.tmpfs = os.path.join(env("BENCH_TMPFS", "/dev/shm"), f"tpsbench.{os.getpid()}")
        self.keep = env("BENCH_KEEP", "0") == "1"
        self.layers = layers_for(self.size)
        self.src = os.path.join(self.data, f"llama-{self.layers}L", "model.safetensors")
        self.fp8 = os.path.join(self.data, f"llama-fp8-{2 * self.layers}L", "model.safetensors")
        self.cold = env("BENCH_COLD", "auto")
        if self.cold == "auto":
            self.cold = "drop" if os.access("/proc/sys/vm/drop_caches", os.W_OK) else "fadvise"
        self.results = {}  # case -> list of (wall, rssanon_kib, inblock)
        self.bytes = {}  # case -> bytes moved, for throughput
        self.waits = {}  # case -> voluntary context switches per run (waits between threads)
        self.futex = {}  # many-tensor case -> futex calls of one run under strace (count_futex)
        self.notes = []
        self.only = env("BENCH_ONLY", "")
        self.scale = env("BENCH_SCALE", "1") == "1" or self.only == "scale"
        self.scale_sets = {}  # tensor count -> (tp2 shard set, data bytes)
        self.scale_src = {}  # tensor count -> the checkpoint it was split from
        self.python = subprocess.run(["sh", os.path.join(TOP, "tests/interop/python.sh")],
                                     capture_output=True, text=True).stdout.strip()

    # ---- cache control ----
    def drop(self, files):
        if self.cold == "drop":
            sh(["sync"])
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        else:
            sh([TOOL, "evict"] + files)

    def warm(self, files):
        """Only these files in the page cache: every other bench input is evicted first, so each
        case starts with the same free memory for its output.  With the checkpoint, its .bin and
        two shard sets cached (16 GiB on a 24 GiB machine) a tmpfs output made the kernel reclaim
        inside the timed run, and which case paid for it depended on the order."""
        others = [f for f in getattr(self, "inputs", []) if f not in files]
        if others:
            sh([TOOL, "evict"] + others)
        for f in files:
            with open(f, "rb") as fh:
                while fh.read(8 * MiB):
                    pass

    def shard_files(self, d):
        return sorted(os.path.join(d, f) for f in os.listdir(d))

    # ---- measuring ----
    def measure(self, case, argv, nbytes, stdout=None, pre=None, post=None):
        if pre:
            pre()
        cmd = [TOOL, "run"] + (["-o", stdout] if stdout else []) + ["--"] + argv
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        wall, rss, inblock, rc, nvcsw = out.stdout.split()
        if int(rc) != 0:
            sys.exit(f"bench: {case}: {' '.join(argv)} exited with status {rc}\n{out.stderr}")
        if post:
            post()
        self.results.setdefault(case, []).append((float(wall), int(rss), int(inblock)))
        self.waits.setdefault(case, []).append(int(nvcsw))
        self.bytes[case] = nbytes

    # ---- setup ----
    def setup(self):
        os.makedirs(BUILD, exist_ok=True)
        est = (1.957 + self.layers * 0.40625) * GiB
        # input, then .bin, two shard sets and one output (tmpfs cases), or input and output
        need = est * (4.2 if est < 12 * GiB else 2.1)
        print(f"bench: {self.size} -> {self.layers} layers; input {self.src}; cold cache by {self.cold}")
        print(subprocess.run(["df", "-h", self.data if os.path.isdir(self.data) else BUILD,
                              os.path.dirname(self.tmpfs)], capture_output=True, text=True).stdout, end="")
        if not os.path.exists(self.src):
            if free_bytes(BUILD) < need:
                sys.exit(f"bench: needs about {need / GiB:.0f} GiB free under {BUILD}")
            os.makedirs(os.path.dirname(self.src), exist_ok=True)
            sh([TOOL, "gen", self.src, str(self.layers)])
        self.total = os.path.getsize(self.src)
        if self.only in ("cached", "verify"):  # the FP8, .bin and Megatron inputs belong to other cases
            self.fp8_total = 0
            self.fp8 = None
        elif not os.path.exists(self.fp8):
            os.makedirs(os.path.dirname(self.fp8), exist_ok=True)
            sh([TOOL, "gen-fp8", self.fp8, str(2 * self.layers)])
            self.fp8_total = os.path.getsize(self.fp8)
        else:
            self.fp8_total = os.path.getsize(self.fp8)
        # tmpfs holds one output at a time next to the cached input
        self.tmpfs_ok = free_bytes(os.path.dirname(self.tmpfs)) > 1.3 * self.total and self.total < 12 * GiB
        if not self.tmpfs_ok:
            self.notes.append("tmpfs cases skipped: the output would not fit in tmpfs beside the cached input")
        os.makedirs(self.tmpfs, exist_ok=True)
        self.sets = {}
        for tp in ((8,) if self.only == "verify" else (4, 8)) if self.tmpfs_ok else ():  # reshard, merge, check inputs
            # Made by the binary measured, even with BENCH_KEEP: an older binary's set can lay
            # its files out differently (where their data start), which changes what a
            # reshard or merge of it costs.
            d = os.path.join(os.path.dirname(self.src), f"tp{tp}")
            rm(d)
            sh([TPSHARD, "split", self.src, "--tp", str(tp), "--preset", "llama", "-o", d, "-q"])
            self.sets[tp] = d
        self.megatron = None
        if self.tmpfs_ok and self.only not in ("cached", "verify"):  # a Megatron-LM checkpoint at tp 8 (issue 18)
            self.megatron = self.setup_megatron()
        self.dcp = self.setup_dcp() if self.tmpfs_ok and self.only != "verify" else None
        self.bin = None
        if env("BENCH_BIN", "1") == "1" and self.python and self.tmpfs_ok and self.only not in ("cached", "verify"):
            self.bin = os.path.join(os.path.dirname(self.src), "pytorch_model.bin")
            if not os.path.exists(self.bin):
                sh([self.python, "-c",
                    "import sys, torch; from safetensors.torch import load_file; "
                    "torch.save(load_file(sys.argv[1]), sys.argv[2])", self.src, self.bin])
        self.inputs = [self.src] + ([self.fp8] if self.fp8 else []) + [f for tp in sorted(self.sets) for f in self.shard_files(self.sets[tp])] + \
            ([self.bin] if self.bin else []) + (self.megatron_files() if self.megatron else []) + \
            (self.dcp_files() if self.dcp else [])

    def setup_megatron(self):
        """The checkpoint as Megatron-LM saves it at tp 8 (iter_0000001/mp_rank_XX/model_optim_rng.pt),
        written by tpshard's split --target megatron, else by the test tier's megatron_fixture."""
        d = os.path.join(os.path.dirname(self.src), "megatron-tp8")
        if os.path.exists(os.path.join(d, "latest_checkpointed_iteration.txt")):
            return d
        rm(d)
        r = subprocess.run([TPSHARD, "split", self.src, "--tp", "8", "--preset", "llama", "--target", "megatron",
                            "-o", d, "-q"], capture_output=True, text=True)
        if r.returncode == 0:
            return d
        rm(d)
        if not self.python:
            self.notes.append("Megatron reshard skipped: no split --target megatron and no Python with torch")
            return None
        sh([self.python, "-c",
            "import sys, json, os; sys.path.insert(0, os.path.join(sys.argv[3], 'tests/interop/megatron'));"
            "import megatron_fixture as mf; from safetensors.torch import load_file;"
            "cfg = json.load(open(os.path.join(os.path.dirname(sys.argv[1]), 'config.json')));"
            "full = mf.hf_llama_to_megatron_full(load_file(sys.argv[1]), cfg);"
            "args = mf.megatron_args_from_hf(cfg, make_vocab_size_divisible_by=128);"
            "mf.write_checkpoint(sys.argv[2], full, args, 8, 1)", self.src, d, TOP])
        return d

    def megatron_files(self):
        return sorted(os.path.join(dp, f) for dp, _, fs in os.walk(self.megatron) for f in fs
                      if f == "model_optim_rng.pt")

    def setup_dcp(self):
        """The checkpoint as PyTorch Distributed Checkpoint saves it (issue 25): dcp.save of the
        state dict by PyPI torch 2 (the torch-2 tier), one process with 8 writer threads, so
        the chunks spread over 8 .distcp files.  It holds the whole state dict in memory once."""
        d = os.path.join(os.path.dirname(self.src), "dcp")
        if os.path.exists(os.path.join(d, ".metadata")):
            return d
        py = subprocess.run(["sh", os.path.join(TOP, "tests/interop/python_torch2.sh")], capture_output=True,
                            text=True).stdout.strip()
        if not py:
            self.notes.append("DCP split skipped: no torch-2 tier (sh tests/interop/setup_torch2.sh)")
            return None
        rm(d)
        sh([py, "-c",
            "import sys, torch.distributed.checkpoint as dcp; from safetensors.torch import load_file;"
            "dcp.save(load_file(sys.argv[1]), storage_writer=dcp.FileSystemWriter(sys.argv[2], thread_count=8))",
            self.src, d])
        shutil.copy(os.path.join(os.path.dirname(self.src), "config.json"), d)  # what a model directory has beside it
        return d

    def dcp_files(self):
        return sorted(os.path.join(self.dcp, f) for f in os.listdir(self.dcp))

    def dcp_round(self, o, clean):
        """split tp8 from the DCP directory against cp -r of it."""
        fd = self.dcp_files()
        nbytes = sum(os.path.getsize(f) for f in fd)
        self.measure("cp -r dcp", ["cp", "-r", self.dcp, o], nbytes, pre=lambda: self.warm(fd), post=clean)
        self.measure("split tp8 from dcp", [TPSHARD, "split", self.dcp, "--tp", "8", "--preset", "llama", "-o", o, "-q"],
                     nbytes, pre=lambda: self.warm(fd), post=clean)

    def setup_scale(self):
        os.makedirs(self.tmpfs, exist_ok=True)
        for layers in (25, 251):  # 7 + 3*64 tensors a layer, plus 3: 4,978 and 49,952
            d = os.path.join(self.data, f"moe-{layers}L")
            src = os.path.join(d, "model.safetensors")
            if not os.path.exists(src):
                os.makedirs(d, exist_ok=True)
                sh([TOOL, "gen-moe", src, str(layers), "64"], stdout=subprocess.DEVNULL)
            s2 = os.path.join(d, "tp2")
            if not os.path.exists(os.path.join(s2, "tpshard.json")):
                rm(s2)
                sh([TPSHARD, "split", src, "--tp", "2", "--preset", "mixtral", "-o", s2, "-q"])
            self.scale_sets[3 + layers * (7 + 3 * 64)] = (s2, tree_bytes(s2))
            self.scale_src[3 + layers * (7 + 3 * 64)] = src

    def scale_case(self, what, n):
        return f"{what}, {n:,} tensors"

    def scale_round(self):
        o = os.path.join(self.tmpfs, "scale-out")
        for n, (s2, nbytes) in sorted(self.scale_sets.items()):
            src = self.scale_src[n]
            self.measure(self.scale_case("split tp2", n), [TPSHARD, "split", src, "--tp", "2", "--preset", "mixtral",
                                                           "-o", o, "-q"], nbytes, pre=lambda: self.warm([src]),
                         post=lambda: rm(o))
            self.measure(self.scale_case("check tp2", n), [TPSHARD, "check", s2, "-q"], nbytes,
                         pre=lambda: self.warm(self.shard_files(s2)))
            self.measure(self.scale_case("reshard 2->1", n), [TPSHARD, "reshard", s2, "--tp", "1", "-o", o, "-q"],
                         nbytes, pre=lambda: self.warm(self.shard_files(s2)), post=lambda: rm(o))

    def assert_same_as_torch(self):
        out_t = os.path.join(self.tmpfs, "torch")
        out_s = os.path.join(self.tmpfs, "tps")
        sh([self.python, os.path.join(TOP, "tests/bench/torch_split.py"), self.src, "--tp", "8", "-o", out_t])
        sh([TPSHARD, "split", self.src, "--tp", "8", "--preset", "llama", "-o", out_s, "-q"])
        name = "model-rank-5-of-8.safetensors"
        sh([self.python, os.path.join(TOP, "tests/bench/torch_split.py"), "--compare",
            os.path.join(out_t, name), os.path.join(out_s, name)])
        rm(out_t)
        rm(out_s)

    # ---- the cases ----
    def round(self):
        T = self.tmpfs
        src = self.src
        o = os.path.join(T, "out")
        disk_out = os.path.join(self.data, "out")
        clean = lambda: rm(o)  # noqa: E731
        n = self.total
        split = lambda tp, dst: [TPSHARD, "split", src, "--tp", str(tp), "--preset", "llama", "-o", dst, "-q"]  # noqa

        # cold input -> disk, fsync'd; tpshard syncs its own files, cp is followed by sync FILE
        rm(disk_out)
        self.measure("cold: cp + sync (disk)", ["sh", "-c", f"cp '{src}' '{disk_out}' && sync '{disk_out}'"], n,
                     pre=lambda: self.drop([src]), post=lambda: rm(disk_out))
        self.measure("cold: split tp8 (disk)", split(8, disk_out), n,
                     pre=lambda: self.drop([src]), post=lambda: rm(disk_out))
        if self.tmpfs_ok:
            s8, s4 = self.sets[8], self.sets[4]
            set_bytes = tree_bytes(s8)
            f8, f4 = self.shard_files(s8), self.shard_files(s4)
            # Each case re-reads its own input first (not timed): on a machine with less than
            # ~4x the checkpoint in RAM, the other cases' inputs and outputs evict it.
            w_src = lambda: self.warm([src])  # noqa: E731
            self.measure("cp (to tmpfs)", ["cp", src, o], n, pre=w_src, post=clean)
            self.measure("cat > /dev/null", ["cat", src], n, stdout="/dev/null", pre=w_src)
            for tp in (2, 4, 8):
                self.measure(f"split tp{tp}", split(tp, o), n, pre=w_src, post=clean)
            self.measure("split tp8 --target vllm", split(8, o) + ["--target", "vllm"], n, pre=w_src, post=clean)
            self.measure("split tp8, FP8 block-scaled", [TPSHARD, "split", self.fp8, "--tp", "8", "--preset", "llama",
                                                         "-o", o, "-q"], self.fp8_total,
                         pre=lambda: self.warm([self.fp8]), post=clean)
            self.measure("reshard 8->4", [TPSHARD, "reshard", s8, "--tp", "4", "-o", o, "-q"], n,
                         pre=lambda: self.warm(f8), post=clean)
            self.measure("reshard 4->8", [TPSHARD, "reshard", s4, "--tp", "8", "-o", o, "-q"], n,
                         pre=lambda: self.warm(f4), post=clean)
            if self.megatron:
                fm = self.megatron_files()
                mbytes = sum(os.path.getsize(f) for f in fm)
                self.measure("cp -r megatron tp8", ["cp", "-r", self.megatron, o], mbytes,
                             pre=lambda: self.warm(fm), post=clean)
                self.measure("reshard megatron 8->4", [TPSHARD, "reshard", self.megatron, "--tp", "4", "-o", o, "-q"],
                             mbytes, pre=lambda: self.warm(fm), post=clean)
            if self.dcp:
                self.dcp_round(o, clean)
            self.measure("merge tp8", [TPSHARD, "merge", s8, "-o", o + ".safetensors", "-q"], n,
                         pre=lambda: self.warm(f8), post=lambda: rm(o + ".safetensors"))
            self.measure("check tp8", [TPSHARD, "check", s8, "-q"], set_bytes, pre=lambda: self.warm(f8))
            self.verify_round()
            if self.bin:
                self.measure("split tp8 from .bin", [TPSHARD, "split", self.bin, "--tp", "8", "--preset", "llama",
                                                     "--config", os.path.join(os.path.dirname(src), "config.json"),
                                                     "-o", o, "-q"], n, pre=lambda: self.warm([self.bin]), post=clean)
            if self.python and env("BENCH_TORCH", "1") == "1":
                self.measure("torch split tp8", [self.python, os.path.join(TOP, "tests/bench/torch_split.py"), src,
                                                 "--tp", "8", "-o", o], n, pre=w_src, post=clean)

    def verify_round(self):
        """cat of the tp 8 shards and verify of them (BENCH_ONLY=verify: these cases alone)."""
        s8 = self.sets[8]
        set_bytes = tree_bytes(s8)
        f8 = self.shard_files(s8)
        self.measure("cat tp8 shards > /dev/null", ["cat"] + f8, set_bytes, stdout="/dev/null",
                     pre=lambda: self.warm(f8))
        # The whole model the tensor-parallel way (8 rank threads in float32) against the
        # float64 reference reassembled from the same shards, every tensor's checksum checked:
        # its cost beside reading the shards once (issue 15).
        pip = pip_blas_argv()
        if pip is None:
            print("bench: verify's pip path not measured: no scipy-openblas32 wheel in build/wheelhouse "
                  "(sh tests/interop/wheel/setup_wheel.sh), or no unshare -m here")
        for mode in ("--whole-model", "--layer all"):
            for tag, binary in (("", TPSHARD), (" (plain loops)", NOBLAS), (" (pip: scipy-openblas32)", TPSHARD)):
                prefix = pip if tag.startswith(" (pip") else []
                if binary and os.path.exists(binary) and prefix is not None:
                    self.measure(f"verify {mode} tp8{tag}", prefix + [binary, "verify", s8] + mode.split() + ["-q"],
                                 set_bytes, pre=lambda: self.warm(f8))

    def disk_cached_round(self):
        """Source cached, outputs on the input's disk file system (issue 27)."""
        if env("BENCH_DISK_CACHED", "1") != "1" or not self.tmpfs_ok:
            return
        src, n = self.src, self.total
        o = os.path.join(self.data, "out-cached")
        clean = lambda: rm(o)  # noqa: E731
        w_src = lambda: self.warm([src])  # noqa: E731
        f8, s8 = self.shard_files(self.sets[8]), self.sets[8]
        self.measure("disk cached: cp", ["cp", src, o], n, pre=w_src, post=clean)
        self.measure("disk cached: cp + sync", ["sh", "-c", f"cp '{src}' '{o}' && sync '{o}'"], n,
                     pre=w_src, post=clean)
        self.measure("disk cached: split tp8", [TPSHARD, "split", src, "--tp", "8", "--preset", "llama", "-o", o, "-q"],
                     n, pre=w_src, post=clean)
        self.measure("disk cached: reshard 8->4", [TPSHARD, "reshard", s8, "--tp", "4", "-o", o, "-q"], n,
                     pre=lambda: self.warm(f8), post=clean)
        self.measure("disk cached: merge tp8", [TPSHARD, "merge", s8, "-o", o + ".safetensors", "-q"], n,
                     pre=lambda: self.warm(f8), post=lambda: rm(o + ".safetensors"))

    def tmpfs_cached_round(self):
        """BENCH_ONLY=cached: the page-cache -> tmpfs cases the copy engine's goals name, alone."""
        o = os.path.join(self.tmpfs, "out")
        clean = lambda: rm(o)  # noqa: E731
        w_src = lambda: self.warm([self.src])  # noqa: E731
        f8, s8 = self.shard_files(self.sets[8]), self.sets[8]
        self.measure("cp (to tmpfs)", ["cp", self.src, o], self.total, pre=w_src, post=clean)
        self.measure("split tp8", [TPSHARD, "split", self.src, "--tp", "8", "--preset", "llama", "-o", o, "-q"],
                     self.total, pre=w_src, post=clean)
        self.measure("reshard 8->4", [TPSHARD, "reshard", s8, "--tp", "4", "-o", o, "-q"], self.total,
                     pre=lambda: self.warm(f8), post=clean)
        self.measure("merge tp8", [TPSHARD, "merge", s8, "-o", o + ".safetensors", "-q"], self.total,
                     pre=lambda: self.warm(f8), post=lambda: rm(o + ".safetensors"))

    def count_futex(self):
        """futex calls of one split and one reshard of each many-tensor set, under strace -f -c
        (issue 27: what is left of the hand-offs between threads a tensor); a note when strace
        is missing, no row."""
        if not shutil.which("strace"):
            self.notes.append("futex calls per tensor not counted: strace not found")
            return
        o = os.path.join(self.tmpfs, "scale-out")
        for n, (s2, _) in sorted(self.scale_sets.items()):
            for what, argv in (("split tp2", ["split", self.scale_src[n], "--tp", "2", "--preset", "mixtral"]),
                               ("reshard 2->1", ["reshard", s2, "--tp", "1"])):
                out = subprocess.run(["strace", "-f", "-c", "-e", "trace=futex", TPSHARD] + argv + ["-o", o, "-q"],
                                     capture_output=True, text=True)
                rm(o)
                calls = [int(f[3]) for f in (line.split() for line in out.stderr.splitlines())
                         if f and f[-1] == "futex" and len(f) >= 5]
                if out.returncode != 0 or not calls:
                    sys.exit(f"bench: strace of {what}, {n:,} tensors failed ({out.returncode})\n{out.stderr}")
                self.futex[self.scale_case(what, n)] = calls[0]

    def per_tensor_rows(self, lines, n):
        """What each of n tensors costs (issue 27): time and waits between threads per tensor
        for split, reshard and check; the loaded manifest's heap per tensor (manifest_mem)."""
        for what in ("split tp2", "reshard 2->1", "check tp2"):
            case = self.scale_case(what, n)
            if case not in self.results:
                continue
            us = self.med(case) / n * 1e6
            waits = statistics.median(self.waits[case]) / n
            futex = f", {self.futex[case] / n:.3f} futex calls (strace -f)" if case in self.futex else ""
            lines.append(f"| {what}, {n:,} tensors: per tensor (reported) | {us:.1f} µs | | "
                         f"{waits:.2f} waits (voluntary context switches){futex} | — | — |")
        held = subprocess.run([os.path.join(BUILD, "manifest_mem"), self.scale_sets[n][0]], capture_output=True,
                              text=True)
        if held.returncode == 0:
            nt, nb = (int(x) for x in held.stdout.split())
            lines.append(f"| manifest held in memory per tensor, {nt:,} tensors | {nb / nt:.0f} B | | | ≤ 1024 B | "
                         f"{'yes' if nb / nt <= 1024 else 'NO'} |")

    def peak_per_tensor_rows(self, lines):
        """Each many-tensor run's peak RssAnon per tensor, at both sizes: check and reshard hold
        the set's manifest and both ranks' header indexes (goal 1 KiB a tensor at 50k); split
        holds the source's index and the manifest it writes (reported)."""
        hi = max(self.scale_sets)
        for what, goal in (("check tp2", 1024), ("reshard 2->1", 1024), ("split tp2", None)):
            for n in sorted(self.scale_sets):
                case = self.scale_case(what, n)
                if case not in self.results:
                    continue
                b = max(r for _, r, _ in self.results[case]) * 1024 / n
                judged = goal is not None and n == hi
                lines.append(f"| {case}: peak RssAnon per tensor{'' if judged else ' (reported)'} | {b:.0f} B | | | "
                             f"{f'≤ {goal} B' if judged else '—'} | "
                             f"{('yes' if b <= goal else 'NO') if judged else '—'} |")

    def disk_cached_targets(self, target):
        for what, case, goal in (("split tp8", "disk cached: split tp8", 1.15),
                                 ("reshard 8->4", "disk cached: reshard 8->4", 1.25),
                                 ("merge tp8", "disk cached: merge tp8", 1.25)):
            target(f"{what} / (cp + sync) (page cache -> same disk)", case, "disk cached: cp + sync", goal)
            target(f"{what} / cp without sync (page cache -> same disk; reported)", case, "disk cached: cp", goal)
        target("reshard 8->4 / cp (page cache -> tmpfs)", "reshard 8->4", "cp (to tmpfs)", 1.25)

    # ---- report ----
    def med(self, case):
        return statistics.median(w for w, _, _ in self.results[case])

    def kernel_note(self):
        if not any(c.startswith("verify") for c in self.results):
            return ""
        return f", verify's float64 reference kernel {vref_kernel()}"

    def table(self):
        what = (f"{self.layers}-layer Llama-3-8B-shaped bf16 checkpoint, {self.total / GiB:.2f} GiB"
                if self.only != "scale" else "many-tensor cases only")
        lines = [f"tpshard bench: {what}; {self.runs} interleaved runs per case, medians; "
                 f"{os.cpu_count()} CPUs ({cpu_model()}){self.kernel_note()}; cold cache by {'drop_caches' if self.cold == 'drop' else 'posix_fadvise DONTNEED'}; "
                 f"{time.strftime('%Y-%m-%d %H:%M')}",
                 "",
                 "| case | median s | min–max s | GB/s | peak RssAnon MiB | read from storage GiB |",
                 "|---|---:|---:|---:|---:|---:|"]
        for case, rs in self.results.items():
            ws = [w for w, _, _ in rs]
            m = self.med(case)
            lines.append(f"| {case} | {m:.3f} | {min(ws):.2f}–{max(ws):.2f} | {self.bytes[case] / m / 1e9:.2f} | "
                         f"{max(r for _, r, _ in rs) / 1024:.1f} | {statistics.median(b for _, _, b in rs) / GiB:.2f} |")
        # The verdict is the ratio of medians.  The ratio of minimums is printed beside it: on a
        # shared VM noise only ever adds time (writing 4 GiB of zeros to tmpfs took 1.6 to 6.2 s
        # minutes apart on the development machine), so the fastest runs show the tools
        # themselves when the medians are dominated by the host.
        lines += ["", "| target | ratio of medians | ratio of minimums | per-round ratios min–max | goal | met (medians) |",
                  "|---|---:|---:|---:|---|---|"]

        def fastest(case):
            return min(w for w, _, _ in self.results[case])

        def target(what, a, b, goal, le=True):
            if a not in self.results or b not in self.results:
                return
            r, rmin = self.med(a) / self.med(b), fastest(a) / fastest(b)
            ok = r <= goal if le else r >= goal
            lo, hi = round_spread(self.results[a], self.results[b])
            lines.append(f"| {what} | {r:.2f} | {rmin:.2f} | {lo:.2f}–{hi:.2f} | {'≤' if le else '≥'} {goal} | "
                         f"{'yes' if ok else 'NO'} |")

        target("split tp8 / cp (page cache -> tmpfs)", "split tp8", "cp (to tmpfs)", 1.15)  # issue 27 (was 1.2)
        self.disk_cached_targets(target)
        target("cold split tp8 / (cp + sync) (disk)", "cold: split tp8 (disk)", "cold: cp + sync (disk)", 1.3)
        target("torch split tp8 / split tp8 (speedup)", "torch split tp8", "split tp8", 8, le=False)
        target("split tp8 --target vllm / split tp8", "split tp8 --target vllm", "split tp8", 1.2)
        target("reshard 8->4 / split tp4", "reshard 8->4", "split tp4", 1.3)
        target("reshard 4->8 / split tp8", "reshard 4->8", "split tp8", 1.3)
        target("merge tp8 / cp", "merge tp8", "cp (to tmpfs)", 1.2)
        target("reshard megatron 8->4 / cp -r of it", "reshard megatron 8->4", "cp -r megatron tp8", 1.3)
        target("split tp8 from DCP / cp -r of it", "split tp8 from dcp", "cp -r dcp", 1.3)
        target("check throughput / cat throughput", "cat tp8 shards > /dev/null", "check tp8", 0.8, le=False)
        target("split from .bin / from safetensors", "split tp8 from .bin", "split tp8", 1.1)
        q, b = "split tp8, FP8 block-scaled", "split tp8"
        if q in self.results and b in self.results:
            # seconds per byte: the FP8 input is within a few percent of the BF16 one's size
            r = (self.med(q) / self.fp8_total) / (self.med(b) / self.total)
            rmin = (fastest(q) / self.fp8_total) / (fastest(b) / self.total)
            lines.append(f"| quantized split / BF16 split, same bytes (s per byte; FP8 {self.fp8_total / GiB:.2f} GiB, "
                         f"BF16 {self.total / GiB:.2f} GiB) | {r:.2f} | {rmin:.2f} | | ≤ 1.1 | {'yes' if r <= 1.1 else 'NO'} |")
        # issue 23: verify with the BLAS at most 10x cat of the shards; issue 36: --layer all at
        # most 5x.  The plain loops' ratio (the build before issue 23) reported beside it
        for mode in ("--whole-model", "--layer all"):
            target(f"verify {mode} tp8 / cat tp8 shards", f"verify {mode} tp8", "cat tp8 shards > /dev/null",
                   10 if mode == "--whole-model" else 5)
            a, b = f"verify {mode} tp8 (plain loops)", "cat tp8 shards > /dev/null"
            if a in self.results and b in self.results:
                lo, hi = round_spread(self.results[a], self.results[b])
                lines.append(f"| {a} / cat tp8 shards (before: reported, no goal) | "
                             f"{self.med(a) / self.med(b):.2f} | {fastest(a) / fastest(b):.2f} | {lo:.2f}–{hi:.2f} | — | — |")
            # issue 46: no BLAS at all within 2.5x of the default build, a pip install (its
            # scipy-openblas32, the system's BLAS hidden) within 1.25x
            target(f"verify {mode} tp8: plain loops / default build", a, f"verify {mode} tp8", 2.5)
            target(f"verify {mode} tp8: pip install / default build", f"verify {mode} tp8 (pip: scipy-openblas32)",
                   f"verify {mode} tp8", 1.25)
        if len(self.scale_sets) == 2:
            lo, hi = sorted(self.scale_sets)
            self.per_tensor_rows(lines, hi)
            self.peak_per_tensor_rows(lines)
            # Linear: the time ratio is the tensor ratio; 1.3x that allows for a shared machine.
            for what in ("check tp2", "reshard 2->1"):
                target(f"{what}: {hi:,} / {lo:,} tensors (linear: {hi / lo:.1f})", self.scale_case(what, hi),
                       self.scale_case(what, lo), round(1.3 * hi / lo, 1))
        tps = [c for c in self.results if not c.startswith(("cp", "cat", "torch", "cold: cp", "disk cached: cp"))]
        tps = [c for c in tps if "tensors" not in c]  # the many-tensor cases hold per-tensor state
        # verify holds one whole tensor at a time (the 1 GiB lm_head, and its float copies): its
        # bound is the largest tensor, not the copy window; its peak is in its own row above.
        tps = [c for c in tps if not c.startswith("verify")]
        if tps:
            peak = max(r for c in tps for _, r, _ in self.results[c]) / 1024
            lines.append(f"| peak RssAnon of any tpshard run (MiB) | {peak:.1f} | | | ≤ 64 | {'yes' if peak <= 64 else 'NO'} |")
        if "cold: split tp8 (disk)" in self.results:
            rd = statistics.median(b for _, _, b in self.results["cold: split tp8 (disk)"]) / self.total
            lines.append(f"| cold split: bytes read from storage / input size | {rd:.2f} | | | ≈ 1 (one pass) | "
                         f"{'yes' if rd < 1.1 else 'NO'} |")
        if hasattr(self, "bystander"):
            lines.append(f"| page cache of a 1 GiB bystander file kept through the cold split | "
                         f"{self.bystander:.0%} | | | not evicted wholesale | {'yes' if self.bystander > 0.5 else 'NO'} |")
        lines += [""] + [f"Note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def bystander_check(self):
        """Does one cold split of the whole input evict a warm, unrelated 1 GiB file?"""
        f = os.path.join(self.data, "bystander")
        with open(f, "wb") as fh:
            fh.write(os.urandom(MiB) * 1024)
        self.warm([f])
        disk_out = os.path.join(self.data, "out")
        rm(disk_out)
        sh([TPSHARD, "split", self.src, "--tp", "8", "--preset", "llama", "-o", disk_out, "-q"])
        got = int(subprocess.run([TOOL, "cached", f], capture_output=True, text=True, check=True).stdout)
        self.bystander = got / os.path.getsize(f)
        rm(disk_out)
        rm(f)

    def cleanup(self):
        rm(self.tmpfs)
        rm(os.path.join(self.data, "out"))
        rm(os.path.join(self.data, "out-cached"))
        if not self.keep:
            rm(os.path.dirname(self.src))
            if self.fp8:
                rm(os.path.dirname(self.fp8))
            for s2, _ in self.scale_sets.values():
                rm(os.path.dirname(s2))


BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def update_docs(results, page):
    """The table of page (a Markdown file) between its BEGIN and END lines becomes the text of
    results; the rest of page is kept byte for byte.  The file is replaced whole (a temporary
    file renamed over it), so an interrupted run leaves the old page."""
    with open(results, encoding="utf-8") as f:
        text = f.read()
    with open(page, encoding="utf-8") as f:
        lines = f.read().split("\n")
    b = [i for i, l in enumerate(lines) if l.strip() == BEGIN]
    e = [i for i, l in enumerate(lines) if l.strip() == END]
    if len(b) != 1 or len(e) != 1 or b[0] > e[0]:
        sys.exit(f"bench: {page}: wants one line {BEGIN} and, after it, one line {END}")
    if not text.strip():
        sys.exit(f"bench: {results} is empty")
    # blank lines around the table, so that the markers never join a paragraph or a table
    out = "\n".join(lines[:b[0] + 1] + [""] + text.strip("\n").split("\n") + [""] + lines[e[0]:])
    tmp = page + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(out)
    os.replace(tmp, page)
    print(f"bench: {page}: table replaced by {results}")


def main():
    if sys.argv[1:2] == ["--docs"]:
        if len(sys.argv) != 4:
            sys.exit("usage: bench.py --docs RESULTS PAGE")
        update_docs(sys.argv[2], sys.argv[3])
        return
    b = Bench()
    full = b.only != "scale"
    b.scale = b.scale and b.only not in ("cached", "verify")
    try:
        if full:
            b.setup()
            if b.python and b.tmpfs_ok and env("BENCH_TORCH", "1") == "1" and b.only not in ("cached", "verify"):
                b.assert_same_as_torch()
            elif not b.python:
                b.notes.append("torch splitter skipped: no Python with torch and safetensors (sh tests/interop/setup.sh)")
        if b.scale:
            b.setup_scale()
        for i in range(b.runs):
            print(f"bench: round {i + 1} of {b.runs}", flush=True)
            if b.only == "cached" and b.tmpfs_ok:
                b.tmpfs_cached_round()
                b.disk_cached_round()
            elif b.only == "verify" and b.tmpfs_ok:
                b.verify_round()
            elif full:
                b.round()
                b.disk_cached_round()
            if b.scale:
                b.scale_round()
        if b.scale:
            b.count_futex()
        if full and b.total > 8 * GiB:
            b.bystander_check()
        text = b.table()
        with open(os.path.join(BUILD, "results.md"), "w") as f:
            f.write(text)
        print()
        print(text, end="")
        print(f"bench: results in {os.path.relpath(os.path.join(BUILD, 'results.md'), TOP)}")
    finally:
        b.cleanup()


if __name__ == "__main__":
    main()
