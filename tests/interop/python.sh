#!/bin/sh
# Prints the Python interpreter that has torch, numpy and safetensors: the project's venv
# (made by tests/interop/setup.sh on Debian's /usr/bin/python3 with system site packages),
# else Debian's python3 if it has all three.  Prints nothing and fails otherwise.
top=$(cd "$(dirname "$0")/../.." && pwd)
for py in "$top/build/venv/bin/python3" /usr/bin/python3; do
    if [ -x "$py" ] && "$py" -c 'import torch, numpy, safetensors' >/dev/null 2>&1; then
        echo "$py"
        exit 0
    fi
done
exit 1
