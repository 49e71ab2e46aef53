#!/bin/sh
# vLLM expert-parallel sets (split/reshard --target vllm --ep E, E = tp): each MoE layer's routed
# experts whole on their owner rank, placed linearly (rank r: experts [r*E'/E, (r+1)*E'/E)), in
# the fused routed_experts.w13_weight / w2_weight at the local index vLLM uses; attention and
# dense layers cut by TP.  The rank files' bytes against the source's experts (read here, not by
# tpshard); check, inspect, verify and merge; reshard between EP and TP-only sets, byte-equal to
# the direct splits; verify failing on two experts swapped in a rank file whose CRCs and manifest
# were made to match; the refusals and their exit codes.  (The real vLLM loading an EP set with
# enable_expert_parallel: tests/interop/vllm/real/vllm_real_grids.py.)
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"
PY=/usr/bin/python3
src="$M/tiny-mixtral" # 4 experts a layer, 2 layers
moe=model.layers.0.block_sparse_moe.experts


# same_set A B: every file of set A (manifest included) equals B's, byte for byte.
same_set() {
    for f in "$1"/*.safetensors "$1"/tpshard.json; do cmp -s "$f" "$2/$(basename "$f")" || { echo "$f differs"; return 1; }; done
    [ "$(ls "$1" | wc -l)" -eq "$(ls "$2" | wc -l)" ]
}

check "split --tp 2 --ep 2 --target vllm" "$TPSHARD" split "$src" --tp 2 --ep 2 --target vllm -o ep2 -q
check "split --tp 2 --target vllm (TP only)" "$TPSHARD" split "$src" --tp 2 --target vllm -o tp2 -q

# Rank r's w13_weight[j] is [w1; w3] of expert 2r + j whole, its w2_weight[j] that expert's w2,
# read from the source checkpoint; everything else as in the TP set.
$PY - ep2 tp2 "$src/model.safetensors" <<'PY'
import json, struct, sys
def read(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); h.pop("__metadata__", None); base = 8 + n
        return {k: (v["shape"], (f.seek(base + v["data_offsets"][0]), f.read(v["data_offsets"][1] - v["data_offsets"][0]))[1]) for k, v in h.items()}
ep, tp, src = sys.argv[1], sys.argv[2], read(sys.argv[3])
for r in (0, 1):
    e, t = read("%s/model-rank-%d-part-0.safetensors" % (ep, r)), read("%s/model-rank-%d-part-0.safetensors" % (tp, r))
    assert set(e) == set(t), set(e) ^ set(t)
    for k in t:
        if "routed_experts" not in k: assert e[k] == t[k], k
    for L in (0, 1):
        p = "model.layers.%d.block_sparse_moe.experts." % L
        w13, w2 = e[p + "routed_experts.w13_weight"], e[p + "routed_experts.w2_weight"]
        assert w13[0] == [2, 192, 64] and w2[0] == [2, 64, 96], (w13[0], w2[0])
        want13 = b"".join(src["%s%d.w1.weight" % (p, 2 * r + j)][1] + src["%s%d.w3.weight" % (p, 2 * r + j)][1] for j in (0, 1))
        want2 = b"".join(src["%s%d.w2.weight" % (p, 2 * r + j)][1] for j in (0, 1))
        assert w13[1] == want13 and w2[1] == want2, (r, L)
PY
[ $? -eq 0 ] && ok "each rank holds its 2 experts whole ([E/ep, 2I, H], [E/ep, H, I]) in expert order; attention and the rest as the TP set" ||
    notok "each rank holds its 2 experts whole; attention and the rest as the TP set"

$PY -c "
import json; m = json.load(open('ep2/tpshard.json'))
ex = [t for t in m['tensors'] if '.experts.' in t['name']]
assert len(ex) == 24 and all(t['partition']['owners'] == 4 and t['partition']['owner'] == int(t['name'].split('.experts.')[1].split('.')[0]) for t in ex)
assert not any('owners' in t['partition'] for t in m['tensors'] if '.experts.' not in t['name'])" &&
    ok "the manifest records each expert's placement as partition data (owners 4, owner e)" ||
    notok "the manifest records each expert's placement as partition data"

check "check the EP set" "$TPSHARD" check ep2
"$TPSHARD" inspect ep2 >"$T/.out" 2>&1
grep -q "expert parallel: 4 experts a layer, 2 whole on each rank (tp 2 x ep 2" "$T/.out" && grep -q "rank 0 0-1, rank 1 2-3" "$T/.out" &&
    ok "inspect shows the expert-parallel grid" || { notok "inspect shows the expert-parallel grid"; sed 's/^/#   /' "$T/.out" | head -5; }
check "verify the EP set against the source (each rank its own experts, one all-reduce)" "$TPSHARD" verify ep2 --source "$src" -q
check "verify the EP set on the device path (devsim)" "$TPSHARD" verify ep2 --source "$src" --backend devsim -q
check "verify --whole-model of the EP set" "$TPSHARD" verify ep2 --source "$src" --whole-model -q

check "merge the EP set" "$TPSHARD" merge ep2 -o ep2.safetensors -q
check "merge the TP set" "$TPSHARD" merge tp2 -o tp2.safetensors -q
check "merge of the EP set is byte for byte the TP set's merge (cmp)" cmp ep2.safetensors tp2.safetensors
check "merge of the EP set holds the source's tensors bit for bit" same_tensors ep2.safetensors "$src/model.safetensors"

# Reshard between grids: each result byte-equal (files and manifest) to the direct split.
check "split --tp 4 --target vllm" "$TPSHARD" split "$src" --tp 4 --target vllm -o tp4 -q
check "split --tp 4 --ep 4 --target vllm" "$TPSHARD" split "$src" --tp 4 --ep 4 --target vllm -o ep4 -q
check "reshard tp 2 x ep 2 -> tp 4 (--ep 1)" "$TPSHARD" reshard ep2 --tp 4 --ep 1 -o r-tp4 -q
check "  equals split --tp 4 (cmp)" same_set r-tp4 tp4
check "reshard tp 4 -> tp 2 x ep 2" "$TPSHARD" reshard tp4 --tp 2 --ep 2 -o r-ep2 -q
check "  equals split --tp 2 --ep 2 (cmp)" same_set r-ep2 ep2
check "reshard tp 2 x ep 2 -> tp 4 keeps expert parallelism (ep 4)" "$TPSHARD" reshard ep2 --tp 4 -o r-ep4 -q
check "  equals split --tp 4 --ep 4 (cmp)" same_set r-ep4 ep4
check "reshard tp 4 x ep 4 -> tp 2 (--ep 1)" "$TPSHARD" reshard ep4 --tp 2 --ep 1 -o r-tp2 -q
check "  equals split --tp 2 (cmp)" same_set r-tp2 tp2
check "split --tp 8 --target vllm (more ranks than experts)" "$TPSHARD" split "$src" --tp 8 --target vllm -o tp8 -q
check "reshard tp 4 x ep 4 -> tp 8 (--ep 1): the placement goes, so 8 ranks need not divide 4 experts" \
    "$TPSHARD" reshard ep4 --tp 8 --ep 1 -o r-tp8 -q
check "  equals split --tp 8 (cmp)" same_set r-tp8 tp8
expect_exit 3 "4 experts a layer placed whole on the ranks (expert parallelism): tp 8 does not divide them" \
    "reshard tp 4 x ep 4 -> tp 8 keeping the placement: exit 3, named" \
    "$TPSHARD" reshard ep4 --tp 8 -o no9
check "reshard an EP set to --target tpshard drops the placement" "$TPSHARD" reshard ep2 --tp 2 --target tpshard -o own -q
$PY -c "import json,sys; m=json.load(open('own/tpshard.json')); sys.exit(any('owners' in t['partition'] for t in m['tensors']))" &&
    ok "  the tpshard set holds every expert cut by TP" || notok "  the tpshard set holds every expert cut by TP"

# Two experts swapped in rank 0's files, the manifest's tensor and file CRCs made to match: every
# byte check passes, verify must not.
cp -r ep2 swapped
$PY - swapped <<'PY'
import json, struct, sys, zlib
d = sys.argv[1]; p = d + "/model-rank-0-part-0.safetensors"
raw = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n]); base = 8 + n
for k in ("model.layers.0.block_sparse_moe.experts.routed_experts.w13_weight", "model.layers.0.block_sparse_moe.experts.routed_experts.w2_weight"):
    a, b = h[k]["data_offsets"]; half = (b - a) // 2
    x, y = raw[base + a:base + a + half], raw[base + a + half:base + b]
    raw[base + a:base + b] = y + x
open(p, "wb").write(raw)
m = json.load(open(d + "/tpshard.json"))
t = {x["name"]: x for x in m["tensors"]}
for w in ("w1", "w2", "w3"):
    a, b = t["model.layers.0.block_sparse_moe.experts.0.%s.weight" % w], t["model.layers.0.block_sparse_moe.experts.1.%s.weight" % w]
    a["crc32"], b["crc32"] = b["crc32"], a["crc32"]
for f in m["files"]:
    data = open(d + "/" + f["name"], "rb").read()
    f["bytes"], f["crc32"] = len(data), "%08x" % (zlib.crc32(data) & 0xffffffff)
json.dump(m, open(d + "/tpshard.json", "w"), indent=2)
PY
check "check passes on the swapped set (its CRCs and manifest were made to match)" "$TPSHARD" check swapped -q
expect_exit 1 "tensor 'model.layers.0.block_sparse_moe.experts.0.w1.weight': differs from the source" "check --source catches the swapped experts (their checksums are the source's other experts')" \
    "$TPSHARD" check swapped --source "$src" -q
expect_mismatch mlp "layer 0" "verify fails on two experts swapped in rank 0's file: exit 1, the MLP stage" \
    "$TPSHARD" verify swapped --source "$src" -q
expect_wrong_cut "mismatch" "verify fails on the swapped experts on every backend" swapped --source "$src" -q

# Refusals.
expect_exit 2 "a set's --ep equals its --tp" "--ep 4 with --tp 2: exit 2 (vLLM's EP spans the TP ranks; no dp rank in names)" \
    "$TPSHARD" split "$src" --tp 2 --ep 4 --target vllm -o no1
expect_exit 3 "stacks 4 experts ('model.layers.0.block_sparse_moe.experts.0.w1.weight' ...), which 8 ranks do not divide" \
    "--tp 8 --ep 8 on 4 experts: exit 3 naming the tensor and the numbers" "$TPSHARD" split "$src" --tp 8 --ep 8 --target vllm -o no2
expect_exit 2 "no routed experts the target stacks" "--ep on a dense model: exit 2" \
    "$TPSHARD" split "$M/tiny-llama" --tp 2 --ep 2 --target vllm -o no3
expect_exit 2 "--ep lays out expert parallelism for --target vllm" "--ep without --target vllm: exit 2" \
    "$TPSHARD" split "$src" --tp 2 --ep 2 -o no4
expect_exit 2 "--ep lays out expert parallelism for --target vllm" "--ep with --target sglang: exit 2" \
    "$TPSHARD" split "$src" --tp 2 --ep 2 --target sglang -o no5
expect_exit 2 "--ep with --pp" "--ep with --pp: exit 2 (not written yet)" \
    "$TPSHARD" split "$src" --tp 2 --ep 2 --pp 2 --target vllm -o no6
expect_exit 2 "a set's --ep equals its --tp" "reshard --tp 4 --ep 2: exit 2" "$TPSHARD" reshard ep2 --tp 4 --ep 2 -o no7
[ ! -e no1 ] && [ ! -e no2 ] && [ ! -e no3 ] && [ ! -e no4 ] && [ ! -e no5 ] && [ ! -e no6 ] && [ ! -e no7 ] &&
    ok "the refusals write nothing" || notok "the refusals write nothing"

# A manifest whose placement tp does not divide is refused when read (exit 3 for reshard, a
# finding for check).
cp -r ep2 badowners
$PY -c "
import json; p = 'badowners/tpshard.json'; m = json.load(open(p))
for t in m['tensors']:
    if 'owners' in t['partition']: t['partition']['owners'] = 3; t['partition']['owner'] %= 3
json.dump(m, open(p, 'w'), indent=2)"
expect_exit 3 "item 0 of 3 placed whole on the ranks (expert parallelism): 2 ranks do not divide 3 items" "reshard of a manifest with 3 experts placed on 2 ranks: exit 3" \
    "$TPSHARD" reshard badowners --tp 1 -o no8

# DeepSeek-V3 (a dense first layer, a shared expert, MLA): routed experts whole, the rest by TP.
check "DeepSeek-V3: split --tp 2 --ep 2 --target vllm" "$TPSHARD" split "$M/tiny-deepseek-v3" --tp 2 --ep 2 --target vllm -o ds -q
check "DeepSeek-V3: check" "$TPSHARD" check ds -q
check "DeepSeek-V3: verify against the source" "$TPSHARD" verify ds --source "$M/tiny-deepseek-v3" -q
