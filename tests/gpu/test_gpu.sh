#!/bin/sh
# make test-gpu: the CUDA backend against the threaded CPU backend on the tiny fixtures
# (same verdict on every layer and stage, tp 1..8, --emulate where GPUs are fewer), the
# refusal of fewer GPUs than ranks, wrong layouts caught naming the same rank, and MPI with
# CUDA when mpirun is there.  Without a GPU every case skips loudly.
TPS_TOP=${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
TPSHARD=${TPSHARD:-$TPS_TOP/tpshard}
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"
# make test-gpu runs this script alone, not through tests/run.sh: a failed case must fail it.
failed=0
notok() {
    failed=1
    echo "not ok - $*"
}

"$TPSHARD" split "$M/tiny-llama" --tp 1 --preset llama --config "$M/tiny-llama/config.json" -o "$T/probe" -q
timeout 300 "$TPSHARD" verify "$T/probe" --backend cuda >"$T/probe.out" 2>&1
rc=$?
if [ $rc -eq 5 ]; then
    skip "CUDA backend tests: $(tail -1 "$T/probe.out")"
    exit 0
fi
gpus=$(sed -n 's/.*; \([0-9]*\) x .*/\1/p' "$T/probe.out" | head -1)
if [ $rc -ne 0 ] || [ -z "$gpus" ]; then
    notok "tp 1 on the GPU: verify --backend cuda passes"
    sed 's/^/#   /' "$T/probe.out" | head -10
    exit 1
fi
if grep -q "NCCL all-reduce" "$T/probe.out"; then ok "tp 1 on one GPU goes through NCCL"; else
    notok "tp 1 on one GPU goes through NCCL"
    sed 's/^/#   /' "$T/probe.out" | head -3
fi

verdicts() { # JSON report -> "layer stage pass" lines and the overall verdict
    /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
for l in r["layers"]:
    for s in ("attention", "mlp"):
        print(l["layer"], s, l[s]["pass"])
print("all", r["pass"])
' "$1"
}

for spec in llama:llama:8 qwen2:llama:8 gpt2:gpt2:4 neox:neox:4 phi3:phi3:8 mixtral:mixtral:8; do
    model=${spec%%:*} rest=${spec#*:} preset=${rest%%:*} heads=${rest#*:}
    for tp in 1 2 4 8; do
        [ $((heads % tp)) -eq 0 ] || continue
        out="$T/$model-$tp"
        "$TPSHARD" split "$M/tiny-$model" --tp "$tp" --preset "$preset" --config "$M/tiny-$model/config.json" \
            -o "$out" -q || { notok "$model tp $tp: split"; continue; }
        emulate=
        [ "$gpus" -lt "$tp" ] && emulate=--emulate
        "$TPSHARD" verify "$out" --json >"$T/cpu.json" 2>/dev/null
        timeout 300 "$TPSHARD" verify "$out" --backend cuda $emulate --json >"$T/gpu.json" 2>"$T/gpu.err"
        rc=$?
        verdicts "$T/cpu.json" >"$T/cpu.v" 2>&1
        verdicts "$T/gpu.json" >"$T/gpu.v" 2>&1
        if [ $rc -eq 0 ] && cmp -s "$T/cpu.v" "$T/gpu.v" && grep -q "^all True" "$T/gpu.v"; then
            ok "$model tp $tp: cuda $emulate passes every layer and stage as the CPU does"
        else
            notok "$model tp $tp: cuda $emulate passes every layer and stage as the CPU does"
            echo "#   exit $rc"
            diff "$T/cpu.v" "$T/gpu.v" | sed 's/^/#   /' | head -6
            sed 's/^/#   /' "$T/gpu.err" "$T/gpu.json" | head -20
        fi
    done
done

if [ "$gpus" -lt 8 ]; then
    expect_exit 5 "need 8 GPUs, $gpus found" "tp 8 on $gpus GPU(s) without --emulate: exit 5 with the counts" \
        timeout 300 "$TPSHARD" verify "$T/llama-8" --backend cuda
    timeout 300 "$TPSHARD" verify "$T/llama-8" --backend cuda --emulate >"$T/.out" 2>&1
    if grep -q "NCCL NOT exercised" "$T/.out"; then ok "--emulate: the report says NCCL was not exercised"; else
        notok "--emulate: the report says NCCL was not exercised"
        sed 's/^/#   /' "$T/.out" | head -3
    fi
else
    skip "refusal of fewer GPUs than ranks: this machine has $gpus GPUs"
fi

# Wrong layouts fail on the GPU as on the CPU, naming the same stage and rank.
"$TPSHARD" layout --preset llama >"$T/base.yaml"
awk '{ print } /^rules:/ { print "  - match: \"model.layers.*.self_attn.{k_proj,v_proj}.weight\"\n    split: column" }' \
    "$T/base.yaml" >"$T/kv.yaml"
awk '{ print } /^rules:/ { print "  - match: model.layers.*.self_attn.q_proj.weight\n    split: column\n    unit: head_dim\n    segments: {qa: heads*head_dim/2, qb: heads*head_dim/2}" }' \
    "$T/base.yaml" >"$T/q.yaml"
"$TPSHARD" split "$M/tiny-llama" --tp 4 --layout "$T/kv.yaml" --config "$M/tiny-llama/config.json" -o "$T/kv" -q
"$TPSHARD" split "$M/tiny-llama" --tp 2 --layout "$T/q.yaml" --config "$M/tiny-llama/config.json" -o "$T/q" -q
e4=; [ "$gpus" -lt 4 ] && e4=--emulate
e2=; [ "$gpus" -lt 2 ] && e2=--emulate
expect_exit 1 "rank 0 holds model.layers.0.self_attn.k_proj.weight" "wrong KV cut: cuda exits 1 naming rank 0's k_proj" \
    timeout 300 "$TPSHARD" verify "$T/kv" --backend cuda $e4
expect_exit 1 "rank 0's partial sum differs from the reference for its share" \
    "wrong q order: cuda exits 1 blaming rank 0's partial sum" timeout 300 "$TPSHARD" verify "$T/q" --backend cuda $e2

# MPI with CUDA: NCCL from a broadcast unique id (or the host all-reduce on one GPU).
if command -v mpirun >/dev/null 2>&1 && make -s -C "$TPS_TOP" config 2>/dev/null | grep -q "^MPI  *found"; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    flags=
    mpirun --version 2>&1 | grep -q "Open MPI" && flags=--oversubscribe
    timeout 300 mpirun $flags -np 2 "$TPSHARD" verify "$T/llama-2" --backend cuda $e2 >"$T/.out" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q "layers verified" "$T/.out"; then
        ok "mpirun -np 2 --backend cuda $e2: passes ($(grep -o 'NCCL all-reduce\|by MPI through the host' "$T/.out" | head -1))"
    else
        notok "mpirun -np 2 --backend cuda $e2: passes"
        sed 's/^/#   /' "$T/.out" | head -15
    fi
else
    skip "MPI with CUDA: no mpirun or no MPI plugin"
fi
exit $failed
