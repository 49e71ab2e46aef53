#!/bin/sh
# Prints the Megatron tier's interpreter (build/venv-megatron, made by setup_megatron.sh) when it
# imports torch and finds megatron.core, transformers and safetensors (importing megatron.core
# itself takes seconds); prints nothing and fails otherwise.
top=$(cd "$(dirname "$0")/../../.." && pwd)
py="$top/build/venv-megatron/bin/python3"
if [ -x "$py" ] && "$py" -c 'import importlib.util as u, torch, sys
sys.exit(any(u.find_spec(n) is None for n in ("megatron.core", "transformers", "safetensors")))' >/dev/null 2>&1; then
    echo "$py"
    exit 0
fi
exit 1
