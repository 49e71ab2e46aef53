#!/bin/sh
# The row-block gather paths (lib/engine/gather.c and lib/engine/shardset.c): a tensor cut along dimension 1
# has one short piece per row on every rank, and here some pieces are replicated (a fused
# [q;k;v] row split whose single k and v heads every rank holds at tp 4).  600 rows need
# several row blocks.  Expectations come from a fixture written with Python's struct module
# and from split at the target size, not from the gather code.
. "$TPS_TOP/tests/cli/lib.sh"
/usr/bin/python3 - <<'PY'
import json, struct
rows, cols = 600, 12
w = b"".join(struct.pack("<f", float((i * 7919) % 1000) * 0.25) for i in range(rows * cols))
n = b"".join(struct.pack("<f", 1.0 + i) for i in range(12))
hdr = {"w": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [0, len(w)]},
       "n": {"dtype": "F32", "shape": [12], "data_offsets": [len(w), len(w) + len(n)]}}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open("m.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + w + n)
PY
cat >rowrep.yaml <<'YAML'
name: rowrep
rules:
  - match: w
    split: row
    unit: 2
    segments: {q: 8, k: 2, v: 2}
    kv_replicate: true
  - match: n
    split: replicate
YAML
# the tensors' bytes of a safetensors file, by name, as "name hexdigest" lines
tensors() {
    /usr/bin/python3 -c '
import hashlib, json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
for k in sorted(h):
    if k != "__metadata__":
        s, e = h[k]["data_offsets"]
        print(k, h[k]["dtype"], h[k]["shape"], hashlib.sha256(b[8 + n + s:8 + n + e]).hexdigest())' "$1"
}
for tp in 2 4; do
    "$TPSHARD" split m.safetensors --tp $tp --layout rowrep.yaml -o s$tp -q || notok "split at tp $tp"
done
check "check: a row split with replicated row pieces is intact" "$TPSHARD" check s4
check "check --source: the row blocks reassemble the source" "$TPSHARD" check s4 --source m.safetensors
"$TPSHARD" merge s4 -o merged.safetensors -q
if [ "$(tensors merged.safetensors)" = "$(tensors m.safetensors)" ]; then ok "merge: the row blocks give the source tensors"
else notok "merge: the row blocks give the source tensors"; fi
"$TPSHARD" reshard s4 --tp 2 -o r2 -q
same=yes
for r in 0 1; do cmp -s r2/model-rank-$r-of-2.safetensors s2/model-rank-$r-of-2.safetensors || same=no; done
if [ $same = yes ]; then ok "reshard 4->2 of row pieces equals split at 2 byte for byte"
else notok "reshard 4->2 of row pieces equals split at 2 byte for byte"; fi
# damage rank 2's replica of the k head in row 500 (global bytes 500*48+32..40)
off=$(/usr/bin/python3 -c '
import json, struct
b = open("s4/model-rank-2-of-4.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
# rank 2 holds q cols 4..5, k, v: 6 floats (24 bytes) per row; k starts at byte 8 of its row
print(8 + n + h["w"]["data_offsets"][0] + 500 * 24 + 8 + 1)')
printf '\001' | dd of=s4/model-rank-2-of-4.safetensors bs=1 seek="$off" conv=notrunc 2>/dev/null
expect_exit 1 "ranks 0 and 2 hold different bytes for global bytes from 24032" \
    "check: a damaged replica row piece is found and located" "$TPSHARD" check s4
