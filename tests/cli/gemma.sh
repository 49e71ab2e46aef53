#!/bin/sh
# Gemma, Gemma 2 and Gemma 3 (presets gemma, gemma2, gemma3_text, gemma3) on the tiny fixtures of testdata/gen_gemma_fixtures.py:
# auto-detection, verify --layer all and --whole-model at every tp split accepts, wrong cuts
# caught, the block keys' errors, and a stage normalized only after its block (OLMo 2's
# form: no pre-norm role).  transformers' own logits are compared in
# tests/interop/transformers/debian/test_hf_gemma_family.py and tests/interop/transformers/torch2/torch2_gemma3.py.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"

for spec in gemma:GemmaForCausalLM gemma2:Gemma2ForCausalLM gemma3_text:Gemma3ForCausalLM gemma3:Gemma3ForConditionalGeneration; do
    p=${spec%%:*} arch=${spec#*:}
    src="$M/tiny-$p"
    for tp in 1 2 4 8; do
        out="$T/$p-$tp"
        "$TPSHARD" split "$src/model.safetensors" --tp "$tp" -o "$out" >/dev/null 2>"$T/$p.err"
        rc=$?
        if [ $rc -ne 0 ] || ! grep -qx "tpshard split: layout: preset $p, from $src/config.json architectures $arch" "$T/$p.err"; then
            notok "$p tp $tp: split without --preset picks preset $p from config.json"
            sed 's/^/#   /' "$T/$p.err" | head -5
            continue
        fi
        check "$p tp $tp: verify --layer all --source passes" "$TPSHARD" verify "$out" --source "$src" --layer all -q
        check "$p tp $tp: verify --whole-model passes (reference from the shards)" "$TPSHARD" verify "$out" --whole-model -q
        check "$p tp $tp: verify --whole-model --source passes" \
            "$TPSHARD" verify "$out" --whole-model --source "$src" -q
    done
done

# The multimodal preset on the text checkpoint: config.json names gemma3_text, and one line
# says so (not a warning per rule of the wrong preset, then a generic refusal); nothing written.
expect_exit 3 "$M/tiny-gemma3_text/config.json says gemma3_text (architectures Gemma3ForCausalLM); --preset gemma3 is for Gemma3ForConditionalGeneration" \
    "--preset gemma3 on a gemma3_text checkpoint: one line naming the preset config.json says" \
    "$TPSHARD" split "$M/tiny-gemma3_text" --tp 2 --preset gemma3 -o "$T/wrong-preset"
if grep -q "matched no tensor" "$T/.err" || [ "$(wc -l <"$T/.err")" -ne 1 ] || [ -e "$T/wrong-preset" ]; then
    notok "--preset gemma3 on gemma3_text: that line alone, nothing written"
    sed 's/^/#   /' "$T/.err" | head -5
else
    ok "--preset gemma3 on gemma3_text: that line alone, nothing written"
fi
# A trailing slash on the checkpoint directory names the same config.json (no "dir//").
"$TPSHARD" plan "$M/tiny-gemma3_text/" --tp 2 >/dev/null 2>"$T/.err"
grep -qx "tpshard plan: layout: preset gemma3_text, from $M/tiny-gemma3_text/config.json architectures Gemma3ForCausalLM" "$T/.err" &&
    ok "plan DIR/: the config.json path has no double slash" ||
    { notok "plan DIR/: the config.json path has no double slash"; sed 's/^/#   /' "$T/.err" | head -3; }

# Config numbers reach verify through the manifest's recorded keys.
if grep -q '"attn_logit_softcapping": 2' "$T/gemma2-2/tpshard.json" && grep -q '"sliding_window": 4' "$T/gemma2-2/tpshard.json" &&
    grep -q '"query_pre_attn_scalar": 24' "$T/gemma2-2/tpshard.json" && grep -q '"final_logit_softcapping": 3' "$T/gemma2-2/tpshard.json"; then
    ok "gemma2: the manifest records the soft-caps, query_pre_attn_scalar and sliding_window"
else
    notok "gemma2: the manifest records the soft-caps, query_pre_attn_scalar and sliding_window"
fi

# Gemma 3: the local layers and their RoPE base reach verify through the manifest too (from
# text_config for the multimodal checkpoint); the vision tower and projector are whole on
# every rank.
if grep -q '"rope_local_base_freq": 10000' "$T/gemma3_text-2/tpshard.json" &&
    grep -A3 '"layer_types": \[' "$T/gemma3_text-2/tpshard.json" | grep -q '"full_attention"' &&
    grep -q '"rope_local_base_freq": 10000' "$T/gemma3-2/tpshard.json" && grep -q '"sliding_window": 4' "$T/gemma3-2/tpshard.json"; then
    ok "gemma3_text, gemma3: the manifest records rope_local_base_freq, layer_types and sliding_window"
else
    notok "gemma3_text, gemma3: the manifest records rope_local_base_freq, layer_types and sliding_window"
fi
"$TPSHARD" plan "$M/tiny-gemma3/model.safetensors" --tp 8 --json -q >mm-plan.json
vis=$(grep -cE '"name": "(vision_tower|multi_modal_projector)\.' mm-plan.json)
rep=$(grep -A2 -E '"name": "(vision_tower|multi_modal_projector)\.' mm-plan.json | grep -c '"partition": "replicated"')
if [ "$vis" -eq 23 ] && [ "$rep" -eq 23 ]; then
    ok "gemma3 tp 8: the 23 vision tower and projector tensors are replicated"
else
    notok "gemma3 tp 8: the 23 vision tower and projector tensors are replicated"
    echo "#   $vis tensors, $rep replicated"
fi
mkdir -p bad-types && cp "$M/tiny-gemma3_text/model.safetensors" bad-types/ &&
    sed 's/"full_attention"/"chunked_attention"/' "$M/tiny-gemma3_text/config.json" >bad-types/config.json
expect_exit 3 '"layer_types" entry 2 is not "sliding_attention" or "full_attention"' \
    "gemma3_text: a layer type verify does not model is refused, by entry" \
    "$TPSHARD" plan bad-types/model.safetensors --tp 2
# The cuda backend refuses Gemma 3's features by name (q/k norms first); without a GPU it exits
# 5 before it gets there.
expect_exit 5 "cuda backend" "gemma3_text: verify --backend cuda exits 5" \
    "$TPSHARD" verify "$T/gemma3_text-2" --backend cuda

# Wrong cuts with intact bytes: K/V heads round-robin, gate_proj's columns unpaired with up_proj's.
kv_rr='  - match: "model.layers.*.self_attn.{k_proj,v_proj}.weight"
    split: column
    segments:
      - {name: a, size: kv_heads/2*head_dim, unit: head_dim}
      - {name: b, size: kv_heads/2*head_dim, unit: head_dim}'
gate_halves='  - match: "model.layers.*.mlp.gate_proj.weight"
    split: column
    segments:
      - {name: a, size: intermediate/2}
      - {name: b, size: intermediate/2}'
for w in kv_rr gate_halves; do
    eval "rule=\$$w"
    split_wrong "gemma2-$w" gemma2 "$M/tiny-gemma2" 2 "$rule" "$T/wrong-$w" || continue
    check "gemma2 $w: check passes (the bytes are what the manifest says)" "$TPSHARD" check "$T/wrong-$w" -q
    expect_wrong_cut "" "gemma2 $w: verify --layer all --source exits 1" \
        "$T/wrong-$w" --source "$M/tiny-gemma2" --layer all
    expect_wrong_cut "" "gemma2 $w: verify --whole-model --source exits 1" \
        "$T/wrong-$w" --source "$M/tiny-gemma2" --whole-model
done

# The block keys are checked like the others.
"$TPSHARD" layout --preset gemma2 >g2.yaml
sed 's/^  embed_scale: true/  embed_scale: 2/' g2.yaml >bad-scale.yaml
expect_exit 3 "embed_scale must be true or false" "layout --check: embed_scale must be a boolean" \
    "$TPSHARD" layout --check bad-scale.yaml
sed 's/^  sliding_window_pattern: 2/  sliding_window_pattern: 0/' g2.yaml >bad-swp.yaml
expect_exit 3 "sliding_window_pattern must be a positive integer" "layout --check: sliding_window_pattern 0 is refused" \
    "$TPSHARD" layout --check bad-swp.yaml
sed 's/^  norm: rms_offset/  norm: rms_plus/' g2.yaml >bad-norm.yaml
expect_exit 3 "rms, layer, rms_offset" "layout --check: an unknown norm lists rms_offset" \
    "$TPSHARD" layout --check bad-norm.yaml
grep -v '^    \(attn_norm\|post_attn_norm\):' g2.yaml >no-attn-norm.yaml
expect_exit 3 "block of kind llama needs role attn_norm" "layout --check: a stage with neither pre- nor post-norm is refused" \
    "$TPSHARD" layout --check no-attn-norm.yaml

# OLMo 2's form: norms only after the blocks.  Without the pre-norm roles a stage reads its
# input as it is; the sandwich norms' post-norms remain, and verify still tells a right cut
# from a wrong one.
grep -v '^    \(attn_norm\|mlp_norm\):' g2.yaml >post-only.yaml
check "layout --check accepts a block with post-norms and no pre-norms" "$TPSHARD" layout --check post-only.yaml
if "$TPSHARD" split "$M/tiny-gemma2/model.safetensors" --tp 4 --layout post-only.yaml -o post-only -q >/dev/null 2>&1; then
    check "post-norms only, tp 4: verify --layer all passes" "$TPSHARD" verify post-only --layer all -q
    check "post-norms only, tp 4: verify --whole-model passes" "$TPSHARD" verify post-only --whole-model -q
else
    notok "post-norms only: split at tp 4"
fi
awk -v rule="$kv_rr" '{ print } /^rules:/ { print rule }' post-only.yaml >post-only-wrong.yaml
if "$TPSHARD" split "$M/tiny-gemma2/model.safetensors" --tp 2 --layout post-only-wrong.yaml -o post-only-wrong -q \
    >/dev/null 2>&1; then
    expect_wrong_cut "attention stage" "post-norms only, K/V round-robin: verify exits 1 naming the attention stage" \
        post-only-wrong --layer all
else
    notok "post-norms only: split the wrong cut at tp 2"
fi
