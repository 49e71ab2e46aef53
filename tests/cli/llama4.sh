#!/bin/sh
# Llama 4 text (preset llama4) on the tiny fixture of testdata/gen_llama4.py: auto-detection,
# the fused 3-D experts cut as [gate | up] halves, dense layers between the MoE ones, split /
# check at every tp the heads allow, and --target vllm (q/k rows per head from RoPE pairs to
# halves, experts transposed per expert, the shared expert under vLLM's name): check, and
# reshard from the default split and from another tp equal to split --target vllm byte for
# byte; verify passes.  The real vLLM loads such sets in tests/interop/vllm/real/vllm_real_fused3d.py.
. "$TPS_TOP/tests/cli/lib.sh"
src="$FIX/models/tiny-llama4"

for tp in 1 2 4 8; do
    out="$T/llama4-$tp"
    "$TPSHARD" split "$src" --tp "$tp" -o "$out" >/dev/null 2>"$T/split.err"
    rc=$?
    if [ $rc -ne 0 ] || ! grep -qx "tpshard split: layout: preset llama4, from $src/config.json architectures Llama4ForCausalLM" "$T/split.err"; then
        notok "llama4 tp $tp: split without --preset picks preset llama4 from config.json"
        sed 's/^/#   /' "$T/split.err" | head -5
        continue
    fi
    check "llama4 tp $tp: check passes" "$TPSHARD" check "$out" -q
done

# Rank 1 of 2: gate_up_proj's columns [gate 16-31 | up 16-31] of every expert (two segments),
# down_proj's rows 16-31; the dense MLP of layer 0 by its 96 columns.
if "$TPSHARD" inspect "$T/llama4-2" >"$T/inspect" 2>&1 &&
    grep -q 'model.layers.1.feed_forward.experts.gate_up_proj .*\[4, 64, 32\] *split dim 2 \[gate:32; up:32\]' "$T/inspect" &&
    grep -q 'model.layers.1.feed_forward.experts.down_proj .*\[4, 16, 64\] *split dim 1' "$T/inspect" &&
    grep -q 'model.layers.0.feed_forward.gate_proj.weight .*\[48, 64\]' "$T/inspect" &&
    grep -q 'model.layers.1.feed_forward.shared_expert.down_proj.weight .*\[64, 16\]' "$T/inspect"; then
    ok "llama4 tp 2: fused experts by [gate | up] halves, dense and shared MLPs by columns/rows"
else
    notok "llama4 tp 2: fused experts by [gate | up] halves, dense and shared MLPs by columns/rows"
    grep -E 'feed_forward' "$T/inspect" | head -8 | sed 's/^/#   /'
fi
expect_exit 3 "intermediate size" "llama4 tp 3: refused" "$TPSHARD" plan "$src" --tp 3

for tp in 2 4; do
    check "llama4 tp $tp: split --target vllm" "$TPSHARD" split "$src" --tp "$tp" --target vllm -o "$T/llama4-vllm-$tp" -q
done
for tp in 2 4; do
    v="$T/llama4-vllm-$tp"
    check "llama4 tp $tp --target vllm: check passes" "$TPSHARD" check "$v" -q
    for from in "$T/llama4-$tp" "$T/llama4-vllm-$((6 - tp))"; do
        re="$T/llama4-re-$tp"
        rm -rf "$re"
        if "$TPSHARD" reshard "$from" --tp "$tp" --target vllm -o "$re" -q 2>"$T/re.err" &&
            cmp -s "$re/model-rank-0-part-0.safetensors" "$v/model-rank-0-part-0.safetensors" &&
            cmp -s "$re/model-rank-1-part-0.safetensors" "$v/model-rank-1-part-0.safetensors"; then
            ok "llama4: reshard $(basename "$from") --tp $tp --target vllm equals split --target vllm"
        else
            notok "llama4: reshard $(basename "$from") --tp $tp --target vllm equals split --target vllm"
            sed 's/^/#   /' "$T/re.err" | head -5
        fi
    done
done
if [ "$(grep -c '"target_rope_halves": true' "$T/llama4-vllm-2/tpshard.json")" -eq 8 ] &&
    [ "$(grep -c '"target_transpose": true' "$T/llama4-vllm-2/tpshard.json")" -eq 4 ]; then
    ok "llama4 --target vllm: the manifest marks q/k (4 layers) rope_halves and the 3-D experts transposed"
else
    notok "llama4 --target vllm: the manifest marks q/k (4 layers) rope_halves and the 3-D experts transposed"
fi
# Read back in the source's order, every tensor's bytes are the source's.
check "llama4: the --target vllm set read back holds the source's bytes (check --source)" \
    "$TPSHARD" check "$T/llama4-vllm-2" --source "$src/model.safetensors" -q

# verify computes Llama 4's layers (NoPE layers, the QK L2 norm, the router's weight on the
# experts' input, [gate | up] halves, dense and shared MLPs; transformers' truth in
# tests/interop/transformers/torch2/torch2_llama4.py): the tp 2 set passes layer by layer and as a whole model.
check "llama4 tp 2: verify --layer all passes" "$TPSHARD" verify "$T/llama4-2" --layer all -q
check "llama4 tp 4: verify --whole-model passes" "$TPSHARD" verify "$T/llama4-4" --whole-model -q
check "llama4 --target vllm tp 2: verify --layer all passes on vLLM's names" "$TPSHARD" verify "$T/llama4-vllm-2" --layer all -q
# The fused gate_up_proj cut as one block (rank 0 every expert's gate, rank 1 its up): the
# bytes are intact, the cut is wrong, and verify says so on either backend.
if split_wrong "gate-up-block" llama4 "$src" 2 '  - match: model.layers.*.feed_forward.experts.gate_up_proj
    split: dim
    dim: -1' "$T/gate-up-block"; then
    check "llama4 gate/up as one block: check passes (the bytes are intact)" "$TPSHARD" check "$T/gate-up-block" -q
    expect_wrong_cut "mismatch in layer 1, mlp stage" "llama4 gate/up as one block: verify --layer all exits 1" \
        "$T/gate-up-block" --source "$src" --layer all
fi
