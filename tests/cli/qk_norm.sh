#!/bin/sh
# Families with q/k norms on their tiny fixtures (testdata/gen_qk_fixtures.py): tiny-qwen3
# (per head) and tiny-olmo2 (over the whole projection, with post-block norms).  Each is
# auto-detected from config.json, splits at tp 1, 2, 4 and 8 (K/V heads replicated at 4 and
# 8), passes check, verify --layer all against the source and --whole-model; a q/k norm
# weight cut instead of replicated passes check and fails verify with exit 1.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"

# same_sets A B: every file of A is in B byte for byte, and B has no other file.
same_sets() {
    [ "$(ls "$1")" = "$(ls "$2")" ] || return 1
    for same_f in "$1"/*; do cmp -s "$same_f" "$2/$(basename "$same_f")" || return 1; done
}

for spec in qwen3:Qwen3ForCausalLM olmo2:Olmo2ForCausalLM; do
    p=${spec%%:*} arch=${spec#*:}
    src="$M/tiny-$p"
    "$TPSHARD" split "$src/model.safetensors" --tp 2 -o "auto-$p" >/dev/null 2>"auto-$p.err"
    "$TPSHARD" split "$src/model.safetensors" --tp 2 --preset "$(echo "$p" | tr a-z A-Z)" -o "named-$p" -q >/dev/null 2>&1
    if grep -qF "layout: preset $p, from $src/config.json architectures $arch" "auto-$p.err" &&
        same_sets "auto-$p" "named-$p"; then
        ok "tiny-$p: split chooses preset $p from config.json and cuts as --preset $p"
    else
        notok "tiny-$p: split chooses preset $p from config.json and cuts as --preset $p"
        sed 's/^/#   /' "auto-$p.err" | head -5
    fi
    for tp in 1 2 4 8; do
        out="$p-$tp"
        if ! "$TPSHARD" split "$src" --tp "$tp" -o "$out" -q >"$T/.out" 2>&1; then
            notok "tiny-$p tp $tp: split failed"
            sed 's/^/#   /' "$T/.out" | head -5
            continue
        fi
        check "tiny-$p tp $tp: check passes" "$TPSHARD" check "$out"
        check "tiny-$p tp $tp: verify --source --layer all passes" "$TPSHARD" verify "$out" --source "$src" --layer all
        check "tiny-$p tp $tp: verify --source --whole-model passes" "$TPSHARD" verify "$out" --source "$src" --whole-model
    done
done

# wrong NAME PRESET TP FRAGMENT RULE: tiny-PRESET split with RULE first; check passes, verify
# --source --layer all and --whole-model exit 1 saying FRAGMENT.
wrong() {
    w=$1 p=$2 tp=$3 frag=$4 rule=$5
    split_wrong "$w" "$p" "$M/tiny-$p" "$tp" "$rule" "$T/wrong-$w" || return
    check "$w: check passes (the shards hold what the manifest says)" "$TPSHARD" check "$T/wrong-$w"
    expect_wrong_cut "$frag" "$w: verify --source --layer all exits 1 naming the rank" \
        "$T/wrong-$w" --source "$M/tiny-$p" --layer all
    expect_wrong_cut "" "$w: verify --source --whole-model exits 1" \
        "$T/wrong-$w" --source "$M/tiny-$p" --whole-model
}

wrong qwen3-q-norm-cut qwen3 2 "rank 0 holds model.layers.0.self_attn.q_norm.weight (q_norm) with shape [8] where the TP convention needs [16]" \
    '  - match: model.layers.*.self_attn.q_norm.weight
    split: column'
wrong qwen3-kv-unreplicated qwen3 4 "rank 0 holds model.layers.0.self_attn.k_proj.weight (k_proj) with shape [8, 64]" \
    '  - match: "model.layers.*.self_attn.{k_proj,v_proj}.weight"
    split: column'
wrong olmo2-qk-norm-by-heads olmo2 2 "rank 0 holds model.layers.0.self_attn.q_norm.weight (q_norm) with shape [32] where the TP convention needs [64]" \
    '  - match: "model.layers.*.self_attn.{q_norm,k_norm}.weight"
    split: column
    unit: head_dim'
wrong olmo2-kv-unreplicated olmo2 8 "rank 0 holds model.layers.0.self_attn.k_proj.weight (k_proj) with shape [2, 64]" \
    '  - match: "model.layers.*.self_attn.{k_proj,v_proj}.weight"
    split: column'

# The cuda backend does not compute q/k norms yet: it refuses (exit 5) rather than compute
# a layer without them; without a GPU it exits 5 before it gets there.
expect_exit 5 "cuda backend" "tiny-qwen3: verify --backend cuda exits 5" "$TPSHARD" verify qwen3-2 --backend cuda
