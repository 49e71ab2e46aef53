#!/bin/sh
# GPT-OSS (preset gpt_oss) on the tiny fixture of testdata/gen_gpt_oss.py: auto-detection,
# split/check/verify --layer all and --whole-model at every tp the model allows, the refused
# tp naming the constraint, and wrong cuts with intact bytes caught by verify (exit 1) while
# check passes.  transformers' own logits are compared in tests/interop/transformers/torch2/torch2_gpt_oss.py.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"
src="$M/tiny-gpt-oss"

for tp in 1 2 4 8; do
    out="$T/gpt_oss-$tp"
    "$TPSHARD" split "$src/model.safetensors" --tp "$tp" -o "$out" >/dev/null 2>"$T/split.err"
    rc=$?
    if [ $rc -ne 0 ] || ! grep -qx "tpshard split: layout: preset gpt_oss, from $src/config.json architectures GptOssForCausalLM" "$T/split.err"; then
        notok "gpt_oss tp $tp: split without --preset picks preset gpt_oss from config.json"
        sed 's/^/#   /' "$T/split.err" | head -5
        continue
    fi
    check "gpt_oss tp $tp: check passes" "$TPSHARD" check "$out" -q
    check "gpt_oss tp $tp: verify --layer all --source passes" "$TPSHARD" verify "$out" --source "$src" --layer all -q
    check "gpt_oss tp $tp: verify --whole-model passes (reference from the shards)" "$TPSHARD" verify "$out" --whole-model -q
    check "gpt_oss tp $tp: verify --whole-model --source passes" "$TPSHARD" verify "$out" --whole-model --source "$src" -q
done

# The cut as vLLM loads it: rank 1 of 2 holds gate_up_proj's columns 32-63 of every expert
# (intermediate columns 16-31 as interleaved (gate, up) pairs), down_proj's rows 16-31,
# sinks of heads 4-7, and the whole down bias.
if "$TPSHARD" inspect "$T/gpt_oss-2" >"$T/inspect" 2>&1 &&
    grep -q 'model.layers.0.mlp.experts.gate_up_proj .*\[4, 64, 32\]' "$T/inspect" &&
    grep -q 'model.layers.0.mlp.experts.down_proj .*\[4, 16, 64\]' "$T/inspect" &&
    grep -q 'model.layers.0.self_attn.sinks .*\[4\]' "$T/inspect" &&
    grep -q 'model.layers.0.mlp.experts.down_proj_bias .*\[4, 64\]' "$T/inspect"; then
    ok "gpt_oss tp 2: the fused experts, their biases and the sinks have the vLLM shapes per rank"
else
    notok "gpt_oss tp 2: the fused experts, their biases and the sinks have the vLLM shapes per rank"
    grep -E 'experts|sinks' "$T/inspect" | head -8 | sed 's/^/#   /'
fi

# --target vllm (the engine's names; the 3-D experts transposed per expert, w2_bias on rank 0
# only: tests/interop/vllm/real/vllm_real_fused3d.py loads them in the real vLLM).  The set checks,
# verifies, and reshards: from the default split and from the other tp it is byte for byte
# what split --target vllm writes.
for tp in 2 4; do
    check "gpt_oss tp $tp: split --target vllm" "$TPSHARD" split "$src" --tp "$tp" --target vllm -o "$T/gpt_oss-vllm-$tp" -q
done
for tp in 2 4; do
    v="$T/gpt_oss-vllm-$tp"
    check "gpt_oss tp $tp --target vllm: check passes" "$TPSHARD" check "$v" -q
    check "gpt_oss tp $tp --target vllm: verify --layer all --source passes" "$TPSHARD" verify "$v" --source "$src" --layer all -q
    for from in "$T/gpt_oss-$tp" "$T/gpt_oss-vllm-$((6 - tp))"; do
        re="$T/gpt_oss-re-$tp"
        rm -rf "$re"
        if "$TPSHARD" reshard "$from" --tp "$tp" --target vllm -o "$re" -q 2>"$T/re.err" &&
            cmp -s "$re/model-rank-0-part-0.safetensors" "$v/model-rank-0-part-0.safetensors" &&
            cmp -s "$re/model-rank-1-part-0.safetensors" "$v/model-rank-1-part-0.safetensors"; then
            ok "gpt_oss: reshard $(basename "$from") --tp $tp --target vllm equals split --target vllm"
        else
            notok "gpt_oss: reshard $(basename "$from") --tp $tp --target vllm equals split --target vllm"
            sed 's/^/#   /' "$T/re.err" | head -5
        fi
    done
done
if grep -q '"target_rank0": true' "$T/gpt_oss-vllm-2/tpshard.json" &&
    [ "$(grep -c '"target_transpose": true' "$T/gpt_oss-vllm-2/tpshard.json")" -eq 4 ]; then
    ok "gpt_oss --target vllm: the manifest marks gate_up/down transposed and the down bias rank 0's"
else
    notok "gpt_oss --target vllm: the manifest marks gate_up/down transposed and the down bias rank 0's"
fi

# A refused tp names the constraint in the model's words: 8 heads (KV heads replicate).
expect_exit 3 "8 attention heads (one element each) along dimension 0: fewer than tp 16" \
    "gpt_oss tp 16: refused naming the heads the sinks are cut with" "$TPSHARD" plan "$src" --tp 16
expect_exit 3 "intermediate size 32 ((gate, up) pairs) along dimension 2: tp 3" \
    "gpt_oss tp 3: refused naming gate_up_proj's pairs" "$TPSHARD" plan "$src" --tp 3

# Wrong cuts whose bytes are intact: gate_up cut as if [gate | up] were concatenated halves
# (each rank gets gate and up columns of different intermediate columns), the sinks
# replicated instead of cut with the heads, the sinks cut in two interleaved halves (right
# shape, wrong heads), down_proj cut along hidden instead of intermediate.
halves='  - match: "model.layers.*.mlp.experts.{gate_up_proj,gate_up_proj_bias}"
    split: dim
    dim: -1
    segments:
      - {name: gate, size: intermediate}
      - {name: up, size: intermediate}'
sinks_rep='  - match: model.layers.*.self_attn.sinks
    split: replicate'
sinks_halves='  - match: model.layers.*.self_attn.sinks
    split: column
    segments:
      - {name: a, size: heads/2}
      - {name: b, size: heads/2}'
down_hidden='  - match: model.layers.*.mlp.experts.down_proj
    split: dim
    dim: 2'
for w in halves sinks_rep sinks_halves down_hidden; do
    eval "rule=\$$w"
    split_wrong "gpt_oss-$w" gpt_oss "$src" 2 "$rule" "$T/wrong-$w" || continue
    check "gpt_oss $w: check passes (the bytes are what the manifest says)" "$TPSHARD" check "$T/wrong-$w" -q
    expect_wrong_cut "" "gpt_oss $w: verify --layer all --source exits 1" \
        "$T/wrong-$w" --source "$src" --layer all
    expect_wrong_cut "" "gpt_oss $w: verify --whole-model --source exits 1" \
        "$T/wrong-$w" --source "$src" --whole-model
done

# With the interleaved layout a plain block cut (unit 1) is the paired cut wherever the
# intermediate size divides: the pairing matters for the tp it refuses, not the bytes.
plain='  - match: "model.layers.*.mlp.experts.{gate_up_proj,gate_up_proj_bias}"
    split: dim
    dim: -1'
if split_wrong "gpt_oss-plain" gpt_oss "$src" 4 "$plain" "$T/plain-4" &&
    cmp -s "$T/plain-4/model-rank-3-of-4.safetensors" "$T/gpt_oss-4/model-rank-3-of-4.safetensors"; then
    ok "gpt_oss: a plain cut of gate_up_proj at tp 4 is byte-identical to the paired one"
else
    notok "gpt_oss: a plain cut of gate_up_proj at tp 4 is byte-identical to the paired one"
    ls "$T/plain-4" "$T/gpt_oss-4" 2>&1 | sed 's/^/#   /'
fi

# The block's roles are checked: fused experts with an MLP role but no dense_prefix or
# shared_prefix to say whose it is (Llama 4's name both), or without experts_gate_up.
"$TPSHARD" layout --preset gpt_oss >g.yaml
sed 's/^    experts_down: mlp.experts.down_proj$/&\n    gate_proj: mlp.experts.gate_proj/' g.yaml >bad-roles.yaml
expect_exit 3 "and MLP roles need one of the prefixes" \
    "layout --check: fused experts beside an MLP role of no dense or shared MLP are refused" "$TPSHARD" layout --check bad-roles.yaml
sed '/^    experts_gate_up: /d' g.yaml >no-gate-up.yaml
expect_exit 3 "a block with fused experts needs roles experts_gate_up, experts_down and router" \
    "layout --check: fused experts without experts_gate_up are refused" "$TPSHARD" layout --check no-gate-up.yaml

# The cuda backend does not compute sinks or fused experts: it refuses (exit 5) rather than
# compute a layer without them; without a GPU it exits 5 before it gets there.
expect_exit 5 "cuda backend" "gpt_oss: verify --backend cuda exits 5" "$TPSHARD" verify "$T/gpt_oss-2" --backend cuda
