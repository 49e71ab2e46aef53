#!/bin/sh
# split/reshard --target megatron --ckpt-format torch_dist (lib/registry/megatron_dist_out.h,
# formats/dcp/dcp_write.h) on the committed tiny models: the directory layout (tracker 1,
# iter_0000001/ with metadata.json, common.pt, .metadata and __0_0.distcp), that tpshard reads
# it back as torch_dist (inspect; merge --target hf gives the tensors the merge of the legacy
# checkpoint split from the same model gives: every name, dtype, shape and CRC-32 equal; the
# order differs, torch_dist lists a stacked key's layers together), reshard of a legacy checkpoint to torch_dist, and
# the refusals: MoE (exit 3), an unknown --ckpt-format, --pp with torch_dist and --ckpt-format
# without --target megatron (exit 2), nothing written.  Real megatron-core loads what is
# written, and its logits equal transformers', in tests/interop/megatron/real/megatron_real_dist_write.py.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"

# The tensors of a merged model, by name: dtype, shape and the CRC-32 of their bytes (as a
# tp 1 split's manifest records them), one sorted line each.
tensors() {
    "$TPSHARD" split "$1" --tp 1 -o "$1.set" -q || return 1
    tr -d ' \n' <"$1.set/tpshard.json" | sed 's/{"name"/\n/g' | sed -n 's/^:"\([^"]*\)","dtype":"\([^"]*\)","shape":\(\[[0-9,]*\]\),"bytes":[0-9]*,"crc32":"\([0-9a-f]*\)".*/\1 \2 \3 \4/p' | sort
}

for model in llama qwen2; do
    src="$M/tiny-$model"
    out="$T/$model-dist"
    check "$model: split --target megatron --ckpt-format torch_dist --tp 2" \
        "$TPSHARD" split "$src" --tp 2 --target megatron --ckpt-format torch_dist -o "$out" -q
    [ -d "$out" ] || continue
    have=$(cd "$out/iter_0000001" && ls -A | tr '\n' ' ')
    if [ "$(cat "$out/latest_checkpointed_iteration.txt")" = "1" ] &&
        [ "$have" = ".metadata __0_0.distcp common.pt metadata.json " ] &&
        grep -q '"sharded_backend": "torch_dist"' "$out/iter_0000001/metadata.json"; then
        ok "$model: tracker 1, iter_0000001 holds .metadata, __0_0.distcp, common.pt and metadata.json (torch_dist)"
    else
        notok "$model: the torch_dist layout (have: $have)"
    fi
    if "$TPSHARD" inspect "$out" >"$T/.out" 2>&1 && grep -q "torch_dist, saved at tp 2 x pp 1" "$T/.out"; then
        ok "$model: inspect reads it back as torch_dist for tp 2"
    else
        notok "$model: inspect of the torch_dist checkpoint"
        sed 's/^/#   /' "$T/.out" | head -5
    fi
    "$TPSHARD" split "$src" --tp 2 --target megatron -o "$T/$model-legacy" -q 2>"$T/.err"
    if "$TPSHARD" merge "$out" --target hf -o "$T/$model-back-dist/" -q 2>>"$T/.err" &&
        "$TPSHARD" merge "$T/$model-legacy" --target hf -o "$T/$model-back-legacy/" -q 2>>"$T/.err" &&
        tensors "$T/$model-back-dist" >"$T/$model-dist.t" && tensors "$T/$model-back-legacy" >"$T/$model-legacy.t" &&
        [ -s "$T/$model-dist.t" ] && cmp -s "$T/$model-dist.t" "$T/$model-legacy.t"; then
        ok "$model: merge --target hf of the torch_dist checkpoint gives the legacy one's $(wc -l <"$T/$model-dist.t") tensors (names, dtypes, shapes, CRC-32)"
    else
        notok "$model: merge --target hf of torch_dist vs legacy"
        sed 's/^/#   /' "$T/.err" | head -5
    fi
done

# reshard of a legacy checkpoint (tp 2) to torch_dist for tp 4: the same model merged back.
if [ -d "$T/llama-legacy" ] &&
    "$TPSHARD" reshard "$T/llama-legacy" --tp 4 --ckpt-format torch_dist -o "$T/llama-rd" -q 2>"$T/.err" &&
    "$TPSHARD" inspect "$T/llama-rd" 2>>"$T/.err" | grep -q "torch_dist, saved at tp 4 x pp 1" &&
    "$TPSHARD" merge "$T/llama-rd" --target hf -o "$T/llama-rd-back/" -q 2>>"$T/.err" &&
    tensors "$T/llama-rd-back" >"$T/llama-rd.t" && cmp -s "$T/llama-rd.t" "$T/llama-legacy.t"; then
    ok "reshard of a legacy checkpoint --tp 4 --ckpt-format torch_dist: torch_dist for tp 4, the same model merged back"
else
    notok "reshard of a legacy checkpoint to torch_dist"
    sed 's/^/#   /' "$T/.err" | head -5
fi

nothing() { [ ! -e "$T/$1" ] && ok "$2: nothing written" || notok "$2: $1 was written"; }
expect_exit 3 "MoE experts" "mixtral --ckpt-format torch_dist: refused, exit 3" \
    "$TPSHARD" split "$M/tiny-mixtral" --tp 2 --target megatron --ckpt-format torch_dist -o "$T/moe"
nothing moe "mixtral --ckpt-format torch_dist"
"$TPSHARD" split "$M/tiny-mixtral" --tp 2 --target megatron -o "$T/moe-legacy" -q 2>/dev/null
expect_exit 3 "MoE experts" "reshard of a Mixtral checkpoint --ckpt-format torch_dist: refused, exit 3" \
    "$TPSHARD" reshard "$T/moe-legacy" --tp 2 --ckpt-format torch_dist -o "$T/moe-rd"
nothing moe-rd "reshard of a Mixtral checkpoint --ckpt-format torch_dist"
expect_exit 2 "--ckpt-format expects torch" "--ckpt-format zarr: a usage error" \
    "$TPSHARD" split "$M/tiny-llama" --tp 2 --target megatron --ckpt-format zarr -o "$T/zarr"
nothing zarr "--ckpt-format zarr"
expect_exit 2 "no --pp or --pp-layers" "--ckpt-format torch_dist --pp 2: a usage error" \
    "$TPSHARD" split "$M/tiny-llama" --tp 2 --pp 2 --target megatron --ckpt-format torch_dist -o "$T/pp"
nothing pp "--ckpt-format torch_dist --pp 2"
expect_exit 2 "go with --target megatron" "--ckpt-format without --target megatron: a usage error" \
    "$TPSHARD" split "$M/tiny-llama" --tp 2 --ckpt-format torch_dist -o "$T/plain"
nothing plain "--ckpt-format without --target megatron"

# --dry-run writes nothing; --force replaces an earlier torch_dist output tpshard wrote (its
# .metadata, metadata.json and common.pt beside the listed .distcp), and nothing foreign.
check "--ckpt-format torch_dist --dry-run" \
    "$TPSHARD" split "$M/tiny-llama" --tp 2 --target megatron --ckpt-format torch_dist -o "$T/dry" -n
nothing dry "--ckpt-format torch_dist --dry-run"
if [ -d "$T/llama-dist" ] &&
    "$TPSHARD" split "$M/tiny-llama" --tp 4 --target megatron --ckpt-format torch_dist -o "$T/llama-dist" -f -q \
        2>"$T/.err" && "$TPSHARD" inspect "$T/llama-dist" 2>>"$T/.err" | grep -q "saved at tp 4 x pp 1"; then
    ok "--force replaces an earlier torch_dist checkpoint tpshard wrote"
else
    notok "--force onto an earlier torch_dist checkpoint"
    sed 's/^/#   /' "$T/.err" | head -5
fi
if [ -d "$T/llama-dist" ]; then
    : >"$T/llama-dist/iter_0000001/notes.txt"
    expect_exit 3 "'iter_0000001/notes.txt' is not part of" "--force refuses a torch_dist directory holding a foreign file" \
        "$TPSHARD" split "$M/tiny-llama" --tp 2 --target megatron --ckpt-format torch_dist -o "$T/llama-dist" -f
fi
