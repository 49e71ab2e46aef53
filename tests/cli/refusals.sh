#!/bin/sh
# Refusals that help: a layout that does not fit a tp is refused with one line per cause
# (not one per tensor), at most about ten lines, ending with the tp values that fit; a size
# unknown for want of config.json is one line naming --config; plan --json gives the same
# as JSON.  The expected tp values are computed here from the model's numbers.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"
PY=/usr/bin/python3
M="$FIX/models"

# A Llama-70B-shaped checkpoint: the real tensor names and shapes in a safetensors header,
# the data a sparse hole (plan and a refused split read headers only).
mkdir big
$PY - big "$FIX" <<'PY' || { notok "generating the Llama-70B header"; exit 0; }
import json, sys
d = sys.argv[1]
h, heads, kv, hd, inter, vocab, layers = 8192, 64, 8, 128, 28672, 128256, 80
shapes = [("model.embed_tokens.weight", [vocab, h]), ("model.norm.weight", [h]), ("lm_head.weight", [vocab, h])]
for i in range(layers):
    p = "model.layers.%d." % i
    shapes += [(p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h]),
               (p + "self_attn.q_proj.weight", [heads * hd, h]), (p + "self_attn.k_proj.weight", [kv * hd, h]),
               (p + "self_attn.v_proj.weight", [kv * hd, h]), (p + "self_attn.o_proj.weight", [h, heads * hd]),
               (p + "mlp.gate_proj.weight", [inter, h]), (p + "mlp.up_proj.weight", [inter, h]),
               (p + "mlp.down_proj.weight", [h, inter])]
sys.path.insert(0, sys.argv[2])
import gen_fixtures
gen_fixtures.write_header_only(d, [(name, "BF16", shape) for name, shape in shapes])
json.dump({"hidden_size": h, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
           "intermediate_size": inter, "vocab_size": vocab, "num_hidden_layers": layers,
           "model_type": "llama"}, open(d + "/config.json", "w"))
PY

# The tp values the llama preset allows, from the config alone: q and o are cut by heads (no
# replication), k and v by KV heads (replicated when tp is a multiple of them), the MLP by
# intermediate rows, the vocabulary padded (any tp).
fits() {
    $PY - "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
H, K, I = c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"]
print(", ".join(str(t) for t in range(1, H + 1) if H % t == 0 and (K % t == 0 or t % K == 0) and I % t == 0))
PY
}

# lines_at_most N NAME: ok when the last command's stderr has at most N lines.
lines_at_most() {
    n=$(wc -l <"$T/.err")
    [ "$n" -le "$1" ] && ok "$2 ($n lines)" || { notok "$2 ($n lines)"; sed 's/^/#   /' "$T/.err" | head -15; }
}

want=$(fits big/config.json)
[ "$want" = "1, 2, 4, 8, 16, 32, 64" ] && ok "the 70B model allows tp $want" || notok "expected fit list: $want"

expect_exit 3 "at tp 3" "plan of the 70B header at tp 3: exit 3" "$TPSHARD" plan big --tp 3 --preset llama
lines_at_most 10 "plan at tp 3: at most 10 lines, not one per tensor"
cp "$T/.err" p3.err
grep -q "64 attention heads (head_dim 128) along dimension 0: tp 3 neither divides nor is a multiple of 64; 80 tensors: model.layers.{0..79}.self_attn.q_proj.weight; rule model.layers.\*.self_attn.q_proj" p3.err &&
    grep -q "8 KV heads (head_dim 128) along dimension 0: tp 3 neither divides nor is a multiple of 8; 160 tensors: model.layers.{0..79}.self_attn.k_proj.weight, model.layers.{0..79}.self_attn.v_proj.weight" p3.err &&
    grep -q "intermediate size 28672 along dimension 1: .*80 tensors: model.layers.{0..79}.mlp.down_proj.weight" p3.err &&
    ok "plan at tp 3 names heads, KV heads and intermediate size, with the count and the names folded" ||
    { notok "plan at tp 3 names heads, KV heads and intermediate size"; sed 's/^/#   /' p3.err; }
grep -qF "big: the layout does not fit this checkpoint at tp 3 (560 tensors, 5 causes); tp values that fit: $want" p3.err &&
    ok "plan at tp 3 ends with the tp values that fit: $want" || { notok "tp values that fit"; tail -1 p3.err | sed 's/^/#   /'; }
grep -E "heads|intermediate" p3.err | grep -q "pad" && notok "a padding hint for heads or MLP" ||
    ok "no padding hint for heads or MLP"

expect_exit 3 "tp values that fit: $want" "split of the 70B header at tp 3: exit 3, the same refusal" \
    "$TPSHARD" split big --tp 3 --preset llama -o out3
lines_at_most 10 "split at tp 3: at most 10 lines"
[ ! -e out3 ] && ok "a refused split writes nothing" || notok "split wrote out3"

# --json: the same refusal as one JSON object on stdout, exit 3.
"$TPSHARD" plan big --tp 3 --preset llama --json >p3.json 2>p3j.err
rc=$?
$PY - p3.json "$want" >json.out 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
want = [int(t) for t in sys.argv[2].split(", ")]
assert d["fits"] is False and d["tp"] == 3, d
assert d["tp_values_that_fit"] == want, d["tp_values_that_fit"]
assert d["tensors_refused"] == 80 * 7 == sum(p["count"] for p in d["problems"]), d["tensors_refused"]
by = {(p["units"], p["unit"], p["dimension"]): p for p in d["problems"]}
q = by[(64, 128, 0)]
assert q["count"] == 80 and q["kind"] == "tp" and q["issue"] == "indivisible", q
assert q["tensors"] == "model.layers.{0..79}.self_attn.q_proj.weight", q
assert by[(8, 128, 0)]["count"] == 160 and by[(28672, 1, 0)]["count"] == 160 and by[(28672, 1, 1)]["count"] == 80
assert len(d["problems"]) == 5
print("ok")
PY
[ "$rc" -eq 3 ] && grep -qx ok json.out && ok "plan --json at tp 3: exit 3, problems grouped with counts and the tp values that fit" ||
    { notok "plan --json at tp 3 (exit $rc)"; sed 's/^/#   /' json.out p3j.err | head -10; }

# A tp that fits: exit 0, no refusal.
check "plan of the 70B header at tp 8 fits" "$TPSHARD" plan big --tp 8 --preset llama -q

# No config.json beside the checkpoint: one line saying so and naming --config.
mkdir alone && ln -s "$T/big/model.safetensors" alone/model.safetensors
expect_exit 3 "no config.json beside alone/model.safetensors; pass --config FILE (unknown sizes: " \
    "without config.json: one line naming --config" "$TPSHARD" plan alone/model.safetensors --tp 8 --preset llama
lines_at_most 2 "without config.json: no line per tensor"
[ "$(grep -c "config" "$T/.err")" -eq 2 ] && grep -q "head_dim" "$T/.err" && grep -qF "(320 tensors, 1 cause); pass --config FILE" "$T/.err" && ok "the missing sizes are named once" ||
    { notok "the missing sizes are named once"; sed 's/^/#   /' "$T/.err"; }
"$TPSHARD" plan alone/model.safetensors --tp 8 --preset llama --json >alone.json 2>/dev/null
rc=$?
[ "$rc" -eq 3 ] && $PY -c "
import json, sys
d = json.load(open('alone.json'))
assert d['tp_values_that_fit'] is None and 'pass --config FILE' in d['hint'], d
assert all(p['kind'] == 'unknown_sizes' and 'head_dim' in p['missing_sizes'] for p in d['problems']), d
" && ok "plan --json without config.json: exit 3, the hint names --config" || notok "plan --json without config.json (exit $rc)"
check "with --config the same checkpoint plans" "$TPSHARD" plan alone/model.safetensors --tp 8 --preset llama \
    --config big/config.json -q

# The tiny fixtures: the same shape of refusal, the same computed tp values.
for model in llama qwen2; do
    want=$(fits "$M/tiny-$model/config.json")
    expect_exit 3 "tp values that fit: $want" "tiny-$model at tp 3: refused with the tp values that fit ($want)" \
        "$TPSHARD" plan "$M/tiny-$model" --tp 3 --preset llama
    lines_at_most 10 "tiny-$model at tp 3: at most 10 lines"
    "$TPSHARD" plan "$M/tiny-$model" --tp 3 --preset llama --json >tiny.json 2>/dev/null
    rc=$?
    [ "$rc" -eq 3 ] && $PY -c "
import json, sys
d = json.load(open('tiny.json'))
assert d['tp_values_that_fit'] == [int(t) for t in sys.argv[1].split(', ')], d['tp_values_that_fit']
assert d['tensors_refused'] == sum(p['count'] for p in d['problems']) > 0
" "$want" && ok "tiny-$model plan --json at tp 3: exit 3, valid JSON" || notok "tiny-$model plan --json at tp 3 (exit $rc)"
done

# A layout whose rules miss tensors: one line for all of them, pointing at the layout options.
printf 'rules:\n  - match: "model.layers.*.self_attn.*.weight"\n    split: replicate\n' >partial.yaml
expect_exit 3 "no rule of the layout matches 13 tensors: lm_head.weight, model.embed_tokens.weight, model.layers.{0..1}.input_layernorm.weight and 9 more (add a rule, or a default: rule)" "a layout that misses tensors: one grouped line" \
    "$TPSHARD" plan "$M/tiny-llama" --tp 2 --layout partial.yaml -q
lines_at_most 3 "a layout that misses tensors: at most 3 lines"
grep -q -- "--preset NAME or --layout FILE" "$T/.err" && ok "it points at --preset and --layout" ||
    { notok "it points at --preset and --layout"; sed 's/^/#   /' "$T/.err"; }
