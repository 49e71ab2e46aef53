#!/bin/sh
# The falcon preset on tiny-falcon40 (testdata/gen_falcon_fixtures.py: Falcon-40B's
# new_decoder_architecture, 8 heads in 2 KV groups, biases, tied head): the grouped fused
# query_key_value is cut by whole groups at tp 2 and by a group's share of q heads plus its
# K and V at tp 4 and 8; reshard and merge go through the same algebra, so reshard 8 -> 2
# equals split at 2 byte for byte and merge gives back every source tensor bit for bit.  A
# plain block cut of query_key_value passes check and fails verify with exit 1; a tp the
# groups do not fit is refused naming them.  (transformers' own logits:
# tests/interop/transformers/debian/test_hf_falcon_starcoder2.py.)
. "$TPS_TOP/tests/cli/lib.sh"
src="$FIX/models/tiny-falcon40"

for tp in 1 2 4 8; do
    check "tp $tp: split chooses the falcon preset from config.json" "$TPSHARD" split "$src" --tp "$tp" -o "s$tp" -q
    check "tp $tp: check passes" "$TPSHARD" check "s$tp" -q
    check "tp $tp: verify --layer all passes" "$TPSHARD" verify "s$tp" --source "$src" --layer all -q
    check "tp $tp: verify --whole-model passes" "$TPSHARD" verify "s$tp" --source "$src" --whole-model -q
done

# Rank 1 of 4 holds q heads 2-3 of group 0 and group 0's K and V: rows 16-31, 32-39, 40-47 of
# the 96 (each group is [4 q heads; k; v] of head_dim 8).
/usr/bin/python3 - "$src/model.safetensors" "s4" <<'PY' && ok "tp 4: rank 1 holds its q heads and its group's K and V, in the group's layout" || notok "tp 4: rank 1's query_key_value rows"
import json, struct, sys
def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: (v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"}
src = load(sys.argv[1])
import glob
r1 = [load(f) for f in glob.glob(sys.argv[2] + "/*rank*1*.safetensors")]
assert len(r1) == 1, glob.glob(sys.argv[2] + "/*")
name = "transformer.h.0.self_attention.query_key_value.weight"
shape, full = src[name]
row = shape[1] * 2
want = b"".join(full[r * row:(r + 1) * row] for r in list(range(16, 32)) + list(range(32, 48)))
assert r1[0][name][0] == [32, 64] and r1[0][name][1] == want
PY

rm -rf r
check "reshard 8 -> 2" "$TPSHARD" reshard s8 --tp 2 -o r -q
same=ok
for x in s2/*; do cmp -s "$x" "r/$(basename "$x")" || { same="differs in $(basename "$x")"; break; }; done
[ "$same" = ok ] && ok "reshard 8 -> 2 equals split at 2, byte for byte" || notok "reshard 8 -> 2: $same"

check "merge of the tp 8 set" "$TPSHARD" merge s8 -o merged.safetensors -q
/usr/bin/python3 - "$src/model.safetensors" merged.safetensors <<'PY' && ok "merge gives back every source tensor bit for bit" || notok "merge is not bit-exact"
import json, struct, sys
def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a == b, sorted(set(a) ^ set(b)) or [k for k in a if a[k] != b[k]][:3]
PY

# A plain block cut of the grouped tensor: at tp 4 every rank gets 24 contiguous rows (q heads
# of the wrong group, or K and V without their q heads); the bytes match the manifest.
split_wrong plain falcon "$src" 4 '  - {match: "transformer.h.*.self_attention.query_key_value.{weight,bias}", split: column, unit: head_dim}' wrong &&
    check "plain block cut: check passes (bytes and manifest agree)" "$TPSHARD" check wrong -q &&
    expect_wrong_cut "query_key_value" "plain block cut: verify --layer all fails" wrong --source "$src" --layer all &&
    expect_wrong_cut "" "plain block cut: verify --whole-model --source fails" wrong --source "$src" --whole-model

expect_exit 3 "2 KV groups" "tp 3 refused naming the KV groups" "$TPSHARD" plan "$src" --tp 3
grep -qF "tp values that fit: 1, 2, 4, 8" "$T/.err" && ok "the refusal lists the tp values that fit" ||
    { notok "the refusal lists the tp values that fit"; sed 's/^/#   /' "$T/.err" | head -5; }

# groups: is data of the layout language: it needs the segments of one group.
printf 'rules:\n  - match: x\n    split: column\n    groups: 2\n' >nogroup.yaml
expect_exit 3 "nogroup.yaml:4:13: groups needs segments" "groups without segments is refused at its line" \
    "$TPSHARD" layout --check nogroup.yaml
