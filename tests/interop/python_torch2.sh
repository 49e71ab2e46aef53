#!/bin/sh
# Prints the torch-2 tier's interpreter (build/venv-torch2, made by setup_torch2.sh) when it
# has torch 2, transformers, numpy and safetensors; prints nothing and fails otherwise.
top=$(cd "$(dirname "$0")/../.." && pwd)
py="$top/build/venv-torch2/bin/python3"
if [ -x "$py" ] && "$py" -c 'import torch, transformers, numpy, safetensors, sys
sys.exit(int(torch.__version__.split(".")[0]) < 2)' >/dev/null 2>&1; then
    echo "$py"
    exit 0
fi
exit 1
