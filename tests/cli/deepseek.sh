#!/bin/sh
# DeepSeek-V2/V3 (multi-head latent attention) on the tiny generated fixtures
# (testdata/gen_deepseek.py), where the transformers comparison
# (tests/interop/transformers/torch2/torch2_deepseek.py) cannot run: auto-detection, split at every legal tp,
# check, verify of every layer and of the whole model, the refusal of a tp the heads do not allow, and wrong cuts
# of kv_b_proj and q_b_proj that only verify sees.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"
M="$FIX/models"

for case in tiny-deepseek-v3:deepseek_v3:DeepseekV3ForCausalLM tiny-deepseek-v2-lite:deepseek_v2:DeepseekV2ForCausalLM; do
    f=${case%%:*} rest=${case#*:}
    p=${rest%%:*} arch=${rest#*:}
    for t in 1 2 4 8; do
        "$TPSHARD" split "$M/$f/model.safetensors" --tp $t -o "$f-$t" >/dev/null 2>"$f-$t.err"
        if [ $? -eq 0 ] && grep -qx "tpshard split: layout: preset $p, from $M/$f/config.json architectures $arch" "$f-$t.err"; then
            ok "$f: split --tp $t chooses preset $p from config.json"
        else
            notok "$f: split --tp $t chooses preset $p from config.json"
            sed 's/^/#   /' "$f-$t.err" | head -5
            continue
        fi
        check "$f: check at tp $t" "$TPSHARD" check "$f-$t" -q
        check "$f: verify --source --layer all (MLA attention; dense, routed and shared MLPs) at tp $t" \
            "$TPSHARD" verify "$f-$t" --source "$M/$f/model.safetensors" --layer all -q
        check "$f: verify --whole-model at tp $t" "$TPSHARD" verify "$f-$t" --whole-model -q
    done
done

# Each rank holds its heads: q_b_proj 12 rows a head, kv_b_proj 16 ([k_nope_h; v_h]), o_proj
# 8 columns; the a-projections whole.
"$TPSHARD" inspect tiny-deepseek-v3-4 >inspect.out 2>&1
check "tp 4: q_b_proj [24, 32], kv_b_proj [32, 16], o_proj [64, 16], kv_a_proj_with_mqa [20, 64] on each rank" \
    sh -c 'grep -q "model.layers.0.self_attn.q_b_proj.weight.*24, 32" inspect.out &&
           grep -q "model.layers.0.self_attn.kv_b_proj.weight.*32, 16" inspect.out &&
           grep -q "model.layers.0.self_attn.o_proj.weight.*64, 16" inspect.out &&
           grep -q "model.layers.0.self_attn.kv_a_proj_with_mqa.weight.*20, 64" inspect.out'

expect_exit 3 "8 attention heads (rows each 12)" "tp 3 is refused in the model's words (8 attention heads)" \
    "$TPSHARD" split "$M/tiny-deepseek-v3/model.safetensors" --tp 3 -o tp3
expect_exit 3 "tp values that fit: 1, 2, 4, 8" "tp 16 is refused with the tp values that fit" \
    "$TPSHARD" split "$M/tiny-deepseek-v3/model.safetensors" --tp 16 -o tp16
check "--preset accepts deepseek-v3 and DeepSeek_V2" sh -c \
    '"$0" layout --preset deepseek-v3 >/dev/null && "$0" layout --preset DeepSeek_V2 >/dev/null' "$TPSHARD"

# Wrong cuts whose bytes are intact: kv_b_proj as if it were [K_nope_all; V_all] (two plain
# segments), and q_b_proj's heads dealt round-robin.
V3="$M/tiny-deepseek-v3"
kvb='  - match: model.layers.*.self_attn.kv_b_proj.weight
    split: column
    segments: {k: heads*qk_nope_head_dim, v: heads*v_head_dim}'
qb='  - match: model.layers.*.self_attn.q_b_proj.weight
    split: column
    segments:
      - {name: a, size: heads/2*(qk_nope_head_dim+qk_rope_head_dim), unit: qk_nope_head_dim+qk_rope_head_dim}
      - {name: b, size: heads/2*(qk_nope_head_dim+qk_rope_head_dim), unit: qk_nope_head_dim+qk_rope_head_dim}'
for w in kvb qb; do
    eval "rule=\$$w"
    split_wrong "wrong-$w" deepseek_v3 "$V3" 2 "$rule" "wrong-$w" || continue
    check "wrong $w cut: check passes (the bytes are intact)" "$TPSHARD" check "wrong-$w" -q
    expect_wrong_cut "" "wrong $w cut: verify --source --layer all exits 1" \
        "wrong-$w" --source "$V3/model.safetensors" --layer all -q
    expect_wrong_cut "" "wrong $w cut: verify --source --whole-model exits 1" \
        "wrong-$w" --source "$V3/model.safetensors" --whole-model -q
done

# The multi-token-prediction layer released V3/R1 checkpoints carry (model.layers.N, N =
# num_hidden_layers): vLLM's main model holds none, and its sharded_state loader raises
# KeyError on a tensor it does not hold, so --target vllm leaves it out (the preset's
# targets.vllm.skip) and says so; the default target keeps it.  The set must hold exactly the
# names of the same model without the layer (tiny-deepseek-v3, whose vLLM names
# vllm_real_mla.py checks against the engine).
MTP="$M/tiny-deepseek-v3-mtp"
names() { sed -n 's/^ *"name": "\([^"]*\)".*/\1/p; s/.*"target_name": "\([^"]*\)".*/\1/p' "$1/tpshard.json" | sort; }
if "$TPSHARD" split "$MTP/model.safetensors" --tp 2 --target vllm -o mtp-vllm-2 >/dev/null 2>mtp.err; then
    check "mtp: split --target vllm says it skipped the 32 tensors of model.layers.2 and why" \
        grep -q "skipped 32 tensors: model\.layers\.2\..*(multi-token-prediction layer" mtp.err
    check "mtp: the vLLM set holds no model.layers.2 tensor" sh -c '! grep -q "model\.layers\.2\." mtp-vllm-2/*.safetensors'
    "$TPSHARD" split "$V3/model.safetensors" --tp 2 --target vllm -o plain-vllm-2 -q
    names mtp-vllm-2 >mtp.names; names plain-vllm-2 >plain.names
    check "mtp: the vLLM set holds exactly the names of the model without the layer" \
        sh -c '[ "$(wc -l <mtp.names)" -gt 100 ] && cmp -s mtp.names plain.names'
    check "mtp: the manifest lists the layer as skipped with its reason" \
        grep -q '"reason": "multi-token-prediction layer' mtp-vllm-2/tpshard.json
    check "mtp: inspect shows the skipped layer" sh -c '"$0" inspect mtp-vllm-2 | grep -q "skipped: 32 tensors model\.layers\.2\."' "$TPSHARD"
    check "mtp: check --source passes (the skipped layer is not missing)" \
        "$TPSHARD" check mtp-vllm-2 --source "$MTP/model.safetensors" -q
    "$TPSHARD" merge mtp-vllm-2 -o mtp-merged.safetensors >/dev/null 2>merge.err
    check "mtp: merge says on stderr that the layer is not restored" \
        grep -q "not restored: 32 tensors model\.layers\.2\..*which the split skipped" merge.err
    check "mtp: reshard 2 -> 1 of the vLLM set, and check passes" sh -c \
        '"$0" reshard mtp-vllm-2 --tp 1 -o mtp-vllm-1 -q && "$0" check mtp-vllm-1 --source "$1" -q &&
         grep -q "multi-token-prediction layer" mtp-vllm-1/tpshard.json && ! grep -q "model\.layers\.2\." mtp-vllm-1/*.safetensors' \
        "$TPSHARD" "$MTP/model.safetensors"
else
    notok "mtp: split --target vllm at tp 2"
    sed 's/^/#   /' mtp.err | head -5
fi
check "mtp: the default target keeps the layer" sh -c \
    '"$0" split "$1" --tp 2 -o mtp-tps-2 -q && grep -q "model\.layers\.2\.eh_proj" mtp-tps-2/tpshard.json &&
     ! grep -q skipped mtp-tps-2/tpshard.json' "$TPSHARD" "$MTP/model.safetensors"
mkdir -p mtp-nocfg && cp "$MTP/model.safetensors" mtp-nocfg/ &&
    sed 's/"num_hidden_layers": *[0-9]*, *//' "$MTP/config.json" >mtp-nocfg/config.json
expect_exit 3 "the config has no whole number num_hidden_layers" \
    "mtp: --target vllm without config.json's num_hidden_layers is refused, naming the key" \
    "$TPSHARD" split mtp-nocfg/model.safetensors --tp 2 --target vllm -o mtp-nocfg-2
# A set vLLM saved itself (no tpshard.json, config.json beside it) is read with the target's
# skip: entries too: adoption records config.json's keys before it lays the target out.
if [ -d plain-vllm-2 ]; then
    mkdir -p engine-saved && cp plain-vllm-2/*.safetensors engine-saved/ && cp "$V3/config.json" engine-saved/
    check "mtp: a vLLM-saved DeepSeek-V3 set without tpshard.json is adopted and checks" "$TPSHARD" check engine-saved -q
fi
