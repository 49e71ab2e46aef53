#!/bin/sh
# tpshard inspect on safetensors files made here by a standard-library Python snippet
# (independent of tpshard): the human listing, --json against the snippet's own record of
# what it wrote, a Hugging Face multi-file directory, and a sparse 64 GiB file that must be
# listed without reading its data.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

PY=${TPS_SYS_PYTHON:-/usr/bin/python3}
if ! [ -x "$PY" ]; then
    skip "inspect: $PY not found, cannot make fixtures"
    exit 0
fi

# Writes small.safetensors, a multi-file set in hf/, big.safetensors (sparse), and
# expect-*.json: the tensors (name, dtype, shape, bytes) and their sums.
"$PY" - <<'EOF' || { notok "inspect: fixture generation failed"; exit 1; }
import json, os, struct

BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "I64": 64, "I8": 8, "U8": 8, "BOOL": 8, "F4": 4}

def layout(tensors):
    hdr, pos, rec = {"__metadata__": {"format": "pt", "origin": "inspect.sh"}}, 0, []
    for name, dt, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        size = n * BITS[dt] // 8
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + size]}
        rec.append({"name": name, "dtype": dt, "shape": shape, "elements": n, "bytes": size})
        pos += size
    return hdr, pos, rec

def write(path, tensors, sparse=False):
    hdr, size, rec = layout(tensors)
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        if sparse:
            f.truncate(8 + len(h) + size)
        else:
            f.write(bytes(i % 251 for i in range(size)))
    return rec

def expect(name, recs):
    tot = {"tensors": len(recs), "parameters": sum(r["elements"] for r in recs),
           "bytes": sum(r["bytes"] for r in recs), "by_dtype": {}}
    for r in recs:
        d = tot["by_dtype"].setdefault(r["dtype"], {"parameters": 0, "bytes": 0})
        d["parameters"] += r["elements"]
        d["bytes"] += r["bytes"]
    json.dump({"tensors": recs, "totals": tot}, open(name, "w"))

small = [("embed.weight", "BF16", [10, 6]), ("layers.0.mlp.w", "F32", [6, 4]), ("norm", "F16", [6]),
         ("step", "I64", []), ("mask", "BOOL", [3, 0]), ("q", "F4", [4, 2]), ("ids", "U8", [7])]
expect("expect-small.json", write("small.safetensors", small))

os.mkdir("hf")
r1 = write("hf/model-00001-of-00002.safetensors", small[:3])
r2 = write("hf/model-00002-of-00002.safetensors", small[3:])
wm = {r["name"]: "model-00001-of-00002.safetensors" for r in r1}
wm.update({r["name"]: "model-00002-of-00002.safetensors" for r in r2})
json.dump({"metadata": {"total_size": sum(r["bytes"] for r in r1 + r2)}, "weight_map": wm},
          open("hf/model.safetensors.index.json", "w"), indent=2, sort_keys=True)
expect("expect-hf.json", r1 + r2)

expect("expect-big.json", write("big.safetensors", [("huge", "BF16", [4096, 8388608])], sparse=True))
EOF

# compare EXPECT.json ACTUAL.json FORMAT NFILES: inspect --json output against the record.
compare() {
    "$PY" - "$@" <<'EOF'
import json, sys
want, got = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
errors = []
if got["format"] != sys.argv[3]:
    errors.append("format %r != %r" % (got["format"], sys.argv[3]))
if len(got["files"]) != int(sys.argv[4]):
    errors.append("%d files listed, expected %s" % (len(got["files"]), sys.argv[4]))
if got["metadata"].get("origin") != "inspect.sh":
    errors.append("metadata %r" % got["metadata"])
keys = ("name", "dtype", "shape", "elements", "bytes")
g = sorted(({k: t[k] for k in keys} for t in got["tensors"]), key=lambda t: t["name"])
w = sorted(want["tensors"], key=lambda t: t["name"])
if g != w:
    errors.append("tensors differ:\n%s\n%s" % (g, w))
# A dtype whose tensors are all empty may be listed with zeros or left out.
for t in (got["totals"], want["totals"]):
    t["by_dtype"] = {k: v for k, v in t["by_dtype"].items() if v["parameters"] or v["bytes"]}
if got["totals"] != want["totals"]:
    errors.append("totals %s != %s" % (got["totals"], want["totals"]))
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
EOF
}

check "inspect small.safetensors exits 0" "$TPSHARD" inspect small.safetensors
"$TPSHARD" inspect small.safetensors >human.txt 2>&1
want_total=$("$PY" -c 'import json; t = json.load(open("expect-small.json"))["totals"]
print("total: %d parameters, %d bytes" % (t["parameters"], t["bytes"]))')
if grep -qxF "$want_total" human.txt && grep -q '^  layers.0.mlp.w  *F32  *\[6, 4\]  *96 bytes$' human.txt &&
    grep -q '^  step  *I64  *\[\]  *8 bytes$' human.txt; then
    ok "inspect lists tensors and the independent total ($want_total)"
else
    notok "inspect lists tensors and the independent total ($want_total)"
    sed 's/^/#   /' human.txt
fi

for c in "small.safetensors expect-small.json safetensors 1" "hf expect-hf.json safetensors-index 2" \
    "hf/model.safetensors.index.json expect-hf.json safetensors-index 2" \
    "big.safetensors expect-big.json safetensors 1"; do
    set -- $c
    if "$TPSHARD" inspect --json "$1" >got.json 2>err.txt && compare "$2" got.json "$3" "$4" >diff.txt 2>&1; then
        ok "inspect --json $1: tensors and totals equal the independent record"
    else
        notok "inspect --json $1: tensors and totals equal the independent record"
        cat err.txt diff.txt | head -20 | sed 's/^/#   /'
    fi
done

expect_exit 3 "no.safetensors" "inspect of a missing file exits 3" "$TPSHARD" inspect no.safetensors
"$PY" -c '
import json
p = "hf/model.safetensors.index.json"
d = json.load(open(p))
del d["weight_map"]["norm"]
json.dump(d, open(p, "w"))'
expect_exit 3 "tensor 'norm' is in" "inspect of a multi-file set with a tensor missing from the map exits 3" \
    "$TPSHARD" inspect hf

# A shard-set directory is shown from its manifest: --json is the manifest byte for byte;
# the text names every file and gives one line per tensor; a broken manifest is exit 3.
"$TPSHARD" split "$FIX/models/tiny-llama" --tp 2 --preset llama -o set -q || notok "setup: split tiny-llama"
if "$TPSHARD" inspect --json set >set.json 2>err.txt && cmp -s set.json set/tpshard.json; then
    ok "inspect --json of a shard set prints its manifest"
else
    notok "inspect --json of a shard set prints its manifest"
    sed 's/^/#   /' err.txt | head -5
fi
"$TPSHARD" inspect set >set.txt 2>err.txt
rc=$?
if [ $rc -eq 0 ] && "$PY" - set/tpshard.json set.txt <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
lines = open(sys.argv[2]).read().splitlines()
assert lines[0] == "set: tpshard shard set, tp 2, 2 files (%d bytes), %d tensors" % (
    sum(f["bytes"] for f in m["files"]), len(m["tensors"])), lines[0]
assert "  config keys recorded from " + m["config"]["path"] in lines, lines[:4]
for f in m["files"]:
    assert any(f["name"] in l and ("%d bytes" % f["bytes"]) in l and f["crc32"] in l for l in lines), f
for t in m["tensors"]:
    (line,) = [l for l in lines if l.split()[:1] == [t["name"]]]
    assert "-> [%s]" % ", ".join(map(str, t["rank_shapes"][0])) in line, (line, t["rank_shapes"])
PY
then
    ok "inspect of a shard set: summary, every file with size and CRC, every tensor with its rank shape"
else
    notok "inspect of a shard set: summary, every file with size and CRC, every tensor with its rank shape"
    sed 's/^/#   /' set.txt err.txt | head -10
fi
printf '{"format": "tpshard",' >set/tpshard.json
expect_exit 3 "tpshard.json" "inspect of a shard set whose manifest is cut short exits 3" "$TPSHARD" inspect set
