#!/bin/sh
# tpshard verify under mpirun (issue 6): one process per rank, MPI_Allreduce between them.
# The verdicts, stage by stage and layer by layer, equal the threaded CPU backend's on the
# tiny fixtures at tp 2 and 4; a wrong layout fails the same way, naming the same rank;
# only rank 0 prints, and every process exits with the same code.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"

if ! command -v mpirun >/dev/null 2>&1; then
    skip "verify under mpirun: no mpirun on PATH (install Open MPI)"
    exit 0
fi
if ! make -s -C "$TPS_TOP" config 2>/dev/null | grep -q "^MPI  *found"; then
    skip "verify under mpirun: this build has no MPI plugin (make config: MPI not found)"
    exit 0
fi
# Open MPI refuses root without these and more processes than cores without --oversubscribe.
MPIFLAGS=
if mpirun --version 2>&1 | grep -q "Open MPI"; then
    MPIFLAGS=--oversubscribe
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_btl_vader_single_copy_mechanism=none # containers without CMA
fi
mpi() { # NP ARGS...: tpshard under mpirun, with a time limit so a hang fails
    np=$1
    shift
    timeout 120 mpirun $MPIFLAGS -np "$np" "$TPSHARD" "$@"
}

# verdicts JSON: "layer stage pass" lines from a verify --json report.
verdicts() {
    /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
for l in r["layers"]:
    for s in ("attention", "mlp"):
        print(l["layer"], s, l[s]["pass"], l[s]["rtol"])
print("all", r["pass"], r["processes"], r["launcher"])
' "$1"
}

# mpi_as_threads MODEL TP WHOLE [SPLIT-ARGS...]: tiny-MODEL split at TP (with SPLIT-ARGS), verified
# by the threads and under mpirun -np TP: the MPI run passes, its verdicts layer by layer and
# stage by stage equal the threads', and with WHOLE=whole verify --whole-model under mpirun passes too.
mpi_as_threads() {
    model=$1 tp=$2 whole=$3
    shift 3
    out="$T/$model-$tp"
    if ! "$TPSHARD" split "$M/tiny-$model" --tp "$tp" "$@" -o "$out" -q >"$T/.out" 2>&1; then
        notok "$model tp $tp: split failed"
        sed 's/^/#   /' "$T/.out" | head -5
        return
    fi
    "$TPSHARD" verify "$out" --json >"$T/threads.json" 2>"$T/threads.err"
    trc=$?
    mpi "$tp" verify "$out" --json >"$T/mpi.json" 2>"$T/mpi.err"
    mrc=$?
    what="passes every layer and stage as the threads do" wrc=0 wok=0
    : >"$T/mpi-whole.out"
    if [ "$whole" = whole ]; then
        what="passes every layer as the threads do, and the whole model"
        mpi "$tp" verify "$out" --whole-model >"$T/mpi-whole.out" 2>&1
        wrc=$?
        [ $wrc -eq 0 ] && grep -q "whole model verified" "$T/mpi-whole.out" || wok=1
    fi
    verdicts "$T/threads.json" >"$T/threads.v" 2>&1
    verdicts "$T/mpi.json" >"$T/mpi.v" 2>&1
    if [ $trc -eq 0 ] && [ $mrc -eq 0 ] && [ $wok -eq 0 ] && grep -q "^all True $tp mpi$" "$T/mpi.v" &&
        diff "$T/threads.v" "$T/mpi.v" | grep -q '^> all True' &&
        [ "$(diff "$T/threads.v" "$T/mpi.v" | grep -c '^[<>] [0-9]')" -eq 0 ]; then
        ok "$model tp $tp: mpirun -np $tp $what"
    else
        notok "$model tp $tp: mpirun -np $tp $what"
        echo "#   threads exit $trc, mpirun exit $mrc, whole-model exit $wrc"
        diff "$T/threads.v" "$T/mpi.v" | sed 's/^/#   /' | head -10
        sed 's/^/#   /' "$T/mpi.err" "$T/mpi-whole.out" | tail -10
    fi
}

for spec in llama:llama:8 gpt2:gpt2:4 neox:neox:4 mixtral:mixtral:8; do
    model=${spec%%:*} rest=${spec#*:} preset=${rest%%:*} heads=${rest#*:}
    for tp in 2 4; do
        [ $((heads % tp)) -eq 0 ] || continue
        mpi_as_threads "$model" "$tp" layers --preset "$preset" --config "$M/tiny-$model/config.json"
    done
done

# The newer families' block features under MPI, every layer and the whole model: q/k norms
# (Qwen3), post-block norms, soft-caps and windows (Gemma 2), a grouped fused QKV (Falcon-40B),
# MLA with grouped sigmoid routing and shared experts (DeepSeek-V3), attention sinks and fused
# biased experts whose down biases are routed after the all-reduce (GPT-OSS).  The preset
# comes from each fixture's config.json; the verdicts must equal the threads'.
for model in qwen3 gemma2 falcon40 deepseek-v3 gpt-oss; do
    for tp in 2 4; do
        mpi_as_threads "$model" "$tp" whole
    done
done

# Only rank 0 reports: one header, one summary, at tp 4.
mpi 4 verify "$T/llama-4" >"$T/.out" 2>"$T/.err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '^verify ' "$T/.out")" -eq 1 ] && [ "$(grep -c 'layers verified' "$T/.out")" -eq 1 ] &&
    grep -q "cpu over MPI (4 processes" "$T/.out"; then
    ok "mpirun -np 4: only rank 0 prints the report, naming the MPI backend"
else
    notok "mpirun -np 4: only rank 0 prints the report, naming the MPI backend"
    sed 's/^/#   /' "$T/.out" "$T/.err" | head -10
fi

# A wrong layout (K/V heads cut without replication at tp 4, llama's 2 KV heads) fails under
# MPI as with threads: exit 1 from every process, the attention stage and rank 0 named once.
"$TPSHARD" layout --preset llama >"$T/base.yaml"
awk '{ print } /^rules:/ { print "  - match: \"model.layers.*.self_attn.{k_proj,v_proj}.weight\"\n    split: column" }' \
    "$T/base.yaml" >"$T/kv.yaml"
if "$TPSHARD" split "$M/tiny-llama" --tp 4 --layout "$T/kv.yaml" --config "$M/tiny-llama/config.json" \
    -o "$T/kv-4" -q >"$T/.out" 2>&1; then
    timeout 120 mpirun $MPIFLAGS -np 4 sh -c '"$0" verify "$1" >"$2.out.$OMPI_COMM_WORLD_RANK$PMI_RANK" 2>&1
        echo $? >"$2.rc.$OMPI_COMM_WORLD_RANK$PMI_RANK"' "$TPSHARD" "$T/kv-4" "$T/kv" >/dev/null 2>&1
    "$TPSHARD" verify "$T/kv-4" >/dev/null 2>"$T/kv.threads.err"
    trc=$?
    codes=$(cat "$T"/kv.rc.* 2>/dev/null | sort -u | tr '\n' ' ')
    said=$(cat "$T"/kv.out.* 2>/dev/null | grep -c "mismatch in layer 0, attention stage")
    if [ "$trc" -eq 1 ] && [ "$codes" = "1 " ] && [ "$said" -eq 1 ] &&
        grep -q "rank 0 holds model.layers.0.self_attn.k_proj.weight" "$T/kv.out.0" &&
        grep -q "rank 0 holds model.layers.0.self_attn.k_proj.weight" "$T/kv.threads.err"; then
        ok "wrong KV cut: every MPI process exits 1, rank 0 alone names the stage and rank, as the threads do"
    else
        notok "wrong KV cut: every MPI process exits 1, rank 0 alone names the stage and rank, as the threads do"
        echo "#   threads exit $trc; process exit codes: $codes; mismatch reports: $said"
        cat "$T"/kv.out.* 2>/dev/null | sed 's/^/#   /' | head -10
    fi
else
    notok "wrong KV cut: split with the wrong layout"
    sed 's/^/#   /' "$T/.out" | head -5
fi

# A semantic error only the numbers show (q heads reordered within the rank's slice): the
# partial-sum culprit search works on gathered outputs too.
awk '{ print } /^rules:/ { print "  - match: model.layers.*.self_attn.q_proj.weight\n    split: column\n    unit: head_dim\n    segments: {qa: heads*head_dim/2, qb: heads*head_dim/2}" }' \
    "$T/base.yaml" >"$T/q.yaml"
"$TPSHARD" split "$M/tiny-llama" --tp 2 --layout "$T/q.yaml" --config "$M/tiny-llama/config.json" -o "$T/q-2" -q \
    >/dev/null 2>&1
expect_exit 1 "rank 0's partial sum differs from the reference for its share" \
    "wrong q order: mpirun -np 2 exits 1 blaming rank 0's partial sum" mpi 2 verify "$T/q-2"

# One process per rank: a job of the wrong size is refused by rank 0 alone, exit 2.
expect_exit 2 "one process per rank (mpirun -np 4)" "mpirun -np 2 on a tp-4 set: exit 2 saying -np 4" \
    mpi 2 verify "$T/llama-4"
if [ "$(grep -c 'one process per rank' "$T/.err")" -eq 1 ]; then ok "the wrong job size is reported once"; else
    notok "the wrong job size is reported once"
    sed 's/^/#   /' "$T/.err" | head -5
fi

# A rank whose shard file is unreadable stops every process (no hang), with its own message.
cp -r "$T/llama-2" "$T/broken-2"
: >"$T/broken-2/model-rank-1-of-2.safetensors"
expect_exit 3 "model-rank-1-of-2.safetensors" "an empty rank 1 file: every process stops, exit 3 naming the file" \
    mpi 2 verify "$T/broken-2"

# The device path under MPI (devsim: the cuda plugin's primitives in host memory; it has no
# communicator between processes, so MPI sums through the host): one rank per process, its
# matrices on its device, the layers and the whole model pass; a device fault is caught.
mpi 2 verify "$T/llama-2" --backend devsim --layer all >"$T/.out" 2>&1
rc=$?
mpi 2 verify "$T/llama-2" --backend devsim --whole-model -q >>"$T/.out" 2>&1
wrc=$?
if [ $rc -eq 0 ] && [ $wrc -eq 0 ] && grep -q "backend devsim (2 ranks, one device each, one MPI process each, MPI all-reduce through the host" "$T/.out"; then
    ok "mpirun -np 2 verify --backend devsim: layers and whole model pass, summed by MPI"
else
    notok "mpirun -np 2 verify --backend devsim: layers and whole model pass, summed by MPI (exit $rc, $wrc)"
    sed 's/^/#   /' "$T/.out" | head -6
fi
TPS_DEVSIM_FAULT=gemm
export TPS_DEVSIM_FAULT
expect_exit 1 "mismatch in layer 0" "mpirun -np 2 verify --backend devsim: a wrong device GEMM exits 1" \
    mpi 2 verify "$T/llama-2" --backend devsim
unset TPS_DEVSIM_FAULT
