#!/bin/sh
# GPT-OSS as released in MXFP4, at gpt-oss-120b's real sizes (hidden 2880, intermediate 2880 =
# 90 blocks of 32, 128 experts, 64 heads, 8 KV heads; one layer, header-only: the data is a
# sparse hole, plan reads headers alone).  vLLM's rule (models/gpt_oss.py _load_weights_mxfp4,
# computed here): cdiv(90, T) blocks a rank, the last rank the rest, so tp 8 gives seven ranks
# 12 blocks and the last 6, tp 4 gives 23, 23, 23, 21; tp 16 (6 a rank) would leave rank 15
# nothing and is refused naming the numbers.  Values, merge, reshard and verify:
# tests/interop/quant/torch2/torch2_mxfp4.py; vLLM's own loader: tests/interop/vllm/real/vllm_real_mxfp4_slices.py.
. "$TPS_TOP/tests/cli/lib.sh"
PY=/usr/bin/python3
src="$T/gpt-oss-120b-1layer"
mkdir -p "$src"
$PY - "$src" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
H, I, E, V, nh, kv, hd = 2880, 2880, 128, 201088, 64, 8, 64
p = "model.layers.0."
t = {"model.embed_tokens.weight": ("BF16", [V, H]), "lm_head.weight": ("BF16", [V, H]), "model.norm.weight": ("BF16", [H]),
     p + "input_layernorm.weight": ("BF16", [H]), p + "post_attention_layernorm.weight": ("BF16", [H]),
     p + "self_attn.q_proj.weight": ("BF16", [nh * hd, H]), p + "self_attn.q_proj.bias": ("BF16", [nh * hd]),
     p + "self_attn.k_proj.weight": ("BF16", [kv * hd, H]), p + "self_attn.k_proj.bias": ("BF16", [kv * hd]),
     p + "self_attn.v_proj.weight": ("BF16", [kv * hd, H]), p + "self_attn.v_proj.bias": ("BF16", [kv * hd]),
     p + "self_attn.o_proj.weight": ("BF16", [H, nh * hd]), p + "self_attn.o_proj.bias": ("BF16", [H]),
     p + "self_attn.sinks": ("BF16", [nh]), p + "mlp.router.weight": ("BF16", [E, H]), p + "mlp.router.bias": ("BF16", [E]),
     p + "mlp.experts.gate_up_proj_blocks": ("U8", [E, 2 * I, H // 32, 16]),
     p + "mlp.experts.gate_up_proj_scales": ("U8", [E, 2 * I, H // 32]),
     p + "mlp.experts.gate_up_proj_bias": ("BF16", [E, 2 * I]),
     p + "mlp.experts.down_proj_blocks": ("U8", [E, H, I // 32, 16]),
     p + "mlp.experts.down_proj_scales": ("U8", [E, H, I // 32]),
     p + "mlp.experts.down_proj_bias": ("BF16", [E, H])}
hdr, off = {"__metadata__": {"format": "pt"}}, 0
for name in sorted(t):
    dt, shape = t[name]
    n = (2 if dt == "BF16" else 1)
    for s in shape:
        n *= s
    hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
    off += n
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    f.truncate(8 + len(h) + off)
cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": H, "intermediate_size": I,
       "num_hidden_layers": 1, "num_attention_heads": nh, "num_key_value_heads": kv, "head_dim": hd,
       "num_local_experts": E, "num_experts_per_tok": 4, "vocab_size": V, "sliding_window": 128,
       "layer_types": ["sliding_attention"], "rms_norm_eps": 1e-5, "rope_theta": 150000,
       "tie_word_embeddings": False,
       "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
           "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
PY

# blocks_per_rank TP: the down_proj_blocks' block count of each rank, from plan --json.
blocks_per_rank() {
    "$TPSHARD" plan "$src" --tp "$1" --json 2>"$T/plan.err" | $PY -c '
import json, sys
d = json.load(sys.stdin)
t = {x["name"]: x["rank_shapes"] for x in d["tensors"]}
p = "model.layers.0.mlp.experts."
down = [s[2] for s in t[p + "down_proj_blocks"]]
ok = all(s[2] == b for s, b in zip(t[p + "down_proj_scales"], down)) and \
     all(s[1] == 64 * b for s, b in zip(t[p + "gate_up_proj_blocks"], down)) and \
     all(s[1] == 64 * b for s, b in zip(t[p + "gate_up_proj_scales"], down)) and \
     all(s[1] == 64 * b for s, b in zip(t[p + "gate_up_proj_bias"], down)) and \
     all(s == [128, 2880] for s in t[p + "down_proj_bias"])
print(" ".join(map(str, down)) if ok else "inconsistent: %s" % t)'
}
for case in "8:12 12 12 12 12 12 12 6" "4:23 23 23 21" "2:45 45"; do
    tp=${case%%:*} want=${case#*:}
    got=$(blocks_per_rank "$tp")
    if [ "$got" = "$want" ]; then
        ok "gpt-oss-120b MXFP4 tp $tp: blocks a rank $want (vLLM's cdiv rule), gate/up rows, scales and bias alike"
    else
        notok "gpt-oss-120b MXFP4 tp $tp: blocks a rank $want (vLLM's cdiv rule), gate/up rows, scales and bias alike"
        echo "#   got: $got" | head -c 2000
        sed 's/^/#   /' "$T/plan.err" | head -5
    fi
done
expect_exit 3 "90 units of 1 along dimension 2, cut as the engine cuts them (cdiv(90, 16) = 6 a rank, the last rank the rest), leave rank 15 nothing" \
    "gpt-oss-120b MXFP4 tp 16: refused, rank 15 would get no block" "$TPSHARD" plan "$src" --tp 16
check "gpt-oss-120b MXFP4: inspect names the quantization" sh -c "'$TPSHARD' inspect '$src' 2>&1 | grep -q 'quantization: mxfp4'"
# --target vllm: the engine's MXFP4 parameters (w13_weight etc., the blocks' 3-D byte views);
# what the files hold and how vLLM loads them: tests/interop/vllm/real/vllm_real_mxfp4_slices.py.
check "gpt-oss-120b MXFP4 --target vllm tp 8: planned (vLLM's uneven slices under the engine's names)" \
    "$TPSHARD" split "$src" --tp 8 --target vllm --dry-run
