#!/bin/sh
# GPTQ and AWQ fixtures (testdata/gen_quant_int.py): split with the preset from config.json,
# check and verify (dequantized) at every legal tp, the refused tps listed, and scale rows on
# the wrong rank (right shapes, intact bytes) caught by verify (exit 1) while check passes.
# The per-rank pieces against the engine's rules, the torch forward, merge and reshard:
# tests/interop/quant/debian/test_quant_int.py.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"
PY=/usr/bin/python3

for fx in "tiny-llama-gptq 1 2 4 8" "tiny-llama-gptq-actorder 1 2 4" "tiny-llama-awq 1 2" "tiny-mixtral-gptq 1 2 4" \
    "tiny-mixtral-awq 1 2"; do
    set -- $fx
    fxn=$1
    shift
    legal=$(echo "$@" | sed 's/ /, /g')
    for tp in "$@"; do
        out="$T/$fxn-$tp"
        check "$fxn tp $tp: split" "$TPSHARD" split "$M/$fxn" --tp "$tp" -o "$out" -q || continue
        check "$fxn tp $tp: check passes" "$TPSHARD" check "$out" -q
        check "$fxn tp $tp: verify --source --layer all passes (dequantized)" \
            "$TPSHARD" verify "$out" --source "$M/$fxn" --layer all -q
        check "$fxn tp $tp: verify --whole-model passes" "$TPSHARD" verify "$out" --whole-model -q
    done
    expect_exit 3 "tp values that fit: $legal" "$fxn tp 16: refused, listing $legal" \
        "$TPSHARD" plan "$M/$fxn" --tp 16
done

# intermediate 192 in groups of 32 (the shape of 11008 in groups of 128): tp 4 leaves 48 input
# rows of down_proj a rank, inside a group.
expect_exit 3 "AWQ group size 32: 192 input features / tp 4 = 48 a rank, not a multiple of 32" \
    "awq tp 4: down_proj refused naming the local size and the group" "$TPSHARD" plan "$M/tiny-llama-awq" --tp 4
# GPTQ in its config's words: group_size 16 (tiny-llama-gptq's config.json), o_proj's 128 input
# features (hidden 128) at tp 16 leave 8 a rank; the tps that fit follow.
expect_exit 3 "GPTQ group size 16: 128 input features / tp 16 = 8 a rank, not a multiple of 16" \
    "gptq tp 16: o_proj refused in group size and input features" "$TPSHARD" plan "$M/tiny-llama-gptq" --tp 16
grep -qF "tp values that fit: 1, 2, 4, 8" "$T/.err" && ok "gptq tp 16: the tps that fit follow" ||
    { notok "gptq tp 16: the tps that fit follow"; sed 's/^/#   /' "$T/.err" | head -5; }
# The same shape per expert of an AWQ Mixtral: every expert's w2 refused at tp 4, the tps that fit listed.
expect_exit 3 "8 tensors: model.layers.{0..1}.block_sparse_moe.experts.{0..3}.w2.qweight" \
    "mixtral awq tp 4: every expert's w2 refused" "$TPSHARD" split "$M/tiny-mixtral-awq" --tp 4 -o "$T/mixtral-awq-4"
grep -qF "AWQ group size 32: 192 input features / tp 4 = 48 a rank, not a multiple of 32" "$T/.err" &&
    grep -qF "tp values that fit: 1, 2" "$T/.err" && ok "mixtral awq tp 4: the refusal names 48, the group 32 and tps 1, 2" ||
    { notok "mixtral awq tp 4: the refusal names 48, the group 32 and tps 1, 2"; sed 's/^/#   /' "$T/.err" | head -5; }
# An expert's scale columns dealt as two interleaved halves: verify names that expert's tensors.
moe_scales='  - match: model.layers.*.block_sparse_moe.experts.1.w1.scales
    split: dim
    dim: 1
    segments:
      - {name: a, size: intermediate/2}
      - {name: b, size: intermediate/2}'
if split_wrong "mixtral-awq-scales" mixtral "$M/tiny-mixtral-awq" 2 "$moe_scales" "$T/wrong-moe-scales"; then
    check "mixtral awq expert scales halves: check passes" "$TPSHARD" check "$T/wrong-moe-scales" -q
    expect_wrong_cut "experts.1.w1 dequantizes to other values than the reference's slice of it (its weight's rows and columns as the manifest cuts them): its scale/zero tensors on rank 0 (model.layers.0.block_sparse_moe.experts.1.w1.scales" \
        "mixtral awq expert scales halves: verify exits 1 naming expert 1's w1 scales" \
        "$T/wrong-moe-scales" --source "$M/tiny-mixtral-awq" --layer all
fi

# Wrong cuts whose bytes are intact: down_proj's group rows dealt as two interleaved halves
# (rank 0 holds groups 0-3 and 8-11 where it needs 0-7), q_proj's scale columns likewise, AWQ's
# q_proj qzeros words likewise.
down_scales='  - match: model.layers.*.mlp.down_proj.scales
    split: dim
    dim: 0
    segments:
      - {name: a, size: intermediate/32}
      - {name: b, size: intermediate/32}'
q_scales='  - match: model.layers.*.self_attn.q_proj.scales
    split: dim
    dim: 1
    segments:
      - {name: a, size: hidden/2}
      - {name: b, size: hidden/2}'
for w in down_scales q_scales; do
    eval "rule=\$$w"
    split_wrong "gptq-$w" llama "$M/tiny-llama-gptq" 2 "$rule" "$T/wrong-$w" || continue
    check "gptq $w: check passes (the bytes are what the manifest says)" "$TPSHARD" check "$T/wrong-$w" -q
    case $w in down_scales) mod=mlp.down_proj ;; *) mod=self_attn.q_proj ;; esac
    expect_wrong_cut "rank 0's model.layers.0.$mod dequantizes to other values" \
        "gptq $w: verify --layer all --source exits 1 naming the linear" \
        "$T/wrong-$w" --source "$M/tiny-llama-gptq" --layer all
    grep -qF "model.layers.0.$mod.scales, model.layers.0.$mod.qzeros, model.layers.0.$mod.g_idx) do not fit" "$T/.err" &&
        ok "gptq $w: verify names the scale/zero tensors on rank 0" ||
        { notok "gptq $w: verify names the scale/zero tensors on rank 0"; sed 's/^/#   /' "$T/.err" | head -5; }
done
awq_zeros='  - match: model.layers.*.self_attn.q_proj.qzeros
    split: dim
    dim: 1
    segments:
      - {name: a, size: hidden/16}
      - {name: b, size: hidden/16}'
if split_wrong "awq-zeros" llama "$M/tiny-llama-awq" 2 "$awq_zeros" "$T/wrong-awq-zeros"; then
    check "awq zeros halves: check passes" "$TPSHARD" check "$T/wrong-awq-zeros" -q
    expect_wrong_cut "its scale/zero tensors on rank 0 (model.layers.0.self_attn.q_proj.scales, model.layers.0.self_attn.q_proj.qzeros)" \
        "awq zeros halves: verify --layer all --source exits 1 naming q_proj's scales and qzeros" \
        "$T/wrong-awq-zeros" --source "$M/tiny-llama-awq" --layer all
fi
# Act-order: o_proj's g_idx whole on every rank instead of cut with the input rows: the rank's
# pieces do not fit together, and verify names the tensor.
gidx_rep='  - match: model.layers.*.self_attn.o_proj.g_idx
    split: replicate'
if split_wrong "actorder-gidx" llama "$M/tiny-llama-gptq-actorder" 2 "$gidx_rep" "$T/wrong-gidx"; then
    expect_wrong_cut "o_proj.g_idx" "act-order g_idx replicated on a row layer: verify exits 1 naming it" \
        "$T/wrong-gidx" --source "$M/tiny-llama-gptq-actorder" --layer all
fi

# The worked tables of the quantization spec (3.4, 3.5, 4.4, 4.5) on header-only checkpoints
# (the data a sparse hole; plan reads headers): Llama-3-8B (hidden 4096, 32 heads, 8 KV heads
# of 128, intermediate 14336) and the Llama-2-7B shape (intermediate 11008 = 86 groups of 128,
# 32 KV heads), 4-bit group 128, two layers each.
qheader() { # DIR INTERMEDIATE KV METHOD DESC_ACT
    mkdir -p "$1"
    $PY - "$@" "$FIX" <<'PY'
import json, sys
d, inter, kv, method, act = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
h, heads, hd, vocab, layers, g = 4096, 32, 128, 128256, 2, 128
t = [("model.embed_tokens.weight", "F16", [vocab, h]), ("model.norm.weight", "F16", [h]),
     ("lm_head.weight", "F16", [vocab, h])]
for i in range(layers):
    p = "model.layers.%d." % i
    t += [(p + "input_layernorm.weight", "F16", [h]), (p + "post_attention_layernorm.weight", "F16", [h])]
    for name, out, inp in [("self_attn.q_proj", heads * hd, h), ("self_attn.k_proj", kv * hd, h),
                           ("self_attn.v_proj", kv * hd, h), ("self_attn.o_proj", h, heads * hd),
                           ("mlp.gate_proj", inter, h), ("mlp.up_proj", inter, h), ("mlp.down_proj", h, inter)]:
        G = -(-inp // g)
        if method == "gptq":
            t += [(p + name + ".qweight", "I32", [inp // 8, out]), (p + name + ".g_idx", "I32", [inp])]
        else:
            t.append((p + name + ".qweight", "I32", [inp, out // 8]))
        t += [(p + name + ".qzeros", "I32", [G, out // 8]), (p + name + ".scales", "F16", [G, out])]
sys.path.insert(0, sys.argv[6])
import gen_fixtures
gen_fixtures.write_header_only(d, t)
qc = {"quant_method": method, "bits": 4, "group_size": g}
qc.update({"desc_act": act, "sym": True} if method == "gptq" else {"zero_point": True, "version": "gemm"})
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
           "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "intermediate_size": inter,
           "vocab_size": vocab, "num_hidden_layers": layers, "quantization_config": qc}, open(d + "/config.json", "w"))
PY
}
qheader "$T/l3-gptq" 14336 8 gptq 0 && qheader "$T/l3-gptq-act" 14336 8 gptq 1 && qheader "$T/l3-awq" 14336 8 awq 0 &&
    qheader "$T/l2-gptq" 11008 32 gptq 0 && qheader "$T/l2-awq" 11008 32 awq 0 ||
    notok "generating the header-only GPTQ/AWQ checkpoints"
for s in l3-gptq l3-gptq-act l3-awq; do
    expect_exit 3 "tp values that fit: 1, 2, 4, 8, 16" "Llama-3-8B $s g 128: tp 1, 2, 4, 8, 16" "$TPSHARD" plan "$T/$s" --tp 32
done
for s in l2-gptq l2-awq; do
    expect_exit 3 "tp values that fit: 1, 2" "intermediate 11008 $s g 128: only tp 1 and 2 fit" "$TPSHARD" plan "$T/$s" --tp 4
done
grep -q "down_proj" "$T/.err" && ok "intermediate 11008 awq at tp 4: the refusal names down_proj" ||
    notok "intermediate 11008 awq at tp 4: the refusal names down_proj"
qshape() { # SET TP TENSOR -> rank 0's shape
    "$TPSHARD" plan "$1" --tp "$2" --json 2>/dev/null | python3 -c "
import json, sys
j = json.load(sys.stdin)
print([t['rank_shapes'][0] for t in j['tensors'] if t['name'] == sys.argv[1]][0])" "$3"
}
L=model.layers.0
for c in "l3-gptq 4 $L.self_attn.q_proj.qweight [512, 1024]" "l3-gptq 4 $L.self_attn.q_proj.qzeros [32, 128]" \
    "l3-gptq 4 $L.self_attn.k_proj.scales [32, 256]" "l3-gptq 8 $L.mlp.gate_proj.qzeros [32, 224]" \
    "l3-gptq 4 $L.mlp.up_proj.g_idx [4096]" "l3-gptq 4 $L.self_attn.o_proj.qweight [128, 4096]" \
    "l3-gptq 4 $L.self_attn.o_proj.g_idx [1024]" "l3-gptq 4 $L.self_attn.o_proj.scales [8, 4096]" \
    "l3-gptq 8 $L.mlp.down_proj.qweight [224, 4096]" "l3-gptq 8 $L.mlp.down_proj.qzeros [14, 512]" \
    "l3-gptq-act 4 $L.self_attn.o_proj.scales [32, 4096]" "l3-gptq-act 4 $L.mlp.down_proj.qzeros [112, 512]" \
    "l3-gptq-act 4 $L.mlp.down_proj.g_idx [3584]" \
    "l3-awq 4 $L.self_attn.q_proj.qweight [4096, 128]" "l3-awq 8 $L.self_attn.k_proj.qzeros [32, 16]" \
    "l3-awq 4 $L.mlp.gate_proj.scales [32, 3584]" "l3-awq 4 $L.self_attn.o_proj.qweight [1024, 512]" \
    "l3-awq 8 $L.mlp.down_proj.scales [14, 4096]" "l2-gptq 2 $L.mlp.down_proj.qweight [688, 4096]" \
    "l2-awq 2 $L.mlp.down_proj.qzeros [43, 512]"; do
    set -- $c
    want=$(echo "$c" | cut -d' ' -f4-)
    got=$(qshape "$T/$1" "$2" "$3")
    [ "$got" = "$want" ] && ok "$1 tp $2: $3 is $want on a rank" || notok "$1 tp $2: $3 is $want on a rank (got $got)"
done

# Marlin's tile (the quantization spec 3.3, 4.3: a rank's output a multiple of 64, its input of 128) is a
# kernel's minimum, not the checkpoint's: a legal cut that misses it is noted, never refused.
# tiny-llama-gptq (hidden 128, k/v 32 wide) at tp 2: k_proj and v_proj keep 16 outputs a rank,
# o_proj 64 inputs, in both layers (6); q_proj 64, gate/up 128 and down 128 fit.
expect_exit 0 "note: 6 GPTQ/AWQ tensors leave a rank a piece vLLM's Marlin kernels do not tile (output a multiple of 64, input of 128 a rank), e.g. model.layers.0.self_attn.k_proj.qweight: output 16 a rank; vLLM then pads the tile or falls back to a slower kernel" \
    "gptq tp 2: plan notes the 6 linears Marlin does not tile, exit 0" "$TPSHARD" plan "$M/tiny-llama-gptq" --tp 2
cp "$T/.out" "$T/plan-noted.out"
"$TPSHARD" plan "$M/tiny-llama-gptq" --tp 2 -q >"$T/plan-q.out" 2>"$T/plan-q.err" && [ ! -s "$T/plan-q.err" ] &&
    cmp -s "$T/plan-q.out" "$T/plan-noted.out" && ok "gptq tp 2: -q silences the note; the plan is the same" ||
    notok "gptq tp 2: -q silences the note; the plan is the same"
"$TPSHARD" plan "$M/tiny-llama-gptq" --tp 2 --json 2>/dev/null | python3 -c "
import json, sys
n = json.load(sys.stdin)['notes']
sys.exit(not (len(n) == 1 and n[0].startswith('6 GPTQ/AWQ tensors') and 'k_proj.qweight: output 16' in n[0]))" &&
    ok "gptq tp 2: plan --json has the note in notes" || notok "gptq tp 2: plan --json has the note in notes"
# AWQ's down_proj at tp 2: 192 / 2 = 96 input rows a rank, not a multiple of 128.
expect_exit 0 "e.g. model.layers.0.mlp.down_proj.qweight: input 96 a rank" "awq tp 2: split notes down_proj's 96 inputs, exit 0" \
    "$TPSHARD" split "$M/tiny-llama-awq" --tp 2 -o "$T/awq-noted"
check "awq tp 2: the noted split passes check" "$TPSHARD" check "$T/awq-noted" -q
expect_exit 0 "" "gptq tp 1: nothing cut, no note" "$TPSHARD" plan "$M/tiny-llama-gptq" --tp 1
grep -q "note:" "$T/.err" && notok "gptq tp 1: no note (got one)" || ok "gptq tp 1: no note"
# Llama-3-8B at tp 8 and 16 (3.4's Marlin checks: N 768/3584, K 512/1792, and at 16 N 384/64/896,
# K 256/896) and the 11008 shape at tp 2 (K 5504 = 43 * 128): every piece tiles, no note.
for c in "l3-gptq 8" "l3-awq 16" "l3-gptq-act 16" "l2-gptq 2" "l2-awq 2"; do
    set -- $c
    expect_exit 0 "" "$1 tp $2: no Marlin note" "$TPSHARD" plan "$T/$1" --tp "$2"
    grep -q "note:" "$T/.err" && notok "$1 tp $2: no note (got one)" || ok "$1 tp $2: no note on stderr"
    "$TPSHARD" plan "$T/$1" --tp "$2" --json 2>/dev/null |
        python3 -c "import json, sys; sys.exit(json.load(sys.stdin)['notes'] != [])" &&
        ok "$1 tp $2: plan --json notes is empty" || notok "$1 tp $2: plan --json notes is empty"
done
