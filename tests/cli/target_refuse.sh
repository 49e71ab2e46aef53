#!/bin/sh
# Targets a family's mapping refuses by name (`refuse: "why"` in the layout's targets:
# section): exit 3, the reason in the engine's terms, nothing written, on split and on reshard.
# SGLang's Gemma 2 (a persistent model.normalizer buffer no checkpoint holds) and Gemma 3 text
# (its embedding a plain nn.Embedding, whole and unpadded on every rank); Gemma 3 multimodal
# for both engines (vLLM cuts the SigLIP tower the preset keeps whole).  --target vllm on the
# same Gemma 2 and Gemma 3 text still writes, and a refused mapping is not listed among the
# presets that have one.  (vLLM's loader on these families: tests/interop/vllm/torch2/torch2_vllm_targets.py.)
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"

refused() { # NAME TARGET MODEL FRAGMENT
    "$TPSHARD" split "$M/$3" --tp 2 --target "$2" -o "$T/$1-$2" >/dev/null 2>"$T/.err"
    rc=$?
    if [ "$rc" -eq 3 ] && grep -q -- "--target $2 is refused: .*$4" "$T/.err"; then
        ok "$1: split --target $2 refused (exit 3) naming $4"
    else
        notok "$1: split --target $2 refused (exit 3) naming $4"
        echo "#   exit $rc"
        sed 's/^/#   /' "$T/.err" | head -5
    fi
    if [ -e "$T/$1-$2" ]; then notok "$1: nothing written for the refused --target $2"; else
        ok "$1: nothing written for the refused --target $2"
    fi
}
refused gemma2 sglang tiny-gemma2 "model.normalizer"
refused gemma3_text sglang tiny-gemma3_text "whole and unpadded"
refused gemma3 vllm tiny-gemma3 "SigLIP"
refused gemma3 sglang tiny-gemma3 "whole and unpadded"

for model in gemma2 gemma3_text; do
    check "$model: split --target vllm writes" "$TPSHARD" split "$M/tiny-$model" --tp 2 --target vllm \
        -o "$T/$model-vllm" -q
    check "$model: split (tpshard's own set)" "$TPSHARD" split "$M/tiny-$model" --tp 2 -o "$T/$model-own" -q
    expect_exit 3 "--target sglang is refused" "$model: reshard --target sglang refused" \
        "$TPSHARD" reshard "$T/$model-own" --tp 2 --target sglang -o "$T/$model-re"
done

# A layout without a sglang mapping: the presets listed as having one leave the refused out.
"$TPSHARD" layout --preset llama | awk '/^targets:/ { exit } { print }' >"$T/no-targets.yaml"
"$TPSHARD" split "$M/tiny-llama" --tp 2 --layout "$T/no-targets.yaml" --target sglang -o "$T/nt" >/dev/null 2>"$T/.err"
rc=$?
if [ "$rc" -eq 3 ] && grep -q "the presets with one: .*llama" "$T/.err" && ! grep -q "the presets with one: .*gemma" "$T/.err"
then
    ok "a layout without the target: exit 3, the presets with one listed without the refused Gemma ones"
else
    notok "a layout without the target: exit 3, the presets with one listed without the refused Gemma ones"
    echo "#   exit $rc"
    sed 's/^/#   /' "$T/.err" | head -5
fi
