"""setuptools commands that build tpshard's C sources into the Python distribution
(pyproject.toml names them in [tool.setuptools.cmdclass]; README "Python").

build         runs ``make py-bin`` first: build/py/tpshard (zlib and libyaml linked from their
              static archives, stripped) and build/libtpshard-devsim.so; pyproject's
              data-files put them in the wheel's ``.data/data/bin/`` and
              ``.data/data/lib/tpshard/``, which pip installs as ``<env>/bin/tpshard`` and
              ``<env>/lib/tpshard/`` (where the binary looks for plugins: verify/backends/backend.c).
bdist_wheel   a platform wheel (the binary is not pure Python) tagged py3-none-<platform>:
              manylinux_2_<N>_<arch> when the binary needs only glibc's libraries (N: the
              newest GLIBC_2.N symbol version it uses), else linux_<arch> (runs where built).
sdist         the C sources, Makefile and its fragments go into the sdist with the package,
              so a wheel builds from it.
"""
import os
import platform
import re
import subprocess
import sys

from setuptools.command.build import build as _build
from setuptools.command.sdist import sdist as _sdist

try:
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # building an sdist needs no wheel package
    _bdist_wheel = None

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# What glibc-based manylinux policies let a binary link (PEP 600; auditwheel's policy list).
MANYLINUX_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
                  "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
SDIST_DIRS = ("cmd", "lib", "formats", "verify")
SDIST_FILES = ("Makefile", "README.md", "pyproject.toml", "tests/fuzz/fuzz.mk", "tests/bench/bench.mk")


def _make(*targets):
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    jobs = str(min(os.cpu_count() or 1, 8))
    cmd = ["make", "-C", ROOT, "-j" + jobs] + list(targets)
    print("tpshard: " + " ".join(cmd), flush=True)
    subprocess.run(cmd, env=env, check=True)


class build(_build):
    """make py-bin, then the usual build (the Python package), in build/python: build/lib is
    the C objects' (Makefile)."""

    def initialize_options(self):
        super().initialize_options()
        self.build_base = os.path.join("build", "python")

    def run(self):
        try:
            _make("py-bin")
        except subprocess.CalledProcessError:
            # No static libz.a/libyaml.a: link them dynamically; the tag will say linux_<arch>.
            print("tpshard: static zlib/libyaml not linkable; linking them dynamically", file=sys.stderr)
            _make("py-bin", "PY_STATIC_LIBS=")
        super().run()


def _elf_needs(path):
    """(NEEDED libraries, newest GLIBC_2.N minor) of an ELF file, from readelf."""
    out = subprocess.run(["readelf", "--dynamic", "--version-info", "--wide", path], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))
    minors = [int(m) for m in re.findall(r"GLIBC_2\.(\d+)", out)]
    return needed, max(minors) if minors else 17


def platform_tag(binary):
    arch = platform.machine()
    if sys.platform != "linux":
        raise SystemExit("tpshard: the Python distribution builds on Linux only")
    try:
        needed, minor = _elf_needs(binary)
    except (OSError, subprocess.CalledProcessError):
        return "linux_" + arch
    if needed - MANYLINUX_LIBS:
        return "linux_" + arch
    return "manylinux_2_%d_%s" % (max(minor, 17), arch)


if _bdist_wheel is not None:
    class bdist_wheel(_bdist_wheel):
        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False  # it carries a native executable

        def get_tag(self):
            return "py3", "none", platform_tag(os.path.join(ROOT, "build", "py", "tpshard"))
else:  # pragma: no cover
    bdist_wheel = None


class sdist(_sdist):
    def make_distribution(self):
        for d in SDIST_DIRS:
            for base, dirs, files in os.walk(os.path.join(ROOT, d)):
                dirs[:] = [x for x in dirs if x not in ("__pycache__",) and not x.endswith(".egg-info")]
                for f in files:
                    if not f.endswith((".pyc", ".o", ".d")):
                        self.filelist.append(os.path.relpath(os.path.join(base, f), ROOT))
        self.filelist.extend(SDIST_FILES)
        self.filelist.sort()
        self.filelist.remove_duplicates()
        super().make_distribution()
