#!/bin/sh
# Installs what the interop tier needs: Debian's python3-torch and python3-numpy, and PyPI's
# safetensors and transformers in a venv (build/venv) that sees Debian's packages.  Installs
# only what is missing and says what it does.  transformers is pinned to 4.46.3: the last
# line (with 4.47) that runs on Debian's torch 1.13; 4.48 and later need torch 2.
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
if ! "$venv/bin/python3" -c 'import transformers, sys; sys.exit(transformers.__version__ != "4.46.3")' >/dev/null 2>&1; then
    echo "interop setup: installing transformers 4.46.3 from PyPI into $venv"
    # Its pins, named so that pip resolves nothing newer that would want torch 2.
    "$venv/bin/python3" -m pip install -q transformers==4.46.3 tokenizers==0.20.3 huggingface-hub==0.26.2
fi
"$venv/bin/python3" -c 'import torch, numpy, safetensors, transformers; print("interop setup: torch", torch.__version__, "numpy", numpy.__version__, "safetensors", safetensors.__version__, "transformers", transformers.__version__)'
