#!/bin/sh
# check and verify prove what they say (issue 14, items 2, 4, 6, 10): integer options that
# overflow or lie beyond the model are refused; both end with a footer of what they covered,
# its counts computed here from the manifest; a finding that cannot be recorded is an error;
# a flipped byte makes verify exit 1 naming file and tensor; a partial set (one node's share)
# is checked for the ranks it holds, shown by inspect, refused by verify.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models/tiny-llama"
PY=/usr/bin/python3
"$TPSHARD" split "$M" --tp 4 --preset llama --config "$M/config.json" -o s4 -q || { notok "split tp 4"; exit 0; }

# --layer 2^64-1 once wrapped first + 1 to 0: zero layers, "1 layer verified", exit 0.
expect_exit 2 "--layer 18446744073709551615: the model has 2 layers (0 to 1)" "verify --layer 2^64-1: exit 2 naming the layer count" \
    "$TPSHARD" verify s4 --layer 18446744073709551615
[ ! -s "$T/.out" ] && ok "verify --layer 2^64-1: nothing on stdout (no 'verified', no JSON pass)" || notok "verify --layer 2^64-1 printed a result"
expect_exit 2 "--layer 2: the model has 2 layers" "verify --layer 2 (one past the last): exit 2" "$TPSHARD" verify s4 --layer 2 --json
[ ! -s "$T/.out" ] && ok "verify --layer 2 --json: no JSON result" || notok "verify --layer 2 --json printed a result"
expect_exit 2 "--layer '-1'" "verify --layer -1: exit 2" "$TPSHARD" verify s4 --layer -1
expect_exit 2 "--tokens 18446744073709551616: too large" "verify --tokens 2^64: exit 2" "$TPSHARD" verify s4 --tokens 18446744073709551616
expect_exit 2 "not ' 5'" "verify --seed ' 5' (a space, which strtoull skips): exit 2" "$TPSHARD" verify s4 --seed " 5"
expect_exit 2 "--tp 18446744073709551615: too large" "plan --tp 2^64-1: exit 2" "$TPSHARD" plan "$M" --tp 18446744073709551615 --preset llama

# The footers, against counts computed from the manifest.
"$TPSHARD" check s4 >c.out 2>&1 && "$TPSHARD" check s4 --json >c.json 2>/dev/null &&
    "$TPSHARD" verify s4 >v.out 2>&1 && "$TPSHARD" verify s4 --json >v.json 2>/dev/null
rc=$?
if [ $rc -eq 0 ] && $PY - s4/tpshard.json c.out c.json v.out v.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
files = len(m["files"]); fbytes = sum(f["bytes"] for f in m["files"]); tensors = len(m["tensors"])
c = open(sys.argv[2]).read()
want = "checked: ranks 0-3 of 4: %d files, %d bytes, %d tensors; findings: 0" % (files, fbytes, tensors)
assert want in c, (want, c)
cj = json.load(open(sys.argv[3]))["checked"]
assert cj == {"ranks": [0, 1, 2, 3], "partial": False, "files": files, "bytes": fbytes, "tensors": tensors}, cj
layer = [t for t in m["tensors"] if t["name"].startswith("model.layers.")]
lt, lb = len(layer), sum(t["bytes"] for t in layer)
v = open(sys.argv[4]).read()
want = "checked: 2 layers on 4 ranks, %d shard tensors (%d bytes) matching the manifest's checksums; layers that differ: 0" % (lt, lb)
assert want in v, (want, v)
vj = json.load(open(sys.argv[5]))
assert vj["pass"] is True and vj["checked"] == {"layers": 2, "ranks": 4, "tensors": lt, "bytes": lb, "mismatched_layers": 0}, vj["checked"]
PY
then ok "check and verify footers (text and --json) give the files, bytes, tensors, layers and ranks of the manifest"; else
    notok "check and verify footers"; cat c.out v.out | sed 's/^/#   /' | head -10
fi

# A flipped byte in one rank's slice of one tensor.
cp -r s4 bad
$PY - bad <<'PY'
import json, struct, sys
d = sys.argv[1]
m = json.load(open(d + "/tpshard.json"))
f = d + "/" + [x for x in m["files"] if x["rank"] == 2][0]["name"]
b = bytearray(open(f, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
b[8 + n + h["model.layers.1.mlp.down_proj.weight"]["data_offsets"][0] + 3] ^= 0x40
open(f, "wb").write(b)
PY
expect_exit 1 "bad/model-rank-2-of-4.safetensors: tensor 'model.layers.1.mlp.down_proj.weight': CRC-32" \
    "verify: a flipped byte exits 1 naming the file and tensor (reference from the shards)" "$TPSHARD" verify bad
grep -q "layers verified" "$T/.out" && notok "verify of a corrupt set said 'verified'" || ok "verify of a corrupt set does not say 'verified'"
expect_exit 1 "bad/model-rank-2-of-4.safetensors: tensor 'model.layers.1.mlp.down_proj.weight': CRC-32" \
    "verify --source: a flipped byte exits 1 naming the file and tensor" "$TPSHARD" verify bad --source "$M" --layer 1
expect_exit 1 "model-rank-2-of-4.safetensors" "check: the flipped byte is a finding" "$TPSHARD" check bad

# A finding that cannot be recorded (allocation failure, forced by the test hook) is an error.
TPSHARD_TEST_FINDING_OOM=1 expect_exit 4 "out of memory" "check: a finding it cannot record is exit 4, not a pass" \
    "$TPSHARD" check bad
grep -q "ok" "$T/.out" && notok "check printed ok while out of memory" || ok "check out of memory prints no verdict"

# A partial set: ranks 0-1 of 4, as split --only-rank 0,1 writes on one node.
mkpartial() { # dir ranks-json
    rm -rf "$1" && cp -r s4 "$1" && rm "$1"/model-rank-2-of-4.safetensors "$1"/model-rank-3-of-4.safetensors &&
        $PY -c "import json,sys; p=sys.argv[1]+'/tpshard.json'; m=json.load(open(p)); m['ranks_held']=json.loads(sys.argv[2]); json.dump(m, open(p,'w'), indent=2)" "$1" "$2"
}
mkpartial part "[0, 1]"
expect_exit 0 "" "check of a partial set (ranks 0-1 of 4): exit 0" "$TPSHARD" check part
if grep -q "ranks 0-1 of 4 (partial set)" "$T/.out" && "$TPSHARD" check part --json >p.json &&
    $PY - part/tpshard.json "$T/.out" p.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
held = [f for f in m["files"] if f["rank"] in (0, 1)]
want = "checked: ranks 0-1 of 4 (partial set): %d files, %d bytes, 0 tensors; findings: 0" % (len(held), sum(f["bytes"] for f in held))
assert want in open(sys.argv[2]).read(), want
j = json.load(open(sys.argv[3]))
assert j["ok"] is True and j["checked"] == {"ranks": [0, 1], "partial": True, "files": len(held), "bytes": sum(f["bytes"] for f in held), "tensors": 0}, j
PY
then ok "check of a partial set: says 'ranks 0-1 of 4 (partial set)', footer and --json count the held files"; else
    notok "check of a partial set: footer"; sed 's/^/#   /' "$T/.out"
fi
rm part/model-rank-1-of-4.safetensors
expect_exit 1 "model-rank-1-of-4.safetensors" "check of a partial set missing a held rank's file: exit 1" "$TPSHARD" check part
mkpartial part "[0, 1]"
head -c 100 part/model-rank-1-of-4.safetensors >x && cat x part/model-rank-1-of-4.safetensors >y && mv y part/model-rank-1-of-4.safetensors
expect_exit 1 "model-rank-1-of-4.safetensors" "check of a partial set with a held file changed: exit 1" "$TPSHARD" check part
mkpartial part "[0, 1]"
"$TPSHARD" inspect part >i.out 2>&1 && grep -q "partial set: ranks 0-1 of 4 are here" i.out && grep -q "model-rank-3-of-4.safetensors .*(not here)" i.out &&
    "$TPSHARD" inspect part --json | $PY -c "import json,sys; assert json.load(sys.stdin)['ranks_held'] == [0, 1]" &&
    ok "inspect shows a partial set (text and --json)" || { notok "inspect of a partial set"; sed 's/^/#   /' i.out | head -5; }
"$TPSHARD" inspect s4 --json | $PY -c "import json,sys; assert 'ranks_held' not in json.load(sys.stdin)" &&
    ok "inspect --json of a full set has no ranks_held" || notok "a full set's manifest has ranks_held"
expect_exit 3 "part is a partial set: it holds ranks 0-1 of 4, the other ranks' files are on other nodes" \
    "verify of a partial set: exit 3 explaining where the other ranks are" "$TPSHARD" verify part
for bad in "[]" "[1, 0]" "[0, 0, 1]" "[0, 4]" "[-1]" '"0,1"' "[0.5]"; do
    mkpartial hb "$bad"
    expect_exit 3 "ranks_held" "manifest with ranks_held $bad: refused (exit 3)" "$TPSHARD" inspect hb
done
mkpartial hb "[0, 1, 2, 3]"
"$TPSHARD" inspect hb --json 2>/dev/null | $PY -c "import json,sys; assert 'ranks_held' not in json.load(sys.stdin)" &&
    ok "ranks_held listing every rank reads as a full set" || notok "ranks_held of every rank"
# Reading a rank the partial set does not hold fails saying so (tps_shardset_open_rank).
mkpartial part "[0, 1]"
expect_exit 3 "rank 2 is not in this partial set (it holds ranks 0-1 of 4" "merge of a partial set: rank 2 is refused as not held" \
    "$TPSHARD" merge part -o m.safetensors
[ ! -e m.safetensors ] && ok "merge of a partial set wrote nothing" || notok "merge of a partial set wrote m.safetensors"
