#!/bin/sh
# Quantized checkpoints (FP8 block [16, 16], compressed-tensors FP8 tensor and channel, a
# block-scaled Mixtral, DeepSeek-V3 and Qwen3-MoE in their releases' format) from
# testdata/gen_quant_fixtures.py, whose own quantizer is the
# independent truth.  At every legal tp: each rank's tensors equal the slices computed here
# from the engine's rules (vLLM's parameter classes: scales cut with their weight's rows or columns in blocks,
# KV replicas with their scale rows, per-channel scales of row-parallel layers and every
# per-tensor scalar replicated, lm_head unquantized and padded); check and verify pass.  A tp
# that puts a rank boundary inside a block is refused with the legal list; scale rows cut
# onto the wrong rank (right shapes) fail verify; merge is bit-exact; reshard 8 -> 4 equals
# split at 4; --dtype refuses FP8.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"
PY=/usr/bin/python3
M="$FIX/models"

# slices SET SRC TP: every rank's tensors against the expected slices of the source.
slices() {
    $PY - "$1" "$2" "$3" "$FIX" <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[4])
from gen_quant_fixtures import read_safetensors, cdiv
out, src, T = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = json.load(open(os.path.join(src, "config.json")))
qc = cfg["quantization_config"]
bn, bk = qc.get("weight_block_size", [1, 1])
nkv, hd = cfg["num_key_value_heads"], cfg["head_dim"]
S = read_safetensors(os.path.join(src, "model.safetensors"))
SIZE = {"F8_E4M3": 1, "BF16": 2, "F32": 4}

def rows(name, a, b, pad=0):
    dt, shape, data = S[name]
    w = SIZE[dt] * (shape[1] if len(shape) == 2 else 1)
    return data[a * w:b * w] + b"\0" * (pad * w)

def cols(name, a, b):
    dt, shape, data = S[name]
    e, w = SIZE[dt], SIZE[dt] * shape[1]
    return b"".join(data[r * w + a * e:r * w + b * e] for r in range(shape[0]))

def expect(name, r):
    dt, shape, data = S[name]
    module, leaf = name.rsplit(".", 1)
    kind = module.rsplit(".", 1)[-1]
    if leaf in ("input_scale", "output_scale") or (leaf == "weight_scale" and shape == [1]):
        return data  # per-tensor scalars: every rank, unchanged
    if module in ("model.embed_tokens", "lm_head"):
        per = cdiv(shape[0], T)
        a, b = min(r * per, shape[0]), min((r + 1) * per, shape[0])
        return rows(name, a, b, per - (b - a))
    if len(shape) == 1 or kind in ("gate", "q_a_proj", "kv_a_proj_with_mqa"):
        return data  # norms, the router, MLA's replicated down-projections with their whole scales
    scale = 1 if leaf == "weight" else bn if leaf == "weight_scale_inv" else 1
    cscale = 1 if leaf == "weight" else bk
    if kind in ("o_proj", "down_proj", "w2"):
        if leaf == "weight_scale" and shape[1] == 1:
            return data  # per-channel scale of a row-parallel layer: replicated
        n = shape[1] * cscale if leaf != "weight" else shape[1]
        return cols(name, r * n // T // cscale, (r + 1) * n // T // cscale)
    n = shape[0] * scale if leaf != "weight" else shape[0]
    if kind in ("k_proj", "v_proj") and T > nkv:
        s = r // (T // nkv)
        return rows(name, s * hd // scale, (s + 1) * hd // scale)
    return rows(name, r * n // T // scale, (r + 1) * n // T // scale)

bad = 0
for r in range(T):
    got = read_safetensors(os.path.join(out, "model-rank-%d-of-%d.safetensors" % (r, T)))
    if set(got) != set(S):
        print("rank %d tensors differ: %s" % (r, sorted(set(got) ^ set(S))[:4]))
        bad += 1
    for name in sorted(set(got) & set(S)):
        if got[name][2] != expect(name, r) or got[name][0] != S[name][0]:
            bad += 1
            if bad < 5:
                print("rank %d %s: %s %s differs from the expected slice" % (r, name, got[name][0], got[name][1]))
sys.exit(1 if bad else 0)
PY
}

for case in "tiny-llama-fp8 1 2 4 8" "tiny-llama-fp8-i96 1 2" "tiny-llama-fp8-ct-tensor 1 2 4 8" \
    "tiny-llama-fp8-ct-channel 1 2 4 8" "tiny-mixtral-fp8 1 2 4 8" "tiny-deepseek-v3-fp8 1 2 4" \
    "tiny-qwen3-moe-fp8 1 2 4 8"; do
    set -- $case
    f=$1
    shift
    legal=$(echo "$@" | sed 's/ /, /g')
    for tp in "$@"; do
        out="$T/$f-$tp"
        if ! "$TPSHARD" split "$M/$f" --tp "$tp" -o "$out" -q >"$T/.out" 2>&1; then
            notok "$f tp $tp: split"
            sed 's/^/#   /' "$T/.out" | head -5
            continue
        fi
        check "$f tp $tp: every rank's tensors are the expected slices (scales with their weights)" slices "$out" "$M/$f" "$tp"
        check "$f tp $tp: check passes" "$TPSHARD" check "$out" -q
        check "$f tp $tp: verify --layer all dequantizes and passes" "$TPSHARD" verify "$out" --source "$M/$f" --layer all -q
    done
    # The next tps beyond the legal ones: refused, naming what fails and the legal list.
    last=$(echo "$@" | awk '{print $NF}')
    expect_exit 3 "tp values that fit: $legal" "$f tp $((last * 2)): refused with the tp values that fit" \
        "$TPSHARD" plan "$M/$f" --tp $((last * 2))
done

# The releases as deployed (DeepSeek-V3/R1, Qwen3-MoE-FP8: a quantization_config naming no
# unquantized module): split auto-detects the preset and --whole-model dequantizes every
# layer.  DeepSeek's q head is 12 rows, 1.5 blocks of 8: tp 8 leaves a rank 12 q_b_proj rows.
for c in "tiny-deepseek-v3-fp8 deepseek_v3 1 2 4" "tiny-qwen3-moe-fp8 qwen3_moe 1 2 4 8"; do
    set -- $c
    f=$1 p=$2
    shift 2
    for tp in "$@"; do
        "$TPSHARD" split "$M/$f" --tp "$tp" -o "$T/$f-auto-$tp" >/dev/null 2>"$T/.out" &&
            grep -q "layout: preset $p, from $M/$f/config.json" "$T/.out" &&
            ok "$f tp $tp: split chooses preset $p from config.json" ||
            { notok "$f tp $tp: split chooses preset $p from config.json"; sed 's/^/#   /' "$T/.out" | head -5; }
        check "$f tp $tp: verify --whole-model passes" "$TPSHARD" verify "$T/$f-auto-$tp" --source "$M/$f" --whole-model -q
    done
done
expect_exit 3 "FP8 block [8, 8]: 96 output features / tp 8 = 12 a rank, not a multiple of 8" \
    "deepseek fp8 tp 8: refused, q_b_proj's head rows split a block of 8" "$TPSHARD" plan "$M/tiny-deepseek-v3-fp8" --tp 8
grep -qF "model.layers.{0..1}.self_attn.q_b_proj.weight; rule" "$T/.err" && grep -q "tp values that fit: 1, 2, 4$" "$T/.err" &&
    ok "deepseek fp8 tp 8: the refusal names q_b_proj and lists tp 1, 2, 4" ||
    { notok "deepseek fp8 tp 8: the refusal names q_b_proj and lists tp 1, 2, 4"; sed 's/^/#   /' "$T/.err"; }
# q_b_proj's scale rows dealt in two interleaved halves at tp 2 (rank 1 holds scale rows 3-5
# and 9-11 where its weight rows need 6-11): intact bytes, a wrong dequantization.
if split_wrong ds-fp8-scale deepseek_v3 "$M/tiny-deepseek-v3-fp8" 2 '  - match: model.layers.*.self_attn.q_b_proj.weight_scale_inv
    split: column
    segments:
      - {name: a, size: heads*(qk_nope_head_dim+qk_rope_head_dim)/16}
      - {name: b, size: heads*(qk_nope_head_dim+qk_rope_head_dim)/16}' "$T/ds-wrong"; then
    check "deepseek fp8 wrong q_b_proj scale rows: check passes (intact bytes)" "$TPSHARD" check "$T/ds-wrong" -q
    expect_wrong_cut "q_b_proj.weight_scale_inv) does not fit its weight slice" \
        "deepseek fp8 wrong q_b_proj scale rows: verify --layer all fails (exit 1) naming the scale" \
        "$T/ds-wrong" --source "$M/tiny-deepseek-v3-fp8" --layer all
    expect_wrong_cut "q_b_proj.weight_scale_inv) does not fit" "deepseek fp8 wrong q_b_proj scale rows: verify --whole-model fails (exit 1)" \
        "$T/ds-wrong" --source "$M/tiny-deepseek-v3-fp8" --whole-model
fi

# The engine's reason, in numbers: intermediate 96 at tp 4 is 24 rows a rank, not whole
# 16-row blocks (Llama-2's 11008 at tp 4: 2752, not whole 128-row blocks); gate/up and down
# are the causes, their scales are not listed again.
expect_exit 3 "FP8 block [16, 16]: 96 output features / tp 4 = 24 a rank, not a multiple of 16" \
    "fp8 block: a boundary inside a block of gate/up is refused naming the local size and the block" \
    "$TPSHARD" plan "$M/tiny-llama-fp8-i96" --tp 4
if grep -q "weight_scale_inv" "$T/.err" || [ "$(grep -c 'FP8 block \[16, 16\]' "$T/.err")" -ne 2 ]; then
    notok "fp8 block: the refusal lists gate/up and down once each, not their scales"
    sed 's/^/#   /' "$T/.err"
else
    ok "fp8 block: the refusal lists gate/up and down once each, not their scales"
fi
expect_exit 3 "model.layers.{0..1}.mlp.down_proj.weight" "fp8 block: the refusal names the tensors" \
    "$TPSHARD" split "$M/tiny-llama-fp8-i96" --tp 4 -o "$T/never"
[ -e "$T/never" ] && notok "a refused split leaves no output" || ok "a refused split leaves no output"
"$TPSHARD" plan "$M/tiny-llama-fp8-i96" --tp 8 --json >"$T/plan.json" 2>/dev/null
if $PY -c "
import json, sys
j = json.load(open(sys.argv[1]))
p = [g for g in j['problems'] if g.get('issue') == 'inside_quantization_block']
assert j['tp_values_that_fit'] == [1, 2] and len(p) == 2 and all(g['block'] == 16 and g['local_size'] == 12 for g in p), j
" "$T/plan.json"; then ok "plan --json: the block, the local size and the tp values that fit"
else notok "plan --json: the block, the local size and the tp values that fit"; fi

# inspect and the manifest say the scheme.
"$TPSHARD" inspect "$T/tiny-llama-fp8-2" >"$T/inspect" 2>&1
grep -q "quantization: fp8 (block \[16, 16\]); not quantized: lm_head" "$T/inspect" && ok "inspect shows the scheme" ||
    { notok "inspect shows the scheme"; head -5 "$T/inspect" | sed 's/^/#   /'; }
"$TPSHARD" inspect "$M/tiny-llama-fp8-ct-channel" >"$T/inspect" 2>&1
grep -q "quantization: compressed-tensors (fp8 channel); not quantized: lm_head" "$T/inspect" &&
    ok "inspect of a checkpoint shows its scheme" || { notok "inspect of a checkpoint shows its scheme"; head -5 "$T/inspect" | sed 's/^/#   /'; }

# Scale rows on the wrong rank, shapes right: gate_proj's scale cut in two interleaved halves
# (rank 0 holds scale rows 0-1 and 4-5 where its weight rows need 0-3).  check passes (the
# bytes are what the manifest says), verify fails naming the MLP stage and gate_proj's scale.
if split_wrong fp8-scale-rows llama "$M/tiny-llama-fp8" 2 '  - match: model.layers.*.mlp.gate_proj.weight_scale_inv
    split: column
    segments:
      - {name: a, size: intermediate/32}
      - {name: b, size: intermediate/32}' "$T/wrong"; then
    check "wrong scale rows: check passes (intact bytes)" "$TPSHARD" check "$T/wrong" -q
    expect_wrong_cut "mismatch in layer 0, mlp stage" "wrong scale rows: verify fails (exit 1) in the MLP" \
        "$T/wrong" --source "$M/tiny-llama-fp8" --layer 0
    grep -qF "rank 0's model.layers.0.mlp.gate_proj dequantizes to other values" "$T/.err" &&
        grep -qF "its scale on rank 0 (model.layers.0.mlp.gate_proj.weight_scale_inv)" "$T/.err" &&
        ok "wrong scale rows: verify names the rank's weight_scale_inv" ||
        { notok "wrong scale rows: verify names the rank's weight_scale_inv"; sed 's/^/#   /' "$T/.err" | head -5; }
fi

# A checkpoint that quantizes lm_head too (compressed-tensors channel, nothing ignored):
# --whole-model dequantizes the head on both sides (a raw F8 head would compare codes, not
# values), so its per-channel scale rows dealt to the wrong rank fail the logits.
for tp in 1 2 4; do
    check "fp8 lm_head tp $tp: split" "$TPSHARD" split "$M/tiny-llama-fp8-head" --tp "$tp" -o "$T/head-$tp" -q &&
        check "fp8 lm_head tp $tp: verify --whole-model passes (head dequantized)" \
            "$TPSHARD" verify "$T/head-$tp" --source "$M/tiny-llama-fp8-head" --whole-model -q
done
if split_wrong fp8-head-scale llama "$M/tiny-llama-fp8-head" 2 '  - match: lm_head.weight_scale
    split: column
    segments:
      - {name: a, size: vocab/2}
      - {name: b, size: vocab/2}' "$T/wrong-head"; then
    check "lm_head scale rows on the wrong rank: check passes (intact bytes)" "$TPSHARD" check "$T/wrong-head" -q
    expect_wrong_cut "logits" "lm_head scale rows on the wrong rank: verify --whole-model fails (exit 1) in the logits" \
        "$T/wrong-head" --source "$M/tiny-llama-fp8-head" --whole-model
fi

# merge is bit-exact; reshard 8 -> 4 gives what split at 4 gives.
for f in tiny-llama-fp8 tiny-llama-fp8-ct-tensor tiny-mixtral-fp8; do
    if "$TPSHARD" merge "$T/$f-4" -o "$T/$f-merged.safetensors" -q &&
        $PY -c "
import sys; sys.path.insert(0, sys.argv[3])
from gen_quant_fixtures import read_safetensors
sys.exit(read_safetensors(sys.argv[1]) != read_safetensors(sys.argv[2]))" "$T/$f-merged.safetensors" "$M/$f/model.safetensors" "$FIX"; then
        ok "$f: merge of the tp 4 set is bit-exact"
    else notok "$f: merge of the tp 4 set is bit-exact"; fi
    if "$TPSHARD" reshard "$T/$f-8" --tp 4 -o "$T/$f-r4" -q; then
        same=yes
        for r in 0 1 2 3; do
            cmp -s "$T/$f-r4/model-rank-$r-of-4.safetensors" "$T/$f-4/model-rank-$r-of-4.safetensors" || same=no
        done
        [ $same = yes ] && ok "$f: reshard 8 -> 4 equals split at 4" || notok "$f: reshard 8 -> 4 equals split at 4"
        check "$f: reshard 8 -> 4 passes verify" "$TPSHARD" verify "$T/$f-r4" --source "$M/$f" --layer all -q
    else notok "$f: reshard 8 -> 4"; fi
done
expect_exit 3 "tp values that fit: 1, 2, 4, 8" "reshard 8 -> 3 of the block-scaled set is refused (exit 3)" "$TPSHARD" reshard "$T/tiny-llama-fp8-8" --tp 3 -o "$T/r3"

expect_exit 3 "is F8_E4M3, which does not convert" "--dtype refuses FP8 weights" \
    "$TPSHARD" split "$M/tiny-llama-fp8" --tp 2 --dtype bf16 -o "$T/dt"

# Formats the engines themselves refuse to pre-shard.
mkdir -p "$T/bnb" "$T/gptq"
cp "$M/tiny-llama/model.safetensors" "$T/bnb/" && cp "$M/tiny-llama/model.safetensors" "$T/gptq/"
sed 's/"vocab_size"/"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true}, "vocab_size"/' \
    "$M/tiny-llama/config.json" >"$T/bnb/config.json"
sed 's/"vocab_size"/"quantization_config": {"quant_method": "gptq", "bits": 3, "group_size": 128}, "vocab_size"/' \
    "$M/tiny-llama/config.json" >"$T/gptq/config.json"
expect_exit 3 "Prequant BitsAndBytes models with tensor parallelism is not supported" \
    "bitsandbytes: refused with the engine's reason" "$TPSHARD" plan "$T/bnb" --tp 2
expect_exit 3 "3-bit packs 32 values into 3 words" "gptq 3-bit: refused with the reason" "$TPSHARD" plan "$T/gptq" --tp 2

# The worked tables of the quantization spec (Llama-3-8B, intermediate 11008) on header-only checkpoints (the
# data a sparse hole; plan reads headers): Llama-3-8B (hidden 4096, 32 heads, 8 KV heads of
# 128, intermediate 14336) and a Llama-2-7B shape (intermediate 11008 = 86 blocks of 128, 32
# KV heads), FP8 block [128, 128] and compressed-tensors channel, two layers of each.
header() { # DIR INTERMEDIATE KV SCHEME
    mkdir -p "$1"
    $PY - "$@" "$FIX" <<'PY'
import json, sys
d, inter, kv, scheme = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, sys.argv[5])
from gen_quant_fixtures import cdiv, fp8_block_config, ct_config
h, heads, hd, vocab, layers = 4096, 32, 128, 128256, 2
t = [("model.embed_tokens.weight", "BF16", [vocab, h]), ("model.norm.weight", "BF16", [h]),
     ("lm_head.weight", "BF16", [vocab, h])]
for i in range(layers):
    p = "model.layers.%d." % i
    t += [(p + "input_layernorm.weight", "BF16", [h]), (p + "post_attention_layernorm.weight", "BF16", [h])]
    for name, shape in [("self_attn.q_proj", [heads * hd, h]), ("self_attn.k_proj", [kv * hd, h]),
                        ("self_attn.v_proj", [kv * hd, h]), ("self_attn.o_proj", [h, heads * hd]),
                        ("mlp.gate_proj", [inter, h]), ("mlp.up_proj", [inter, h]), ("mlp.down_proj", [h, inter])]:
        t.append((p + name + ".weight", "F8_E4M3", shape))
        if scheme == "block":
            t.append((p + name + ".weight_scale_inv", "F32", [cdiv(shape[0], 128), cdiv(shape[1], 128)]))
        else:
            t.append((p + name + ".weight_scale", "BF16", [shape[0], 1]))
import gen_fixtures
gen_fixtures.write_header_only(d, t)
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
           "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "intermediate_size": inter,
           "vocab_size": vocab, "num_hidden_layers": layers,
           "quantization_config": fp8_block_config((128, 128)) if scheme == "block" else ct_config("channel", False)},
          open(d + "/config.json", "w"))
PY
}
header "$T/l3-8b-fp8" 14336 8 block && header "$T/l2-7b-fp8" 11008 32 block &&
    header "$T/l3-8b-ch" 14336 8 channel && header "$T/l2-7b-ch" 11008 32 channel ||
    notok "generating the header-only checkpoints"
expect_exit 3 "tp values that fit: 1, 2, 4, 8, 16" "Llama-3-8B FP8 block 128: tp 1, 2, 4, 8, 16 (quant.md 1.4)" \
    "$TPSHARD" plan "$T/l3-8b-fp8" --tp 32
expect_exit 3 "FP8 block [128, 128]: 11008 input features / tp 4 = 2752 a rank, not a multiple of 128" \
    "intermediate 11008 FP8 block 128 at tp 4: 2752 rows a rank (quant.md 1.5)" "$TPSHARD" plan "$T/l2-7b-fp8" --tp 4
grep -q "tp values that fit: 1, 2$" "$T/.err" && ok "intermediate 11008 FP8 block 128: only tp 1 and 2 fit" ||
    { notok "intermediate 11008 FP8 block 128: only tp 1 and 2 fit"; tail -1 "$T/.err" | sed 's/^/#   /'; }
check "intermediate 11008 FP8 block 128 at tp 2 fits (5504 = 43 blocks)" "$TPSHARD" plan "$T/l2-7b-fp8" --tp 2 -q
check "intermediate 11008 compressed-tensors channel at tp 32 fits (no block constraint, quant.md 2.4)" \
    "$TPSHARD" plan "$T/l2-7b-ch" --tp 32 -q
check "Llama-3-8B compressed-tensors channel at tp 32 fits (KV heads replicated)" "$TPSHARD" plan "$T/l3-8b-ch" --tp 32 -q
# Per-rank shapes of the 1.4 table: tp 8 k scale one row, down scale 14 columns; tp 16 the
# KV head and its scale row are replicas; channel o_proj scale replicated whole.
shape_of() { # SET TP TENSOR -> rank 0's shape
    "$TPSHARD" plan "$1" --tp "$2" --json 2>/dev/null | $PY -c "
import json, sys
j = json.load(sys.stdin)
print([t['rank_shapes'][0] for t in j['tensors'] if t['name'] == sys.argv[1]][0])" "$3"
}
for c in "l3-8b-fp8 8 model.layers.0.self_attn.k_proj.weight_scale_inv [1, 32]" \
    "l3-8b-fp8 8 model.layers.0.mlp.down_proj.weight_scale_inv [32, 14]" \
    "l3-8b-fp8 4 model.layers.0.mlp.gate_proj.weight_scale_inv [28, 32]" \
    "l3-8b-fp8 16 model.layers.0.self_attn.v_proj.weight_scale_inv [1, 32]" \
    "l3-8b-fp8 16 model.layers.0.self_attn.q_proj.weight_scale_inv [2, 32]" \
    "l2-7b-fp8 2 model.layers.0.mlp.down_proj.weight_scale_inv [32, 43]" \
    "l3-8b-ch 8 model.layers.0.self_attn.o_proj.weight_scale [4096, 1]" \
    "l3-8b-ch 8 model.layers.0.self_attn.k_proj.weight_scale [128, 1]"; do
    set -- $c
    want=$(echo "$c" | cut -d' ' -f4-)
    got=$(shape_of "$T/$1" "$2" "$3")
    [ "$got" = "$want" ] && ok "$1 tp $2: $3 is $want on a rank" || notok "$1 tp $2: $3 is $want on a rank (got $got)"
done

# A serving-engine target fuses only the weights: a quantized set under it would keep its
# scales under source names beside a fused qkv_proj, which no engine loads.  Refused, nothing written.
for f in tiny-llama-fp8 tiny-llama-gptq; do
    expect_exit 3 "this checkpoint is quantized" "$f: split --target vllm is refused (the mappings fuse no scales)" \
        "$TPSHARD" split "$M/$f" --tp 2 --target vllm -o "$T/$f-vllm"
    if [ -e "$T/$f-vllm" ]; then notok "$f: nothing written for the refused --target vllm"; else
        ok "$f: nothing written for the refused --target vllm"; fi
done
"$TPSHARD" split "$M/tiny-llama-fp8" --tp 2 -o "$T/fp8-for-target" -q
expect_exit 3 "this checkpoint is quantized" "reshard --target vllm of a quantized set is refused" \
    "$TPSHARD" reshard "$T/fp8-for-target" --tp 2 --target vllm -o "$T/fp8-target-out"
