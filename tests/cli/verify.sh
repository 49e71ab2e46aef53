#!/bin/sh
# tpshard verify on the bundled tiny models: every preset fixture passes at tp 1, 2, 4 and
# 8 where its heads divide; each wrong way of cutting a layer, made as a user would (a
# preset with one rule overridden, passed with --layout), passes `check` (the bytes are
# what the manifest says) and fails `verify` (exit 1, naming the stage and the rank).
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"

heads_of() { # config.json -> attention heads
    sed -n 's/.*"\(num_attention_heads\|n_head\)": *\([0-9]*\).*/\2/p' "$1" | head -1
}

for spec in llama:llama qwen2:llama llama-bias:llama llama-split:llama gpt2:gpt2 neox:neox phi3:phi3 mixtral:mixtral; do
    model=${spec%%:*} preset=${spec##*:}
    src="$M/tiny-$model" cfg="$M/tiny-$model/config.json"
    heads=$(heads_of "$cfg")
    for tp in 1 2 4 8; do
        out="$T/$model-$tp"
        if [ $((heads % tp)) -ne 0 ]; then
            expect_exit 3 "fewer than tp $tp" "$model tp $tp: $heads heads cannot be cut $tp ways (split refuses)" \
                "$TPSHARD" split "$src" --tp "$tp" --preset "$preset" --config "$cfg" -o "$out" -q
            continue
        fi
        if ! "$TPSHARD" split "$src" --tp "$tp" --preset "$preset" --config "$cfg" -o "$out" -q >"$T/.out" 2>&1; then
            notok "$model tp $tp: split failed"
            sed 's/^/#   /' "$T/.out" | head -5
            continue
        fi
        check "$model tp $tp: verify --layer all passes (reference reassembled from shards)" \
            "$TPSHARD" verify "$out" --layer all
    done
done

# The reference from the source gives the same verdict, and the report says where the
# reference came from.
"$TPSHARD" verify "$T/llama-4" >"$T/a.txt" 2>&1
"$TPSHARD" verify "$T/llama-4" --source "$M/tiny-llama" >"$T/b.txt" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "reference reassembled from shards" "$T/a.txt" &&
    grep -q "reference from $M/tiny-llama" "$T/b.txt"; then
    ok "verify --source: passes and names its reference"
else
    notok "verify --source: passes and names its reference"
    sed 's/^/#   /' "$T/a.txt" "$T/b.txt" | head -10
fi

# --json carries the per-layer errors and tolerances.
if "$TPSHARD" verify "$T/mixtral-2" --json --layer 1 >"$T/v.json" 2>"$T/.err" &&
    /usr/bin/python3 - "$T/v.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["pass"] is True and r["tp"] == 2 and r["kind"] == "mixtral", r
(l,) = r["layers"]
assert l["layer"] == 1 and l["dtype"] == "BF16", l
for s in ("attention", "mlp"):
    st = l[s]
    assert st["pass"] and st["rtol"] == 0.016 and 0 < st["atol"] and st["max_abs_err"] <= st["atol"], st
    assert 0 < st["rel_err"] < 1e-5, st
PY
then ok "verify --json: one layer, both stages with errors and tolerances"; else
    notok "verify --json: one layer, both stages with errors and tolerances"
    sed 's/^/#   /' "$T/v.json" "$T/.err" | head -20
fi

# A tighter tolerance than float32 can meet fails, showing the tolerance is applied.
expect_exit 1 "mismatch in layer 0" "verify --rtol 1e-12 --atol 1e-15 fails on rounding alone" \
    "$TPSHARD" verify "$T/llama-2" --layer 0 --rtol 1e-12 --atol 1e-15
# Backends (issue 6).  Without a GPU, or without the plugin, --backend cuda exits 5 saying
# which; GPU runs are tests/gpu/ (make test-gpu, make gpu-check).
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    skip "verify --backend cuda without a GPU exits 5: this machine has a GPU (make test-gpu covers it)"
else
    expect_exit 5 "cuda backend" "verify --backend cuda without a GPU exits 5 naming the cuda backend" \
        "$TPSHARD" verify "$T/llama-2" --backend cuda
    expect_exit 5 "cuda backend" "verify --backend cuda --emulate without a GPU exits 5 too" \
        "$TPSHARD" verify "$T/llama-2" --backend cuda --emulate
fi
expect_exit 2 "unknown backend" "verify --backend tpu is a usage error" "$TPSHARD" verify "$T/llama-2" --backend tpu
expect_exit 2 "needs --backend cuda" "verify --emulate without --backend cuda is a usage error" \
    "$TPSHARD" verify "$T/llama-2" --emulate
expect_exit 2 "unknown launcher" "verify --launcher slurm is a usage error" \
    "$TPSHARD" verify "$T/llama-2" --launcher slurm
expect_exit 2 "not with --launcher local" "verify --backend mpi --launcher local is a usage error" \
    "$TPSHARD" verify "$T/llama-2" --backend mpi --launcher local
expect_exit 2 "" "verify --backend without a value is a usage error" "$TPSHARD" verify "$T/llama-2" --backend
# --launcher local ignores an MPI launcher's variables: one process runs every rank.
if OMPI_COMM_WORLD_SIZE=2 "$TPSHARD" verify "$T/llama-2" --launcher local >"$T/.out" 2>&1 &&
    grep -q "backend cpu (threads)" "$T/.out"; then
    ok "verify --launcher local runs the threads even under MPI variables"
else
    notok "verify --launcher local runs the threads even under MPI variables"
    sed 's/^/#   /' "$T/.out" | head -5
fi

# The CUDA plugin is compiled and linked wherever the build found nvcc, cuBLAS and NCCL; it
# exports its one entry point and needs no tpshard symbol (the binary is not -rdynamic).
if make -s -C "$TPS_TOP" config 2>/dev/null | grep -q "^CUDA .*compile and link"; then
    so="$TPS_TOP/build/libtpshard-cuda.so"
    if [ -f "$so" ] && nm -D --defined-only "$so" | grep -q " T tps_dev_plugin$" &&
        ! nm -D --undefined-only "$so" | grep -q " tps_"; then
        ok "the CUDA plugin is built with nvcc and exports tps_dev_plugin only"
    else
        notok "the CUDA plugin is built with nvcc and exports tps_dev_plugin only"
        echo "#   $so: $(ls -l "$so" 2>&1)"
    fi
else
    skip "the CUDA plugin builds with nvcc: make config found no CUDA with cuBLAS and NCCL"
fi
expect_exit 3 "" "verify of a directory without a manifest is invalid input" "$TPSHARD" verify "$M/tiny-llama"

# wrong NAME PRESET MODEL TP STAGE FRAGMENT RULE: the preset with RULE (YAML lines) inserted
# as the first rule, which wins over the preset's own; verify must exit 1 naming STAGE and
# saying FRAGMENT (which names the rank).
wrong() {
    w=$1 preset=$2 model=$3 tp=$4 stage=$5 frag=$6 rule=$7
    out="$T/wrong-$w"
    split_wrong "$w" "$preset" "$M/tiny-$model" "$tp" "$rule" "$out" || return
    check "$w: check passes (the shards hold what the manifest says)" "$TPSHARD" check "$out"
    for backend in cpu devsim; do # devsim: the GPU path's primitives in host memory
        expect_mismatch "$stage" "$frag" "$w: verify --backend $backend exits 1 naming the $stage stage and the rank" \
            "$TPSHARD" verify "$out" --backend $backend
    done
}

wrong gate-up-plain phi3 phi3 2 mlp "rank 0's partial sum differs from the reference for its share" \
    '  - match: model.layers.*.mlp.gate_up_proj.weight
    split: column'
wrong kv-unreplicated llama llama 4 attention "rank 0 holds model.layers.0.self_attn.k_proj.weight (k_proj) with shape [4, 64]" \
    '  - match: "model.layers.*.self_attn.{k_proj,v_proj}.weight"
    split: column'
wrong o-proj-columns llama llama 2 attention "rank 0 holds model.layers.0.self_attn.o_proj.weight (o_proj) with shape [32, 64]" \
    '  - match: model.layers.*.self_attn.o_proj.weight
    split: column
    unit: head_dim'
wrong row-bias-split gpt2 gpt2 2 mlp "rank 0 holds transformer.h.0.mlp.c_proj.bias (down_bias) with shape [32]" \
    '  - match: "{transformer.,}h.*.mlp.c_proj.bias"
    split: column'
wrong q-order llama llama 2 attention "rank 0's partial sum differs from the reference for its share (max abs err" \
    '  - match: model.layers.*.self_attn.q_proj.weight
    split: column
    unit: head_dim
    segments: {qa: heads*head_dim/2, qb: heads*head_dim/2}'
# Llama with attention_bias and mlp_bias: a row-parallel bias cut like a column is caught
# by its shape; gate_proj's bias cut in another order than its weight by the partial sums.
wrong o-bias-columns llama llama-bias 2 attention "rank 0 holds model.layers.0.self_attn.o_proj.bias (o_bias) with shape [32]" \
    '  - match: model.layers.*.self_attn.o_proj.bias
    split: column'
wrong gate-bias-order llama llama-bias 2 mlp "rank 0's partial sum differs from the reference for its share" \
    '  - match: model.layers.*.mlp.gate_proj.bias
    split: column
    segments: {ga: intermediate/2, gb: intermediate/2}'

# rope_scaling: recorded with the set, and a malformed one is refused naming the key
# (the frequencies themselves are checked against transformers in tests/interop).
tr -d ' \n' <"$T/llama-bias-2/tpshard.json" | grep -q '"rope_scaling":{[^}]*"original_max_position_embeddings":8192,"rope_type":"llama3"}' &&
    ok "the manifest records config.json's rope_scaling" ||
    notok "the manifest records config.json's rope_scaling"
sed 's/"low_freq_factor": 1.0,//' "$M/tiny-llama-bias/config.json" >"$T/rs.json"
expect_exit 3 'rope_scaling of type llama3 needs "low_freq_factor"' "a llama3 rope_scaling without low_freq_factor is refused naming it" \
    "$TPSHARD" split "$M/tiny-llama-bias" --tp 2 --preset llama --config "$T/rs.json" -o "$T/rs-out" -q
sed 's/"rope_type": "llama3"/"rope_type": "longrope"/' "$M/tiny-llama-bias/config.json" >"$T/rs.json"
check "a rope_scaling type verify does not model (longrope) does not stop split or verify" \
    sh -c '"$1" split "$2" --tp 2 --preset llama --config "$3" -o "$4" -q && "$1" verify "$4" --layer 0 -q' \
    sh "$TPSHARD" "$M/tiny-llama-bias" "$T/rs.json" "$T/rs-out2"

# The manifest records the config.json keys the set was cut with; verify of the set alone
# uses them (the float64 effect is checked against torch in tests/interop), --config still
# wins, and a recorded value that cannot be used is refused naming the manifest and key.
mkdir -p "$T/alone"
cp -r "$T/llama-2" "$T/alone/set"
"$TPSHARD" verify "$T/alone/set" -v >"$T/.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "hyper-parameters from $T/alone/set/tpshard.json (config recorded from $M/tiny-llama/config.json): norm eps 1e-05, RoPE theta 10000" "$T/.out"; then
    ok "verify of a set copied away from its source reads the config keys its manifest recorded"
else
    notok "verify of a set copied away from its source reads the config keys its manifest recorded"
    sed 's/^/#   /' "$T/.out" | head -5
fi
sed 's/"rope_theta": 10000.0/"rope_theta": 250000/' "$M/tiny-llama/config.json" >"$T/theta.json"
"$TPSHARD" verify "$T/alone/set" --config "$T/theta.json" -v >"$T/.out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "hyper-parameters from $T/theta.json: .*RoPE theta 250000" "$T/.out" &&
    ok "verify --config overrides the recorded keys" ||
    { notok "verify --config overrides the recorded keys"; sed 's/^/#   /' "$T/.out" | head -5; }
sed 's/"rope_theta": 10000.0/"rope_theta": "fast"/' "$T/alone/set/tpshard.json" >"$T/.m" && mv "$T/.m" "$T/alone/set/tpshard.json"
grep -q '"rope_theta": "fast"' "$T/alone/set/tpshard.json" || notok "setup: the recorded rope_theta was not replaced"
expect_exit 3 'tpshard.json (config recorded from' "a recorded rope_theta that is not a number: exit 3 naming the manifest" \
    "$TPSHARD" verify "$T/alone/set"
"$TPSHARD" verify "$T/alone/set" 2>&1 | grep -q '"rope_theta" must be a number' &&
    ok "... and the key" || notok "a bad recorded rope_theta: the message does not name the key"
