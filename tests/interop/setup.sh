#!/bin/sh
# Installs what the interop tier needs: Debian's python3-torch and python3-numpy, and PyPI's
# safetensors in a venv (build/venv) that sees Debian's packages.  Installs only what is
# missing and says what it does.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
missing=
for p in python3-torch python3-numpy python3-venv; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "interop setup: installing Debian packages:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
venv="$top/build/venv"
if [ ! -x "$venv/bin/python3" ]; then
    echo "interop setup: creating $venv (system site packages visible)"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python3" -c 'import safetensors' >/dev/null 2>&1; then
    echo "interop setup: installing safetensors from PyPI into $venv"
    "$venv/bin/python3" -m pip install -q safetensors
fi
"$venv/bin/python3" -c 'import torch, numpy, safetensors; print("interop setup: torch", torch.__version__, "numpy", numpy.__version__, "safetensors", safetensors.__version__)'
