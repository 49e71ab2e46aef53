#!/bin/sh
# The worked example of a custom layout (docs/layouts.md, "Writing a layout"):
# testdata/layouts/falcon.yaml (Falcon-7B, written by hand) on testdata/layouts/tiny-falcon,
# through layout, plan, split, check and verify; the slices are checked against the source
# with the standard library.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"
LAY="$FIX/layouts/falcon.yaml"
F="$FIX/layouts/tiny-falcon"
PY=/usr/bin/python3

/usr/bin/python3 "$FIX/gen_layout_fixtures.py" regen >/dev/null 2>gen.err
cmp -s regen/tiny-falcon/model.safetensors "$F/model.safetensors" && cmp -s regen/tiny-falcon/config.json "$F/config.json" &&
    ok "testdata/gen_layout_fixtures.py regenerates tiny-falcon byte for byte" ||
    { notok "gen_layout_fixtures.py output differs from the committed fixture"; sed 's/^/#   /' gen.err | head -5; }

"$TPSHARD" layout --check "$LAY" >out 2>&1
grep -qx "$LAY: ok, 6 rules, block kind neox" out && ok "layout --check accepts falcon.yaml (6 rules, neox block)" ||
    { notok "layout --check falcon.yaml"; sed 's/^/#   /' out; }

# Expected per-rank rows of the fused [Q; K; V], from config.json alone: heads/tp query heads
# and the one K and V head on every rank.
for tp in 1 2 4 8; do
    "$TPSHARD" plan "$F/model.safetensors" --tp $tp --layout "$LAY" --json >plan.json 2>plan.err
    rc=$?
    if [ $rc -eq 0 ] && $PY - "$tp" "$F/config.json" <<'PY' 2>plan.py; then
import json, sys
tp, cfg = int(sys.argv[1]), json.load(open(sys.argv[2]))
h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
hd = h // heads
plan = {t["name"]: t["rank_shapes"] for t in json.load(open("plan.json"))["tensors"]}
qkv = plan["transformer.h.0.self_attention.query_key_value.weight"]
assert qkv == [[(heads // tp + 2) * hd, h]] * tp, qkv
assert plan["transformer.h.1.mlp.dense_4h_to_h.weight"] == [[h, 4 * h // tp]] * tp
assert plan["transformer.word_embeddings.weight"] == [[-(-cfg["vocab_size"] // tp), h]] * tp
assert plan["transformer.ln_f.bias"] == [[h]] * tp
PY
        ok "plan at tp $tp: Q heads split, the single K/V head on every rank, vocabulary padded"
    else
        notok "plan at tp $tp"
        sed 's/^/#   /' plan.err plan.py | head -8
    fi
done
expect_exit 3 "tp 3" "plan at tp 3: 8 heads do not split in 3, exit 3" "$TPSHARD" plan "$F/model.safetensors" --tp 3 --layout "$LAY"

"$TPSHARD" split "$F/model.safetensors" --tp 4 --layout "$LAY" -o s4 -q &&
    "$TPSHARD" check s4 --source "$F/model.safetensors" -q >/dev/null && ok "split at tp 4, check --source passes" ||
    notok "split/check with falcon.yaml"
# Rank r's fused matrix is [Q rows of heads 2r, 2r+1; K; V], read back with the standard library.
$PY - "$F/model.safetensors" s4 <<'PY' >slices.out 2>&1
import json, struct, sys
def tensors(path):
    f = open(path, "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    hdr, data = json.loads(f.read(n)), f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in hdr.items() if k != "__metadata__"}
src = tensors(sys.argv[1])
name, row = "transformer.h.1.self_attention.query_key_value.weight", 64 * 2
q, k, v = src[name][:64 * row], src[name][64 * row:72 * row], src[name][72 * row:]
for r in range(4):
    got = tensors("%s/model-rank-%d-of-4.safetensors" % (sys.argv[2], r))[name]
    assert got == q[r * 16 * row:(r + 1) * 16 * row] + k + v, r
print("ok")
PY
grep -qx ok slices.out && ok "each rank's query_key_value is its Q heads plus the shared K and V head" ||
    { notok "falcon qkv slices"; sed 's/^/#   /' slices.out | head -5; }
"$TPSHARD" verify s4 --source "$F/model.safetensors" >v.out 2>&1 && grep -q "2 layers verified" v.out &&
    ok "verify: the tp 4 shards compute the unsharded Falcon layers" || { notok "verify falcon"; sed 's/^/#   /' v.out | head -5; }

# The mistake the segments prevent, exactly as docs/layouts.md, "Writing a layout" shows it: the
# `segments` line deleted, so the fused matrix is cut as one block.  At tp 2 shapes and bytes
# are consistent, so check passes and verify catches it; at tp 4 the plain cut is refused
# (80 rows are 10 units of head_dim 8, which 4 does not divide).
sed '/segments:/d' "$LAY" >wrong.yaml
"$TPSHARD" split "$F/model.safetensors" --tp 2 --layout wrong.yaml -o w2 -q && "$TPSHARD" check w2 -q >/dev/null &&
    ok "qkv cut as one block at tp 2: split and check pass" || notok "wrong layout at tp 2: split or check failed"
expect_exit 1 "mismatch" "qkv cut as one block at tp 2: verify fails with exit 1" "$TPSHARD" verify w2 --source "$F/model.safetensors"
expect_exit 3 "tp 4" "qkv cut as one block at tp 4: split refuses it, exit 3" \
    "$TPSHARD" split "$F/model.safetensors" --tp 4 --layout wrong.yaml -o w4 -q
[ ! -e w4 ] && ok "the refused tp 4 split wrote nothing" || notok "the refused tp 4 split left w4"

# docs/layouts.md shows the layout inline: that copy parses and cuts every tensor the same way.
awk '/^## Writing a layout/ {w = 1} w && /^```yaml/ {on = 1; next} on && /^```/ {exit} on' "$TPS_TOP/docs/layouts.md" >doc.yaml
"$TPSHARD" plan "$F/model.safetensors" --tp 4 --layout doc.yaml --json >a.json 2>a.err &&
    "$TPSHARD" plan "$F/model.safetensors" --tp 4 --layout "$LAY" --json >b.json 2>>a.err &&
    $PY -c "
import json
a, b = (json.load(open(f)) for f in ('a.json', 'b.json'))
key = lambda d: [(t['name'], t['partition'], t['dtype'], t['rank_shapes']) for t in d['tensors']]
assert len(a['tensors']) == 16 and key(a) == key(b) and a['rank_bytes'] == b['rank_bytes']
" 2>>a.err && ok "docs/layouts.md's inline Falcon layout parses and plans exactly like testdata/layouts/falcon.yaml" ||
    { notok "docs/layouts.md's Falcon layout"; sed 's/^/#   /' a.err | head -5; }
