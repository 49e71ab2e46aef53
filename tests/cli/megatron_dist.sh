#!/bin/sh
# Megatron-Core torch_dist checkpoints (formats/megatron/megatron_dist.h) on the committed
# catalogue testdata/bad/megatron_dist/ (saved by real megatron-core at tp 2,
# testdata/gen_megatron_dist.py): split of the checkpoint equals split of its merge, byte for
# byte (two paths: the DCP read through the Megatron-to-HF mapping, and the safetensors the
# merge wrote); every hostile copy makes split and merge exit 3 with nothing written and the
# input unchanged.  The numbers themselves (transformers' logits of the merge equal
# megatron-core's) are checked by tests/interop/megatron/real/megatron_real_dist.py.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

D="$FIX/bad/megatron_dist"
good="$D/tp2_iter"

"$TPSHARD" split "$good" --tp 2 --target vllm -o direct -q 2>err.txt
rc=$?
"$TPSHARD" merge "$good" --target hf -o hf/ -q 2>>err.txt
rc2=$?
"$TPSHARD" split hf --tp 2 --target vllm -o via_hf -q 2>>err.txt
rc3=$?
same=true
for f in config.json model-rank-0-part-0.safetensors model-rank-1-part-0.safetensors; do
    cmp -s "direct/$f" "via_hf/$f" || same=false
done
if [ "$rc$rc2$rc3" = 000 ] && $same && [ ! -e direct/__0_0.distcp ] && [ ! -e direct/common.pt ]; then
    ok "torch_dist: split --tp 2 --target vllm equals split of its merge --target hf byte for byte (config.json from args, no shard files copied)"
else
    notok "torch_dist: split/merge (exit $rc $rc2 $rc3, same=$same)"
    ls direct via_hf 2>&1 | sed 's/^/#   /'
    sed 's/^/#   /' err.txt | head -10
fi
if "$TPSHARD" check direct >out.txt 2>&1; then
    ok "torch_dist: check passes on the split"
else
    notok "torch_dist: check on the split"
    sed 's/^/#   /' out.txt | head -5
fi
# check and verify read it as a one-rank set of its global tensors.
if "$TPSHARD" check "$good" >out.txt 2>&1 && grep -q "15 tensors" out.txt; then
    ok "torch_dist: check reads every tensor of the checkpoint (no rank files to prove)"
else
    notok "torch_dist: check of the checkpoint"
    sed 's/^/#   /' out.txt | head -5
fi
if "$TPSHARD" verify "$good" --layer all >out.txt 2>&1 && grep -q "2 layers verified" out.txt; then
    ok "torch_dist: verify --layer all runs both layers"
else
    notok "torch_dist: verify --layer all"
    sed 's/^/#   /' out.txt | head -5
fi
# The note line says what is left out.
"$TPSHARD" merge "$good" --target hf -o hf2/ >out.txt 2>err.txt
if grep -q "torch_dist checkpoint saved at tp 2 x pp 1, iteration 1: model tensors read; 0 optimizer tensors and 2 other non-tensor entries" err.txt; then
    ok "torch_dist: merge says the grid it was saved at and what it leaves out"
else
    notok "torch_dist: merge note"
    sed 's/^/#   /' err.txt | head -5
fi

sums() { (cd "$1" && find . -type f | sort | xargs cksum); }
tab=$(printf '\t')
while IFS=$tab read -r file code frag sub; do
    case "$file" in '' | '#'* | tp2_iter) continue ;; esac
    before=$(sums "$D/$file")
    "$TPSHARD" split "$D/$file" --tp 2 --target vllm -o "out-$file" >/dev/null 2>err.txt
    rc=$?
    "$TPSHARD" merge "$D/$file" --target hf -o "hf-$file/" >/dev/null 2>>err.txt
    rc2=$?
    if [ "$rc$rc2" = 33 ] && [ ! -e "out-$file" ] && [ ! -e "hf-$file" ] && [ -z "$(ls -A . | grep '^\.tpshard')" ] &&
        [ "$(sums "$D/$file")" = "$before" ] && grep -qF -- "$frag" err.txt; then
        ok "torch_dist $file: split and merge exit 3 naming it ($frag), nothing written, input unchanged"
    else
        notok "torch_dist $file: split exit $rc, merge exit $rc2"
        ls -A | sed 's/^/#   /'
        sed 's/^/#   /' err.txt | head -4
    fi
done <"$D/CASES"
