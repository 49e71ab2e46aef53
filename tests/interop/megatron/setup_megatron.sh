#!/bin/sh
# Installs the Megatron tier: real Megatron-Core (megatron-core 0.16.1, the newest PyPI offers
# for Python 3.11) in build/venv-megatron, the outside truth for tpshard's Megatron checkpoints
# (tests/interop/megatron/megatron_real.py).  The venv holds only megatron-core, einops and psutil (about
# 16 MB; psutil: dist_checkpointing.save's async queue imports it, the torch_dist tests save with it);
# torch 2.5.1, transformers, safetensors, numpy and packaging come from the torch-2 venv
# (build/venv-torch2, setup_torch2.sh) through a .pth file, so no second 5 GB torch is
# installed.  megatron-core declares torch >= 2.6 and is installed with --no-deps: measured,
# its GPTModel (local layer spec) builds, loads strict and runs the TP x PP forward on the CPU
# with torch 2.5.1; torch.load is called with weights_only=True explicitly (the 2.6 default).
# Installs only what is missing and says what it does; fails loudly.
#   TPS_MEGATRON=0 sh tests/interop/megatron/setup_megatron.sh   does nothing (the tier then skips)
set -eu
[ "${TPS_MEGATRON:-1}" = 0 ] && { echo "interop setup (megatron): skipped, TPS_MEGATRON=0"; exit 0; }
[ "${TPS_TORCH2:-1}" = 0 ] && { echo "interop setup (megatron): skipped, TPS_TORCH2=0 (it runs on the torch-2 venv)"; exit 0; }
top=$(cd "$(dirname "$0")/../../.." && pwd)
base="$top/build/venv-torch2"
venv="$top/build/venv-megatron"
want='megatron-core==0.16.1 einops==0.8.2 psutil==7.0.0'
if [ ! -x "$base/bin/python3" ]; then
    echo "interop setup (megatron): $base is missing; run tests/interop/setup_torch2.sh first" >&2
    exit 1
fi
base_site=$("$base/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# quick check (metadata only): an import of megatron.core takes seconds
have='import importlib.metadata as m, sys
sys.exit(m.version("megatron-core") != "0.16.1" or m.version("einops") != "0.8.2"
         or m.version("psutil") != "7.0.0")'
probe='import megatron.core, einops, psutil, torch, transformers, safetensors
from megatron.core.models.gpt import GPTModel'
if [ ! -x "$venv/bin/python3" ]; then
    echo "interop setup (megatron): creating $venv on top of $base"
    "$base/bin/python3" -m venv --without-pip "$venv"
fi
# (re)written each time: the torch-2 venv may have been made anew elsewhere
site=$("$venv/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$base_site" >"$site/tps-venv-torch2.pth"
if ! "$venv/bin/python3" -c "$have" >/dev/null 2>&1; then
    echo "interop setup (megatron): installing $want from PyPI into $venv (--no-deps: torch from $base)"
    "$base/bin/python3" -m pip --python "$venv/bin/python3" install -q --disable-pip-version-check --no-deps $want
    "$venv/bin/python3" -W ignore -c "$probe" >/dev/null 2>&1 || {
        echo "interop setup (megatron): $venv cannot import megatron.core's GPTModel:" >&2
        "$venv/bin/python3" -c "$probe" >&2
        exit 1
    }
fi
echo "interop setup (megatron): megatron-core 0.16.1, einops 0.8.2 and psutil 7.0.0 in $venv (torch from $base)"
