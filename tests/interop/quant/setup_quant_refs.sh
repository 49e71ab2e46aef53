#!/bin/sh
# Fetches the producers' own GPTQ and AWQ code for tests/interop/quant/torch2/torch2_quant_refs.py: the
# AutoGPTQ 0.7.1 wheel's QuantLinear (auto_gptq/nn_modules/qlinear/qlinear_cuda.py: pack, and a
# forward that dequantizes in torch when its CUDA extension is absent) and AutoAWQ 0.2.9's
# awq/utils/packing_utils.py (dequantize_gemm).  Neither package installs without a GPU
# toolchain or pins torch and transformers versions the tier does not have, so only these
# two files are kept (pip download --no-deps, then unpacked), under build/quant-refs.
#   TPS_QUANT_REFS=0 sh tests/interop/quant/setup_quant_refs.sh    does nothing (the test then skips, saying so)
set -eu
[ "${TPS_QUANT_REFS:-1}" = 0 ] && { echo "quant refs: skipped, TPS_QUANT_REFS=0"; exit 0; }
top=$(cd "$(dirname "$0")/../../.." && pwd)
py="$top/build/venv-torch2/bin/python3"
dst="$top/build/quant-refs"
[ -f "$dst/qlinear_cuda.py" ] && [ -f "$dst/packing_utils.py" ] && exit 0
[ -x "$py" ] || { echo "quant refs: no torch-2 venv at $top/build/venv-torch2"; exit 1; }
mkdir -p "$dst/dl"
echo "quant refs: pip download --no-deps auto-gptq==0.7.1 autoawq==0.2.9 into $dst"
"$py" -m pip download -q --disable-pip-version-check --no-deps -d "$dst/dl" auto-gptq==0.7.1 autoawq==0.2.9
"$py" - "$dst" <<'PY'
import glob, os, sys, tarfile, zipfile
dst = sys.argv[1]
whl = glob.glob(os.path.join(dst, "dl", "auto_gptq-0.7.1-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    open(os.path.join(dst, "qlinear_cuda.py"), "wb").write(z.read("auto_gptq/nn_modules/qlinear/qlinear_cuda.py"))
with tarfile.open(os.path.join(dst, "dl", "autoawq-0.2.9.tar.gz")) as t:
    f = t.extractfile("autoawq-0.2.9/awq/utils/packing_utils.py")
    open(os.path.join(dst, "packing_utils.py"), "wb").write(f.read())
PY
echo "quant refs: $dst/qlinear_cuda.py (AutoGPTQ 0.7.1), $dst/packing_utils.py (AutoAWQ 0.2.9)"
