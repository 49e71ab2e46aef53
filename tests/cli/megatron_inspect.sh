#!/bin/sh
# tpshard inspect on Megatron-LM checkpoints written at test time by testdata/gen_megatron.py
# (torch alone, the specification's rules; see tests/interop/megatron/megatron_fixture.py): the grid,
# iteration and model args, the tracker/iteration/trailing-slash forms, and a missing rank.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

PY=${TPS_SYS_PYTHON:-/usr/bin/python3}
if ! [ -x "$PY" ] || ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    skip "megatron_inspect: $PY with torch not found, cannot write Megatron fixtures"
    exit 0
fi
"$PY" "$FIX/gen_megatron.py" tp2pp2 --tp 2 --pp 2 --optimizer --rng >gen.err 2>&1 || { notok "gen_megatron.py failed"; sed 's/^/#   /' gen.err; exit 1; }
"$PY" "$FIX/gen_megatron.py" legacy --tp 2 --pp 1 --legacy --tied --release --extra bytesio >gen.err 2>&1 || { notok "gen_megatron.py --legacy failed"; sed 's/^/#   /' gen.err; exit 1; }

for p in tp2pp2 tp2pp2/ tp2pp2/iter_0000001 tp2pp2/iter_0000001/; do
    if "$TPSHARD" inspect "$p" >out.txt 2>err.txt && grep -q "iteration 1, checkpoint_version 3.0, tp 2 x pp 2, 4 files" out.txt &&
        grep -q "model: layers 4, hidden 16, heads 4, query groups 2, .* ffn 32, swiglu true, vocab 37, padded vocab 40, untied embeddings true, normalization RMSNorm, position embedding rope, params dtype float32" out.txt &&
        [ "$(grep -c 'decoder.layers.1.mlp.linear_fc2.weight *F32 *\[16, 16\]' out.txt)" -eq 4 ]; then
        ok "inspect $p: tp 2 x pp 2, iteration 1, model args, local layer numbers on every rank"
    else
        notok "inspect $p"
        sed 's/^/#   /' out.txt err.txt | head -20
    fi
done
if "$TPSHARD" inspect legacy >out.txt 2>err.txt && grep -q "release, iteration 0, checkpoint_version 3.0, tp 2 x pp 1" out.txt &&
    grep -q "legacy language_model names" out.txt && grep -q "self_attention.linear_qkv.weight *F32 *\[16, 16\]" out.txt; then
    ok "inspect of a release checkpoint with legacy names shows Megatron-Core names"
else
    notok "inspect legacy"
    sed 's/^/#   /' out.txt err.txt | head -20
fi
rm -rf tp2pp2/iter_0000001/mp_rank_00_001
expect_exit 3 "mp_rank_00_001 is missing" "a missing rank directory is named (exit 3)" "$TPSHARD" inspect tp2pp2
