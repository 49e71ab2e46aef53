#!/bin/sh
# split --target megatron (and merge --target hf) on the committed tiny models: the Megatron
# directory layout (tracker "1", iter_0000001, mp_rank_XX[_YYY]/model_optim_rng.pt), merge
# back, and the refusals: a family with no Megatron
# mapping, a tp Megatron cannot cut the query groups by, options that do not go with it.
# (transformers and megatron_fixture.py check the files' contents in
# tests/interop/megatron/debian/test_megatron_hf.py.)
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"

for model in llama mixtral; do
    src="$M/tiny-$model"
    for grid in "1 1" "2 1" "4 2" "8 1"; do
        set -- $grid
        out="$T/$model-$1-$2"
        check "$model tp $1 pp $2: split --target megatron" \
            "$TPSHARD" split "$src" --tp "$1" --pp "$2" --target megatron -o "$out" -q
        [ -d "$out" ] || continue
        want=""
        r=0
        while [ "$r" -lt "$1" ]; do
            if [ "$2" -eq 1 ]; then want="$want $(printf 'mp_rank_%02d' "$r")"; else
                p=0
                while [ "$p" -lt "$2" ]; do want="$want $(printf 'mp_rank_%02d_%03d' "$r" "$p")"; p=$((p + 1)); done
            fi
            r=$((r + 1))
        done
        have=$(cd "$out/iter_0000001" && for d in *; do [ -f "$d/model_optim_rng.pt" ] && printf ' %s' "$d"; done)
        if [ "$(cat "$out/latest_checkpointed_iteration.txt")" = "1" ] && [ "$have" = "$want" ]; then
            ok "$model tp $1 pp $2: tracker 1, iter_0000001 holds the rank directories$want"
        else
            notok "$model tp $1 pp $2: tracker and rank directories"
            echo "#   have:$have"
            echo "#   want:$want"
        fi
    done
done

# Merged back (the tensors are compared with the source's in tests/interop/megatron/debian/test_megatron_hf.py).
for model in llama mixtral; do
    out="$T/$model-4-2"
    [ -d "$out" ] || continue
    if "$TPSHARD" merge "$out" -o "$T/$model-back/" --target hf -q >"$T/.out" 2>&1 &&
        [ -f "$T/$model-back/config.json" ]; then
        ok "$model: merge --target hf writes the weights and config.json"
    else
        notok "$model: merge --target hf writes the weights and config.json"
        sed 's/^/#   /' "$T/.out" | head -5
    fi
done

# --target hf writes a model directory whatever -o looks like: a new name without a trailing
# slash is created, not refused as a likely slip.
if [ -d "$T/llama-4-2" ] && "$TPSHARD" merge "$T/llama-4-2" --target hf -o "$T/hfback" -q >"$T/.out" 2>&1 &&
    [ -f "$T/hfback/config.json" ] && cmp -s "$T/hfback/model.safetensors" "$T/llama-back/model.safetensors"; then
    ok "merge --target hf -o NEW (no trailing slash) creates the model directory, the same bytes as NEW/"
else
    notok "merge --target hf -o NEW (no trailing slash) creates the model directory, the same bytes as NEW/"
    sed 's/^/#   /' "$T/.out" | head -5
fi
# inspect of that checkpoint shows it as Megatron's (its tpshard.json names files in the rank
# directories, which the shard-set view refused).
if [ -d "$T/llama-4-2" ] && "$TPSHARD" inspect "$T/llama-4-2" >"$T/.out" 2>&1 &&
    grep -q "Megatron-LM checkpoint (torch format).*tp 4 x pp 2" "$T/.out"; then
    ok "inspect of a Megatron checkpoint tpshard wrote shows its grid"
else
    notok "inspect of a Megatron checkpoint tpshard wrote shows its grid"
    sed 's/^/#   /' "$T/.out" | head -5
fi

# stdout and stderr into one pipe keep the order they were written in (stdout goes a line at a
# time): reshard -v writes each file's line (stdout), the optimizer note (stderr), then the
# summary (stdout).
if [ -d "$T/llama-4-2" ]; then
    "$TPSHARD" reshard "$T/llama-4-2" --tp 2 -v -o "$T/order" 2>&1 | cat >"$T/order.out"
    order=$(sed -n 's/^\(wrote\|reshard: optimizer\|resharded\).*/\1/p' "$T/order.out" | uniq | tr '\n' ' ')
    [ "$order" = "wrote reshard: optimizer resharded " ] && ok "stdout and stderr in one pipe keep their order" ||
        { notok "stdout and stderr in one pipe keep their order (got: $order)"; sed 's/^/#   /' "$T/order.out" | head -8; }
fi

expect_exit 3 "the presets with one: llama, mixtral" "a family without a Megatron mapping: exit 3 naming those with one" \
    "$TPSHARD" split "$M/tiny-gpt2" --tp 1 --target megatron -o "$T/gpt2"
expect_exit 3 "tp values that fit: 1, 2, 4, 8" "tp 3 on 2 query groups: exit 3 naming the tp values that fit" \
    "$TPSHARD" split "$M/tiny-llama" --tp 3 --target megatron -o "$T/llama-3"
if [ -e "$T/llama-3" ] || [ -e "$T/gpt2" ]; then notok "a refused split leaves nothing"; else ok "a refused split leaves nothing"; fi
expect_exit 2 "a pipeline of 1 to 2 stages" "--pp 3 on 2 layers: exit 2" \
    "$TPSHARD" split "$M/tiny-llama" --tp 1 --pp 3 --target megatron -o "$T/pp3"
expect_exit 2 "--target megatron" "--pp without --target megatron: exit 2" \
    "$TPSHARD" split "$M/tiny-llama" --tp 1 --pp 2 -o "$T/pp2"
expect_exit 2 "--dtype" "--dtype with --target megatron: exit 2" \
    "$TPSHARD" split "$M/tiny-llama" --tp 1 --dtype f32 --target megatron -o "$T/f32"
check "--dry-run with --target megatron: plans, writes nothing" \
    "$TPSHARD" split "$M/tiny-llama" --tp 2 --pp 2 --target megatron -o "$T/dry" --dry-run -q
if [ -e "$T/dry" ]; then notok "--dry-run wrote $T/dry"; else ok "--dry-run wrote nothing"; fi

# RoPE scaling: Llama-3.1's (factor with Megatron's fixed 1, 4, 8192) goes into args; one
# Megatron does not compute is refused naming it.
for kind in llama3 yarn; do
    mkdir -p "$T/rope-$kind"
    cp "$M/tiny-llama/model.safetensors" "$T/rope-$kind/"
    if [ "$kind" = llama3 ]; then
        rs='"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},'
    else
        rs='"rope_scaling": {"rope_type": "yarn", "factor": 4.0},'
    fi
    sed "s/\"rope_theta\"/$rs \"rope_theta\"/" "$M/tiny-llama/config.json" >"$T/rope-$kind/config.json"
done
check "Llama-3.1 rope_scaling: split --target megatron" \
    "$TPSHARD" split "$T/rope-llama3" --tp 2 --target megatron -o "$T/rope-llama3-mg" -q
if grep -q "rope_scaling_factor" "$T"/rope-llama3-mg/iter_0000001/mp_rank_00/model_optim_rng.pt 2>/dev/null; then
    ok "Llama-3.1 rope_scaling: args carry rope_scaling_factor"
else
    notok "Llama-3.1 rope_scaling: args carry rope_scaling_factor"
fi
expect_exit 3 "rope_scaling of type 'yarn'" "yarn rope_scaling: exit 3 naming it" \
    "$TPSHARD" split "$T/rope-yarn" --tp 2 --target megatron -o "$T/rope-yarn-mg"
