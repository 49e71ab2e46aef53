#!/bin/sh
# A MoE layer's routed experts stream (issue 36: the reference loads the experts the router
# picks, each rank fetches one expert at a time and then the rest for their shapes): a slice
# of the wrong shape in an expert past the first, which no whole-layer check sees any more, is
# still reported as that rank's, naming the tensor, on cpu and devsim, for --layer all and
# --whole-model.  Fixture: tiny-deepseek-v3 (4 routed experts of 32, top 2), tp 2.
. "$TPS_TOP/tests/cli/lib.sh"
V3="$FIX/models/tiny-deepseek-v3"
down='  - match: model.layers.1.mlp.experts.3.down_proj.weight
    split: column'
up='  - match: model.layers.1.mlp.experts.2.up_proj.weight
    split: row'
for w in down up; do
    eval "rule=\$$w"
    split_wrong "stream-$w" deepseek_v3 "$V3" 2 "$rule" "stream-$w" || continue
    e=3 && [ $w = up ] && e=2
    t="model.layers.1.mlp.experts.$e.${w}_proj.weight"
    check "expert $e's ${w}_proj cut the other way: check passes (the bytes are intact)" "$TPSHARD" check "stream-$w" -q
    for mode in "--layer all" --whole-model; do
        # shellcheck disable=SC2086 # $mode is two words
        expect_wrong_cut "rank 0 holds $t" "expert $e's ${w}_proj of the wrong shape: verify $mode names it" \
            "stream-$w" $mode -q
    done
done
