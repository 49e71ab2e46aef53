#!/bin/sh
# Installs the torch-2 interop tier: PyPI's torch 2.5.1 and transformers 4.57.6 in their own
# venv (build/venv-torch2, no system site packages: Debian's torch 1.13 must not shadow it).
# transformers 4.48 and later need torch 2, and only they have Qwen3, Qwen3-MoE, Gemma 3,
# DeepSeek-V2/V3, OLMo 2 and GPT-OSS (measured: 4.46/4.47 are the last on torch 1.13).  The CPU is all
# the tests use; PyPI's manylinux torch wheel still pulls NVIDIA's CUDA runtime wheels (about
# 5 GB, 2 minutes).  Installs only what is missing and says what it does.
# accelerate (with psutil and pyyaml) goes into build/py-accelerate with pip --target, beside
# the venv and not in it: transformers' Mxfp4Config(dequantize=True) needs it to load an MXFP4
# GPT-OSS on the CPU (tests/interop/quant/torch2/torch2_mxfp4.py puts the folder on sys.path).
#   TPS_TORCH2=0 sh tests/interop/setup_torch2.sh    does nothing (the tier then skips, saying so)
set -eu
[ "${TPS_TORCH2:-1}" = 0 ] && { echo "interop setup (torch 2): skipped, TPS_TORCH2=0"; exit 0; }
top=$(cd "$(dirname "$0")/../.." && pwd)
venv="$top/build/venv-torch2"
want='torch==2.5.1 transformers==4.57.6 tokenizers==0.22.2 huggingface-hub==0.36.2 safetensors==0.8.0 numpy==2.1.3'
if ! "$venv/bin/python3" -c 'import torch, transformers, safetensors, numpy, sys
sys.exit(not (torch.__version__.startswith("2.5.1") and transformers.__version__ == "4.57.6"))' >/dev/null 2>&1; then
    if [ ! -x "$venv/bin/python3" ]; then
        echo "interop setup (torch 2): creating $venv"
        /usr/bin/python3 -m venv "$venv"
    fi
    echo "interop setup (torch 2): installing $want from PyPI into $venv"
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check $want
fi
"$venv/bin/python3" -c 'import torch, transformers; print("interop setup (torch 2): torch", torch.__version__, "transformers", transformers.__version__)'
accel="$top/build/py-accelerate"
if ! PYTHONPATH="$accel" "$venv/bin/python3" -c 'import accelerate, sys
sys.exit(accelerate.__version__ != "1.16.0")' >/dev/null 2>&1; then
    echo "interop setup (torch 2): installing accelerate==1.16.0 psutil pyyaml from PyPI into $accel"
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check --no-deps --upgrade --target "$accel" \
        accelerate==1.16.0 psutil==7.2.2 pyyaml==6.0.4
fi
