#!/bin/sh
# verify --backend devsim: the GPU path without a GPU.  The devsim plugin
# (verify/backends/devsim/devsim.c) implements the device primitives of the cuda plugin in host
# memory, so these runs cover, in every make test, what a GPU run does except the CUDA,
# cuBLAS and NCCL calls: each rank's matrices uploaded to its device, every GEMM there, the
# all-reduce over the devices' buffers, the whole-model pass's LM head, --emulate.
#   - every model fixture, at every tp in 1, 2, 4, 8 that split accepts, passes with
#     --layer all and with --whole-model (the reference is the float64 host math, another
#     path than the devices' float32 GEMMs);
#   - faults planted in the device (a GEMM 1% off on one rank, a rank left out of the sums)
#     make verify exit 1: the devices' results are what is compared, not the host's;
#   - (the wrong-cut controls of the other scripts run on devsim as on the CPU ranks:
#     expect_wrong_cut in tests/cli/lib.sh, the wrong() helpers of verify.sh and
#     verify_whole.sh);
#   - fewer devices than ranks is refused (exit 5) unless --emulate, which says NCCL-style
#     one-device-per-rank all-reduce was not exercised.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"

if [ ! -f "$TPS_TOP/build/libtpshard-devsim.so" ]; then
    notok "the devsim plugin is built by make (build/libtpshard-devsim.so is missing)"
    exit 0
fi

for src in "$M"/tiny-*; do
    model=${src##*/tiny-}
    for tp in 1 2 4 8; do
        out="$T/$model-$tp"
        # split refuses a tp the model's sizes do not divide (tests/cli/refusals.sh covers those)
        "$TPSHARD" split "$src" --tp "$tp" -o "$out" -q >/dev/null 2>&1 || continue
        "$TPSHARD" verify "$out" --layer all --backend devsim >"$T/.out" 2>&1
        lrc=$?
        "$TPSHARD" verify "$out" --whole-model --backend devsim -q >>"$T/.out" 2>&1
        wrc=$?
        if [ $lrc -eq 0 ] && [ $wrc -eq 0 ] && grep -q "backend devsim ($tp ranks, one device each" "$T/.out" &&
            grep -q "^  device: uploaded" "$T/.out"; then
            ok "$model tp $tp: verify --backend devsim passes, layers and whole model"
        else
            notok "$model tp $tp: verify --backend devsim passes, layers and whole model"
            echo "#   --layer all exit $lrc, --whole-model exit $wrc"
            sed 's/^/#   /' "$T/.out" | head -8
        fi
        [ "$model-$tp" = llama-2 ] || [ "$model-$tp" = mixtral-4 ] || [ "$model-$tp" = gpt2-2 ] || rm -rf "$out"
    done
done

# Planted device faults are caught: the compared outputs are the devices'.
for fault in gemm allreduce; do
    for set in llama-2 mixtral-4 gpt2-2; do
        TPS_DEVSIM_FAULT=$fault "$TPSHARD" verify "$T/$set" --backend devsim >"$T/.out" 2>&1
        rc=$?
        if [ $rc -eq 1 ] && grep -q "^tpshard verify: mismatch in layer 0" "$T/.out"; then
            ok "$set: a device whose $fault is wrong makes verify exit 1"
        else
            notok "$set: a device whose $fault is wrong makes verify exit 1 (exit $rc)"
            sed 's/^/#   /' "$T/.out" | tail -3
        fi
    done
done
TPS_DEVSIM_FAULT=gemm "$TPSHARD" verify "$T/llama-2" --whole-model --backend devsim >"$T/.out" 2>&1
expect_rc=$?
[ $expect_rc -eq 1 ] && ok "whole model: a wrong device GEMM makes verify --whole-model exit 1" ||
    notok "whole model: a wrong device GEMM makes verify --whole-model exit 1 (exit $expect_rc)"

# Fewer devices than ranks: refused naming --emulate, which then shares them.
expect_exit 5 "--emulate runs them on the ones there are" "devsim with 2 devices for 4 ranks is refused naming --emulate" \
    env TPS_DEVSIM_DEVICES=2 "$TPSHARD" verify "$T/mixtral-4" --backend devsim
TPS_DEVSIM_DEVICES=2 "$TPSHARD" verify "$T/mixtral-4" --backend devsim --emulate >"$T/.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "emulated (4 ranks on 2 devices, 2 per device; .* NOT exercised" "$T/.out"; then
    ok "devsim --emulate: 4 ranks share 2 devices and the report says what was not exercised"
else
    notok "devsim --emulate: 4 ranks share 2 devices and the report says what was not exercised (exit $rc)"
    sed 's/^/#   /' "$T/.out" | head -3
fi
expect_exit 5 "no device" "devsim with no device exits 5" env TPS_DEVSIM_DEVICES=0 "$TPSHARD" verify "$T/llama-2" --backend devsim

# --json names the device backend and its devices.
if "$TPSHARD" verify "$T/llama-2" --backend devsim --json >"$T/v.json" 2>"$T/.err" &&
    /usr/bin/python3 - "$T/v.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["backend"] == "devsim" and r["launcher"] == "local" and r["devices"] == 2 and r["ranks_per_device"] == 1, r
assert r["pass"] and all(l["upload_bytes"] > 0 for l in r["layers"]), r["layers"]
PY
then ok "verify --backend devsim --json: backend, devices and upload bytes"; else
    notok "verify --backend devsim --json: backend, devices and upload bytes"
    sed 's/^/#   /' "$T/.err" | head -5
fi
