#!/bin/sh
# Prints the real-vLLM tier's interpreter (build/venv-vllm, made by setup_vllm.sh) when the
# tier is asked for (TPS_VLLM=1 or ci) and vllm imports there; prints nothing and fails
# otherwise (the tier then skips loudly, or fails when it was asked for: tests/run.sh).
case "${TPS_VLLM:-0}" in 1 | ci) ;; *) exit 1 ;; esac
top=$(cd "$(dirname "$0")/../../.." && pwd)
py="$top/build/venv-vllm/bin/python3"
if [ -x "$py" ] && [ -f "$top/build/venv-vllm/tpshard-stamp" ] && "$py" -c 'import vllm' >/dev/null 2>&1; then
    echo "$py"
    exit 0
fi
exit 1
