#!/bin/sh
# GPTQ and AWQ fixtures (testdata/gen_quant_int.py): split with the preset from config.json,
# check and verify (dequantized) at every legal tp, the refused tps listed, and scale rows on
# the wrong rank (right shapes, intact bytes) caught by verify (exit 1) while check passes.
# The per-rank pieces against the engine's rules, the torch forward, merge and reshard:
# tests/interop/test_quant_int.py.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"

for fx in "tiny-llama-gptq 1 2 4 8" "tiny-llama-gptq-actorder 1 2 4" "tiny-llama-awq 1 2" "tiny-mixtral-gptq 1 2 4"; do
    set -- $fx
    fxn=$1
    shift
    legal=$(echo "$@" | sed 's/ /, /g')
    for tp in "$@"; do
        out="$T/$fxn-$tp"
        check "$fxn tp $tp: split" "$TPSHARD" split "$M/$fxn" --tp "$tp" -o "$out" -q || continue
        check "$fxn tp $tp: check passes" "$TPSHARD" check "$out" -q
        check "$fxn tp $tp: verify --source --layer all passes (dequantized)" \
            "$TPSHARD" verify "$out" --source "$M/$fxn" --layer all -q
        check "$fxn tp $tp: verify --whole-model passes" "$TPSHARD" verify "$out" --whole-model -q
    done
    expect_exit 3 "tp values that fit: $legal" "$fxn tp 16: refused, listing $legal" \
        "$TPSHARD" plan "$M/$fxn" --tp 16
done

# intermediate 192 in groups of 32 (the shape of 11008 in groups of 128): tp 4 leaves 48 input
# rows of down_proj a rank, inside a group.
expect_exit 3 "gives each rank 48, not a multiple of the quantization block 32" \
    "awq tp 4: down_proj refused naming the local size and the group" "$TPSHARD" plan "$M/tiny-llama-awq" --tp 4

# Wrong cuts whose bytes are intact: down_proj's group rows dealt as two interleaved halves
# (rank 0 holds groups 0-3 and 8-11 where it needs 0-7), q_proj's scale columns likewise, AWQ's
# q_proj qzeros words likewise.
down_scales='  - match: model.layers.*.mlp.down_proj.scales
    split: dim
    dim: 0
    segments:
      - {name: a, size: intermediate/32}
      - {name: b, size: intermediate/32}'
q_scales='  - match: model.layers.*.self_attn.q_proj.scales
    split: dim
    dim: 1
    segments:
      - {name: a, size: hidden/2}
      - {name: b, size: hidden/2}'
for w in down_scales q_scales; do
    eval "rule=\$$w"
    split_wrong "gptq-$w" llama "$M/tiny-llama-gptq" 2 "$rule" "$T/wrong-$w" || continue
    check "gptq $w: check passes (the bytes are what the manifest says)" "$TPSHARD" check "$T/wrong-$w" -q
    expect_exit 1 "" "gptq $w: verify --layer all --source exits 1" \
        "$TPSHARD" verify "$T/wrong-$w" --source "$M/tiny-llama-gptq" --layer all
done
awq_zeros='  - match: model.layers.*.self_attn.q_proj.qzeros
    split: dim
    dim: 1
    segments:
      - {name: a, size: hidden/16}
      - {name: b, size: hidden/16}'
if split_wrong "awq-zeros" llama "$M/tiny-llama-awq" 2 "$awq_zeros" "$T/wrong-awq-zeros"; then
    check "awq zeros halves: check passes" "$TPSHARD" check "$T/wrong-awq-zeros" -q
    expect_exit 1 "" "awq zeros halves: verify --layer all --source exits 1" \
        "$TPSHARD" verify "$T/wrong-awq-zeros" --source "$M/tiny-llama-awq" --layer all
fi
# Act-order: o_proj's g_idx whole on every rank instead of cut with the input rows: the rank's
# pieces do not fit together, and verify names the tensor.
gidx_rep='  - match: model.layers.*.self_attn.o_proj.g_idx
    split: replicate'
if split_wrong "actorder-gidx" llama "$M/tiny-llama-gptq-actorder" 2 "$gidx_rep" "$T/wrong-gidx"; then
    expect_exit 1 "o_proj.g_idx" "act-order g_idx replicated on a row layer: verify exits 1 naming it" \
        "$TPSHARD" verify "$T/wrong-gidx" --source "$M/tiny-llama-gptq-actorder" --layer all
fi
