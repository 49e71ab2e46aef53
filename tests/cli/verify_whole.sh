#!/bin/sh
# tpshard verify --whole-model: the vocabulary-parallel embedding, every layer chained, the
# final norm and the vocabulary-parallel LM head, compared with the unsharded model's logits.
# Every tiny fixture passes at every tp in 1, 2, 4, 8 that split accepts, with the reference
# reassembled from the shards and from the source; a set whose bytes are what its manifest
# says (check passes) but whose embedding or LM head is cut the wrong way fails with exit 1
# naming the stage and the rank; under mpirun the verdict is the same.  (transformers' own
# logits are compared in tests/interop/transformers/debian/test_whole_model.py.)
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"

for spec in llama:llama qwen2:llama llama-bias:llama llama-split:llama gpt2:gpt2 neox:neox phi3:phi3 mixtral:mixtral; do
    model=${spec%%:*} preset=${spec##*:}
    src="$M/tiny-$model"
    for tp in 1 2 4 8; do
        out="$T/$model-$tp"
        # split refuses a tp the heads do not divide (tests/cli/verify.sh checks that refusal)
        "$TPSHARD" split "$src" --tp "$tp" --preset "$preset" --config "$src/config.json" -o "$out" -q \
            >/dev/null 2>&1 || continue
        check "$model tp $tp: verify --whole-model passes (reference reassembled from shards)" \
            "$TPSHARD" verify "$out" --whole-model -q
        check "$model tp $tp: verify --whole-model --source passes" \
            "$TPSHARD" verify "$out" --whole-model --source "$src" -q
    done
done

# The report says what it covered; the footer counts the logits compared (16 tokens x 1003).
"$TPSHARD" verify "$T/llama-4" --whole-model >"$T/.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^whole model BF16 .* top-1 16/16 agree .* ok$" "$T/.out" &&
    grep -q "^checked: embedding, 2 layers, final norm and LM head (untied) on 4 ranks, 16 tokens, 16048 logits compared (vocabulary 1003, padded to 1004); " "$T/.out"; then
    ok "verify --whole-model: the report names what it covered"
else
    notok "verify --whole-model: the report names what it covered"
    sed 's/^/#   /' "$T/.out" | head -8
fi

# --json carries the whole-model result; a tied head (Qwen2) is reported as tied.
if "$TPSHARD" verify "$T/qwen2-2" --whole-model --json --tokens 5 --seed 7 >"$T/w.json" 2>"$T/.err" &&
    /usr/bin/python3 - "$T/w.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
w = r["whole_model"]
assert r["pass"] is True and r["whole_model"] and len(r["layers"]) == 2, r
assert w["pass"] and w["tied_lm_head"] and not w["pos_embed"], w
assert w["tokens"] == 5 and w["vocab"] == 500 and w["logits"] == 2500 and w["top1_agree"] == 5, w
for s in ("embedding", "logits_cmp"):
    assert w[s]["pass"] and w[s]["max_abs_err"] <= w[s]["atol"] and w[s]["rtol"] == 0.016, w[s]
assert r["checked"]["logits"] == 2500 and r["checked"]["tokens"] == 5, r["checked"]
PY
then ok "verify --whole-model --json: the whole-model result"; else
    notok "verify --whole-model --json: the whole-model result"
    sed 's/^/#   /' "$T/.err" | head -5
fi

# --dump-logits: token ids below the true vocabulary (1003, not the padded 1008), both logits.
if "$TPSHARD" verify "$T/llama-8" --whole-model --dump-logits "$T/logits.json" --tokens 64 -q &&
    /usr/bin/python3 - "$T/logits.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["vocab"] == 1003 and len(d["tokens"]) == 64 and all(0 <= t < 1003 for t in d["tokens"]), d["tokens"]
assert len(set(d["tokens"])) > 32, d["tokens"]
assert len(d["reference"]) == 64 and all(len(row) == 1003 for row in d["reference"] + d["ranks"])
worst = max(abs(a - b) for ra, rb in zip(d["ranks"], d["reference"]) for a, b in zip(ra, rb))
assert worst < 1e-4, worst
PY
then ok "verify --dump-logits: token ids and both logits, without the padding"; else
    notok "verify --dump-logits: token ids and both logits, without the padding"
fi
expect_exit 2 "takes no --layer" "--whole-model with --layer is a usage error" \
    "$TPSHARD" verify "$T/llama-2" --whole-model --layer 0
expect_exit 2 "needs --whole-model" "--dump-logits without --whole-model is a usage error" \
    "$TPSHARD" verify "$T/llama-2" --dump-logits "$T/x.json"
expect_exit 2 "learned positions" "GPT-2: more tokens than its learned positions is refused" \
    "$TPSHARD" verify "$T/gpt2-2" --whole-model --tokens 65

# A layout whose block names no embedding (made before whole-model verification) is refused.
"$TPSHARD" layout --preset llama | grep -v '^  embed:' >"$T/noembed.yaml"
"$TPSHARD" split "$M/tiny-llama" --tp 2 --layout "$T/noembed.yaml" -o "$T/noembed" -q
expect_exit 3 "names no embed tensor" "a block without embed: refused naming the key" \
    "$TPSHARD" verify "$T/noembed" --whole-model
check "... while the layer pass still runs" "$TPSHARD" verify "$T/noembed" -q

# wrong NAME PRESET MODEL TP STAGE FRAGMENT RULE: the preset with RULE inserted as its first
# rule; check passes, verify --whole-model (with and without --source) exits 1 naming STAGE
# and saying FRAGMENT; the layer pass alone does not see it.
wrong() {
    w=$1 preset=$2 model=$3 tp=$4 stage=$5 frag=$6 rule=$7
    out="$T/wrong-$w"
    split_wrong "$w" "$preset" "$M/tiny-$model" "$tp" "$rule" "$out" || return
    check "$w: check passes (the shards hold what the manifest says)" "$TPSHARD" check "$out" -q
    check "$w: verify --layer all passes (the layers are cut right)" "$TPSHARD" verify "$out" -q
    for how in shards source devsim; do
        case $how in
        source) set -- --source "$M/tiny-$model" ;;
        devsim) set -- --backend devsim ;; # the GPU path's primitives in host memory
        *) set -- ;;
        esac
        expect_mismatch "whole model, $stage" "$frag" \
            "$w: verify --whole-model ($how) exits 1 naming the $stage stage and the rank" \
            "$TPSHARD" verify "$out" --whole-model "$@"
    done
}

wrong embed-dim1 llama llama 2 embedding \
    "rank 0 holds model.embed_tokens.weight (embed) with shape [1003, 32] where the TP convention gives [502, 64]" \
    '  - match: model.embed_tokens.weight
    split: row'
wrong gpt2-wte-dim1 gpt2 gpt2 2 embedding "rank 0 holds transformer.wte.weight (embed) with shape [500, 32]" \
    '  - match: "{transformer.,}wte.weight"
    split: row'
wrong embed-order-tied llama qwen2 2 embedding "looked up from rank 1's rows 250-499 differs from the reference" \
    '  - match: model.embed_tokens.weight
    split: column
    segments: {va: vocab/2, vb: vocab/2}'
wrong head-order phi3 phi3 2 logits "(rank 0's rows 0-299 of lm_head.weight) differs" \
    '  - match: lm_head.weight
    split: column
    segments: {va: vocab/2, vb: vocab/2}'
wrong head-replicated llama llama 4 logits "rank 0 holds lm_head.weight (lm_head) with shape [1003, 64] where the TP convention gives [251, 64]" \
    '  - match: lm_head.weight
    split: replicate'
wrong neox-head-order neox neox 2 logits "of embed_out.weight) differs" \
    '  - match: embed_out.weight
    split: column
    segments: {va: vocab/2, vb: vocab/2}'

# Under mpirun (one process per rank) the same verdicts.
if command -v mpirun >/dev/null 2>&1 && make -s -C "$TPS_TOP" config 2>/dev/null | grep -q "^MPI  *found"; then
    MPIFLAGS=
    if mpirun --version 2>&1 | grep -q "Open MPI"; then
        MPIFLAGS=--oversubscribe
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        export OMPI_MCA_btl_vader_single_copy_mechanism=none
    fi
    for spec in llama:4 gpt2:2 mixtral:2; do
        model=${spec%%:*} tp=${spec##*:}
        check "mpirun -np $tp: $model verify --whole-model passes" \
            timeout 120 mpirun $MPIFLAGS -np "$tp" "$TPSHARD" verify "$T/$model-$tp" --whole-model -q
    done
    timeout 120 mpirun $MPIFLAGS -np 2 "$TPSHARD" verify "$T/wrong-head-order" --whole-model >"$T/.out" 2>"$T/.err"
    rc=$?
    if [ $rc -eq 1 ] && grep -qF "(rank 0's rows 0-299 of lm_head.weight) differs" "$T/.err"; then
        ok "mpirun -np 2: a wrong LM head cut exits 1 naming the rank"
    else
        notok "mpirun -np 2: a wrong LM head cut exits 1 naming the rank (exit $rc)"
        sed 's/^/#   /' "$T/.err" | head -5
    fi
else
    skip "verify --whole-model under mpirun: no mpirun or no MPI plugin"
fi
