#!/bin/sh
# tpshard verify on --target vllm sets: the layer pass and --whole-model run on the bytes the
# engine loads (each rank's q/k/v, gate/up and expert tensors read back as byte ranges of its
# fused qkv_proj, gate_up_proj, w13_weight and w2_weight; the vocabulary padded as vLLM pads
# it, a multiple of 64 cut in tp blocks).  tiny-llama (vocabulary 1003: padded to 1024) and
# tiny-mixtral at every tp the heads allow, with the reference reassembled from the shards
# and from the source.  A --target vllm set whose bytes are intact (check passes) but whose
# cut is wrong (q heads in two halves dealt round-robin; the experts' gate rows likewise)
# fails verify with exit 1.  (vLLM's loader and transformers' logits are compared in
# tests/interop/vllm/debian/test_vllm_sharded_state.py.)
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"

for model in llama mixtral; do
    src="$M/tiny-$model"
    for tp in 1 2 4 8; do
        out="$T/$model-$tp"
        if ! "$TPSHARD" split "$src" --tp "$tp" --target vllm -o "$out" -q >"$T/.out" 2>&1; then
            notok "$model tp $tp: split --target vllm"
            sed 's/^/#   /' "$T/.out" | head -5
            continue
        fi
        check "$model tp $tp: verify --layer all on the vllm set" "$TPSHARD" verify "$out" --layer all -q
        check "$model tp $tp: verify --layer all --source on the vllm set" \
            "$TPSHARD" verify "$out" --source "$src" --layer all -q
        check "$model tp $tp: verify --whole-model on the vllm set" "$TPSHARD" verify "$out" --whole-model -q
        check "$model tp $tp: verify --whole-model --source on the vllm set" \
            "$TPSHARD" verify "$out" --source "$src" --whole-model -q
    done
done

# The report counts the engine's padded vocabulary (1003 to 1024), not a multiple of the tp.
"$TPSHARD" verify "$T/llama-4" --whole-model >"$T/.out" 2>&1
if [ $? -eq 0 ] && grep -q "(vocabulary 1003, padded to 1024)" "$T/.out"; then
    ok "verify --whole-model on a vllm set: the vocabulary padded to 1024 as vLLM pads it"
else
    notok "verify --whole-model on a vllm set: the vocabulary padded to 1024 as vLLM pads it"
    sed 's/^/#   /' "$T/.out" | head -5
fi

# wrong_target NAME PRESET MODEL TP RULE FRAGMENT: the preset's layout with RULE first (it wins
# over the preset's own), split --target vllm: check passes, verify --layer all and
# --whole-model (with --source) exit 1, the layer pass's message holding FRAGMENT.
wrong_target() {
    wt=$1 preset=$2 model=$3 tp=$4 rule=$5 frag=$6
    "$TPSHARD" layout --preset "$preset" >"$T/$wt.base.yaml"
    awk -v rule="$rule" '{ print } /^rules:/ { print rule }' "$T/$wt.base.yaml" >"$T/$wt.yaml"
    out="$T/wrong-$wt"
    if ! "$TPSHARD" split "$M/tiny-$model" --tp "$tp" --layout "$T/$wt.yaml" --target vllm -o "$out" -q \
        >"$T/.out" 2>&1; then
        notok "$wt: split --target vllm with the wrong layout"
        sed 's/^/#   /' "$T/.out" | head -5
        return
    fi
    check "$wt: check passes on the wrong vllm set (its bytes are what its manifest says)" "$TPSHARD" check "$out"
    expect_exit 1 "$frag" "$wt: verify --layer all exits 1 on the wrong vllm set" \
        "$TPSHARD" verify "$out" --layer all
    expect_exit 1 "" "$wt: verify --whole-model --source exits 1 on the wrong vllm set" \
        "$TPSHARD" verify "$out" --source "$M/tiny-$model" --whole-model
}
wrong_target q-halves llama llama 2 '  - match: model.layers.*.self_attn.q_proj.weight
    split: column
    unit: head_dim
    segments: {qa: heads*head_dim/2, qb: heads*head_dim/2}' "rank 0's partial sum differs from the reference"
wrong_target expert-gate-halves mixtral mixtral 2 '  - match: model.layers.*.block_sparse_moe.experts.*.w1.weight
    split: column
    segments: {ga: intermediate/2, gb: intermediate/2}' "differs from the reference"

# Families whose engine layout is no run of byte ranges of the source: GPT-2 (the engine
# transposes the Conv1D weights) and GPT-NeoX (it reorders each rank's query_key_value rows).
for target in vllm sglang; do
    check "gpt2 --target $target: split (Conv1D weights transposed per rank)" \
        "$TPSHARD" split "$M/tiny-gpt2" --tp 2 --target "$target" -o "$T/gpt2-$target" -q
    check "neox --target $target: split (query_key_value rows blocked per rank)" \
        "$TPSHARD" split "$M/tiny-neox" --tp 2 --target "$target" -o "$T/neox-$target" -q
done
# The families with a mapping, named when one has none, leave out those refused.
expect_exit 3 "preset:olmo2 has no mapping for --target vllm" "olmo2 (no targets: section): exit 3 naming the presets with one" \
    "$TPSHARD" split "$M/tiny-olmo2" --tp 2 --target vllm -o "$T/olmo2-vllm"
if grep -q "the presets with one: .*llama" "$T/.err" && grep -q "the presets with one: .*neox" "$T/.err" &&
    grep -q "the presets with one: .*gpt2" "$T/.err"; then
    ok "the refusal lists the presets with a mapping (gpt2 and neox among them)"
else
    notok "the refusal lists the presets with a mapping (gpt2 and neox among them)"
    sed 's/^/#   /' "$T/.err" | head -3
fi
check "gpt2: split (tpshard's own target) still works" "$TPSHARD" split "$M/tiny-gpt2" --tp 2 -o "$T/gpt2-own" -q
check "gpt2: reshard --target vllm of a tpshard set" "$TPSHARD" reshard "$T/gpt2-own" --tp 2 --target vllm -o "$T/gpt2-re" -q
if cmp -s "$T/gpt2-re/model-rank-1-part-0.safetensors" "$T/gpt2-vllm/model-rank-1-part-0.safetensors"; then
    ok "gpt2: reshard --target vllm of a tpshard set equals split --target vllm"
else
    notok "gpt2: reshard --target vllm of a tpshard set equals split --target vllm"
fi

# --target-version: the engine release.  The default (current) writes vLLM's attention scale
# buffers (0-d F32 1.0, four a layer, closing each rank's last part) and records them; 0.13 none.
"$TPSHARD" split "$M/tiny-llama" --tp 2 --target vllm --max-shard-size 100KB -o "$T/ver-cur" -q
"$TPSHARD" split "$M/tiny-llama" --tp 2 --target vllm --target-version 0.13 -o "$T/ver-013" -q
if grep -q '"target_extras"' "$T/ver-cur/tpshard.json" && ! grep -q '"target_extras"' "$T/ver-013/tpshard.json" &&
    grep -q '"target_version": "0.13"' "$T/ver-013/tpshard.json"; then
    ok "--target-version: the current release's set lists its scale buffers, 0.13's has none and says 0.13"
else
    notok "--target-version: the current release's set lists its scale buffers, 0.13's has none and says 0.13"
fi
check "--target-version current: check passes (the constants' bytes in the files' CRCs)" "$TPSHARD" check "$T/ver-cur"
check "--target-version 0.13: check passes" "$TPSHARD" check "$T/ver-013"
check "verify --layer all on a set with scale buffers" "$TPSHARD" verify "$T/ver-cur" --layer all -q
expect_exit 2 "--target-version 'latest': expected a release number" "--target-version latest: exit 2" \
    "$TPSHARD" split "$M/tiny-llama" --tp 2 --target vllm --target-version latest -o "$T/ver-bad"
expect_exit 2 "--target-version needs --target vllm or sglang" "--target-version without --target: exit 2" \
    "$TPSHARD" split "$M/tiny-llama" --tp 2 --target-version 0.13 -o "$T/ver-bad"
"$TPSHARD" merge "$T/ver-cur" -o "$T/ver-cur.safetensors" -q && "$TPSHARD" merge "$T/ver-013" -o "$T/ver-013.safetensors" -q
if cmp -s "$T/ver-cur.safetensors" "$T/ver-013.safetensors"; then
    ok "merge drops the scale buffers: both classes merge to the same file"
else
    notok "merge drops the scale buffers: both classes merge to the same file"
fi
# A rank file without its constants is caught by check (the file's CRC and the manifest).
cp -r "$T/ver-013" "$T/ver-swap"
cp "$T/ver-013/tpshard.json" "$T/ver-swap/tpshard.json"
python3 - "$T/ver-cur/tpshard.json" "$T/ver-swap/tpshard.json" <<'PY'
import json, sys
cur, swap = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
swap["target_extras"] = cur["target_extras"]
del swap["target_version"]
json.dump(swap, open(sys.argv[2], "w"))
PY
expect_exit 1 "lacks 'model.layers.0.self_attn.attn._k_scale'" "a set whose manifest lists scale buffers its files lack: check names them" \
    "$TPSHARD" check "$T/ver-swap"
# target_extras are read strictly: a list of {name, value}, and only beside a target.
cp -r "$T/ver-cur" "$T/ver-notarget"
python3 - "$T/ver-notarget/tpshard.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
del d["target"]
json.dump(d, open(sys.argv[1], "w"))
PY
expect_exit 3 "target_extras: extras without a target" "a manifest with target_extras and no target: exit 3" \
    "$TPSHARD" reshard "$T/ver-notarget" --tp 1 -o "$T/ver-notarget-out"
cp -r "$T/ver-cur" "$T/ver-badextra"
python3 - "$T/ver-badextra/tpshard.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["target_extras"][0] = {"name": d["target_extras"][0]["name"]}
json.dump(d, open(sys.argv[1], "w"))
PY
expect_exit 3 "missing field 'value'" "a target_extras entry without its value: exit 3" \
    "$TPSHARD" reshard "$T/ver-badextra" --tp 1 -o "$T/ver-badextra-out"
