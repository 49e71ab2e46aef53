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
#   - the reference's linears run on the device too (float64, the plugin's gemm_f64): a
#     reference GEMM planted 1% off makes a correct set fail, on --layer all and --whole-model,
#     Linear and Conv1D (GPT-2) and FP8 block-scaled weights, so the device reference is what
#     every devsim run of the other scripts compares against;
#   - a plugin of an older build (plugin ABI 2, or one from before the ABI was exported) is
#     refused with exit 5, naming its file and both ABIs;
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
            grep -q "the reference's GEMMs in float64 on the first device)" "$T/.out" &&
            grep -q "^  device: uploaded" "$T/.out"; then
            ok "$model tp $tp: verify --backend devsim passes, layers and whole model"
        else
            notok "$model tp $tp: verify --backend devsim passes, layers and whole model"
            echo "#   --layer all exit $lrc, --whole-model exit $wrc"
            sed 's/^/#   /' "$T/.out" | head -8
        fi
        [ "$model-$tp" = llama-2 ] || [ "$model-$tp" = mixtral-4 ] || [ "$model-$tp" = gpt2-2 ] ||
            [ "$model-$tp" = deepseek-v3-fp8-2 ] || rm -rf "$out"
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

# The reference on the device: its float64 GEMM planted 1% off fails a correct set.
for set in llama-2 mixtral-4 gpt2-2 deepseek-v3-fp8-2; do
    [ -d "$T/$set" ] || { notok "$set: the set for the reference fault was not split"; continue; }
    TPS_DEVSIM_FAULT=refgemm "$TPSHARD" verify "$T/$set" --backend devsim >"$T/.out" 2>&1
    rc=$?
    TPS_DEVSIM_FAULT=refgemm "$TPSHARD" verify "$T/$set" --whole-model --backend devsim >"$T/.w" 2>&1
    wrc=$?
    if [ $rc -eq 1 ] && [ $wrc -eq 1 ] && grep -q "^tpshard verify: mismatch in layer 0" "$T/.out"; then
        ok "$set: a wrong float64 GEMM in the device reference makes verify exit 1 (layers and whole model)"
    else
        notok "$set: a wrong float64 GEMM in the device reference makes verify exit 1 (exit $rc, whole model $wrc)"
        sed 's/^/#   /' "$T/.out" | tail -3
    fi
done

# Plugins of older builds are refused, naming the file and the ABIs.
stale="$TPS_TOP/build/tests"
expect_exit 5 "stale-abi2/libtpshard-devsim.so is from another tpshard build: it speaks plugin ABI 2, this tpshard plugin ABI 3" \
    "a devsim plugin of plugin ABI 2 is refused, naming both ABIs" \
    env TPSHARD_PLUGIN_DIR="$stale/stale-abi2" "$TPSHARD" verify "$T/llama-2" --backend devsim
expect_exit 5 "it speaks a plugin ABI older than 3, this tpshard plugin ABI 3" \
    "a devsim plugin from before ABI 3 is refused" \
    env TPSHARD_PLUGIN_DIR="$stale/stale-abi-old" "$TPSHARD" verify "$T/llama-2" --backend devsim

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

# gpu-check's link measurement (tests/gpu/link_bw.c) through the devsim plugin's pinned and
# pageable uploads: it runs and prints both rates (on a GPU, make gpu-check prints the link's).
if "$TPS_TOP/build/gpu/link_bw" "$TPS_TOP/build/libtpshard-devsim.so" 4 2 >"$T/.out" 2>&1 &&
    grep -Eq "^link: pinned [0-9.]+ GB/s, pageable [0-9.]+ GB/s \(4 MiB, best of 2; 64 simulated devices" "$T/.out"; then
    ok "link_bw measures the devsim plugin's pinned and pageable uploads"
else
    notok "link_bw measures the devsim plugin's pinned and pageable uploads"
    sed 's/^/#   /' "$T/.out" | head -3
fi
