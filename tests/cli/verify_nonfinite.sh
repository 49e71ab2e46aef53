#!/bin/sh
# Non-finite weights are bad input, not a mismatch: a checkpoint with one NaN in
# model.layers.1.mlp.down_proj.weight (planted by tests/cli/poison_weights.py, which writes
# the safetensors bytes itself) splits and checks fine, and verify exits 3 naming the
# tensor, the first index and the count, for --layer all and --whole-model, with and
# without --source (saying whether the source holds it too); a source that holds what the
# shards do not is named as the source.  A model of random bit patterns is refused the same
# way, and the named tensor's count and first index are the ones Python counted.  A NaN in an
# FP8 weight's scale is named the same way.
. "$TPS_TOP/tests/cli/lib.sh"
PY=/usr/bin/python3
POISON="$TPS_TOP/tests/cli/poison_weights.py"
SRC="$FIX/models/tiny-llama"
W=model.layers.1.mlp.down_proj.weight # [64, 176]: element 1797 is [10, 37]
NAMED="tensor '$W' holds 1 non-finite value (NaN or Inf), the first at [10, 37] (element 1797)"

"$PY" "$POISON" "$SRC" "$T/nan" nan "$W" 1797 || notok "poison_weights.py nan"
"$TPSHARD" split "$T/nan" --tp 2 --preset llama -o "$T/nan-2" -q || notok "split of the NaN checkpoint"
check "a NaN in the weights: split and check pass (the bytes are what the manifest says)" \
    "$TPSHARD" check "$T/nan-2" -q
for mode in "--layer all" --whole-model; do
    # shellcheck disable=SC2086 # $mode is two words
    expect_exit 3 "$NAMED: the weights themselves are not finite" "NaN, $mode: exit 3 naming the tensor" \
        "$TPSHARD" verify "$T/nan-2" $mode -q
    # shellcheck disable=SC2086
    expect_exit 3 "$NAMED; the source holds it too (1 non-finite value, the first at element 1797)" \
        "NaN, $mode --source: exit 3, the source holds it too" "$TPSHARD" verify "$T/nan-2" $mode --source "$T/nan" -q
    # shellcheck disable=SC2086
    expect_exit 3 "$NAMED; the source's copy is finite" "NaN in the shards only, $mode: exit 3, the source's copy is finite" \
        "$TPSHARD" verify "$T/nan-2" $mode --source "$SRC" -q
done

# The shards finite, the source not: the source is named, never the shards blamed.
"$TPSHARD" split "$SRC" --tp 4 --preset llama -o "$T/clean-4" -q || notok "split of the clean checkpoint"
for mode in "--layer all" --whole-model; do
    # shellcheck disable=SC2086
    expect_exit 3 "the source: $NAMED" "NaN in the source only, $mode: exit 3 naming the source" \
        "$TPSHARD" verify "$T/clean-4" $mode --source "$T/nan" -q
done
check "the clean set still verifies against its source" "$TPSHARD" verify "$T/clean-4" --whole-model --source "$SRC" -q

# Random bit patterns in every tensor (the issue's --whole-model case blamed rank 5's rows).
"$PY" "$POISON" "$SRC" "$T/rnd" random 7 >"$T/counts" || notok "poison_weights.py random"
"$TPSHARD" split "$T/rnd" --tp 2 --preset llama -o "$T/rnd-2" -q || notok "split of the random checkpoint"
for mode in "--layer all" --whole-model; do
    # shellcheck disable=SC2086
    "$TPSHARD" verify "$T/rnd-2" $mode -q >"$T/.out" 2>"$T/.err"
    rc=$?
    # the message's tensor, count and first element against Python's count of that tensor
    got=$(sed -n "s/.*tensor '\([^']*\)' holds \([0-9]*\) non-finite values\{0,1\} (NaN or Inf), the first at .*(element \([0-9]*\)).*/\1 \2 \3/p" "$T/.err")
    if [ "$rc" -eq 3 ] && [ -n "$got" ] && grep -qxF "$got" "$T/counts"; then
        ok "random bits, $mode: exit 3 naming $got (as Python counts it)"
    else
        notok "random bits, $mode: exit 3 naming a tensor with Python's count (exit $rc, named '$got')"
        sed 's/^/#   /' "$T/.err" | head -5
    fi
done

# A NaN in an FP8 weight's scale (verify holds FP8 weights with their scale beside them, not
# widened): still exit 3 naming the scale tensor and its element.
SW=model.layers.0.self_attn.o_proj.weight_scale_inv # [8, 8]: element 5 is [0, 5]
"$PY" "$POISON" "$FIX/models/tiny-deepseek-v3-fp8" "$T/nanscale" nan "$SW" 5 || notok "poison_weights.py nan scale"
"$TPSHARD" split "$T/nanscale" --tp 2 -o "$T/nanscale-2" -q || notok "split of the NaN-scale checkpoint"
for mode in "--layer all" --whole-model; do
    # shellcheck disable=SC2086
    expect_exit 3 "tensor '$SW' holds 1 non-finite value (NaN or Inf), the first at [0, 5] (element 5)" \
        "NaN in an FP8 scale, $mode: exit 3 naming the scale" "$TPSHARD" verify "$T/nanscale-2" $mode -q
done
