#!/bin/sh
# The one write step's guards (issue: "one shard-set writer"): each case reproduces a way a
# careless option or a damaged input used to get through, and checks the exit code, the
# message, and what is on disk afterwards (input untouched, no output, no temporary left).
. "$TPS_TOP/tests/cli/lib.sh"
L="$FIX/models/tiny-llama"
SRC="$L/model.safetensors"
split_into() { "$TPSHARD" split "$SRC" --tp "$1" --preset llama --config "$L/config.json" -o "$2" -q; }
sum_of() { find "$@" -type f -exec cksum {} + 2>/dev/null | sort; }
# leftovers NAME: what a refused or failed run left: NAME itself and its temporary siblings.
leftovers() { ls -A | grep -F -e "$1" || true; }
# nothing_left NAME TEST-NAME: ok when neither NAME nor a temporary of it exists.
nothing_left() {
    if [ -z "$(leftovers "$1")" ]; then ok "$2"; else notok "$2"; leftovers "$1" | sed 's/^/#   left: /'; fi
}

split_into 8 s8 && split_into 4 s4 || { notok "setup: split tiny-llama at tp 8 and 4"; exit 0; }

# ---- every byte read is checked: a flipped byte does not pass through reshard or merge ----
# data_offset FILE TENSOR: the file offset of TENSOR's first data byte.
data_offset() {
    /usr/bin/python3 -c "
import json, struct, sys
f = open(sys.argv[1], 'rb'); n = struct.unpack('<Q', f.read(8))[0]
print(8 + n + json.loads(f.read(n))[sys.argv[2]]['data_offsets'][0])" "$1" "$2"
}
flip_at() { # FILE OFFSET: adds one to the byte at OFFSET
    b=$(dd if="$1" bs=1 skip="$2" count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
    printf "$(printf '\\%03o' $(((b + 1) % 256)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
# A byte of a column-split tensor that only rank 3 holds: the CRC check finds it.
cp -r s8 bad8
flip_at bad8/model-rank-3-of-8.safetensors $(($(data_offset bad8/model-rank-3-of-8.safetensors model.layers.0.mlp.gate_proj.weight) + 5))
before=$(sum_of bad8)
expect_exit 1 "bad8/model-rank-3-of-8.safetensors: tensor '" "reshard of a set with a flipped byte: exit 1 naming the file and tensor" \
    "$TPSHARD" reshard bad8 --tp 4 -o out4
grep -qF "the file changed after it was written" "$T/.err" && ok "the reshard refusal says the file changed" ||
    notok "the reshard refusal does not say what changed"
nothing_left out4 "the refused reshard published nothing and left no temporary directory"
expect_exit 1 "bad8/model-rank-3-of-8.safetensors: tensor '" "merge of the same set: exit 1 naming the file and tensor" \
    "$TPSHARD" merge bad8 -o merged.safetensors
nothing_left merged.safetensors "the refused merge left no file and no temporary directory"
[ "$(sum_of bad8)" = "$before" ] && ok "the damaged input was left as it was" || notok "the damaged input changed"
# A byte of a replicated tensor (the final norm) in a rank that is not the first replica:
# reshard compares the replicas it reads.
cp -r s8 rep8
flip_at rep8/model-rank-3-of-8.safetensors $(($(data_offset rep8/model-rank-3-of-8.safetensors model.norm.weight) + 1))
expect_exit 1 "tensor 'model.norm.weight': replicas differ: ranks 0 and 3" "reshard of a set whose replicas differ: exit 1 naming the ranks" \
    "$TPSHARD" reshard rep8 --tp 2 -o out2
grep -qF "rep8/model-rank-3-of-8.safetensors" "$T/.err" && ok "... and the file" || notok "the replica refusal names no file"
nothing_left out2 "the refused reshard of differing replicas published nothing"
# A good set still reshards, and the result equals a direct split.
check "reshard 8 -> 4 of an intact set" "$TPSHARD" reshard s8 --tp 4 -o r4 -q
(cd r4 && sum_of .) >a && (cd s4 && sum_of .) >b && cmp -s a b && ok "reshard(split(S, 8), 4) == split(S, 4)" ||
    notok "reshard 8 -> 4 differs from split at 4"

# ---- a partial source is refused elsewhere (sources.sh); limits agree ----
expect_exit 2 "from 1 to 65536" "split --tp 70000: exit 2 before any planning" \
    "$TPSHARD" split "$SRC" --tp 70000 --preset llama --config "$L/config.json" -o big
nothing_left big "split --tp 70000 wrote nothing"
expect_exit 2 "" "plan --tp 100000000000: exit 2" "$TPSHARD" plan "$SRC" --tp 100000000000 --preset llama --config "$L/config.json"
[ ! -s "$T/.out" ] && ok "plan --tp 100000000000 printed no plan" || notok "plan --tp 100000000000 printed a plan"
expect_exit 2 "from 1 to 65536" "reshard --tp 70000: exit 2" "$TPSHARD" reshard s8 --tp 70000 -o big
expect_exit 2 "" "reshard --tp 0: exit 2" "$TPSHARD" reshard s8 --tp 0 -o big
nothing_left big "the refused reshards wrote nothing"
for bad in "" "," "0," "9" "1-0" "a" "0,,1" "-1"; do
    expect_exit 2 "--only-rank '$bad'" "--only-rank '$bad' at tp 8: exit 2 naming it" \
        "$TPSHARD" split "$SRC" --tp 8 --preset llama --config "$L/config.json" -o part --only-rank "$bad"
done
nothing_left part "the refused --only-rank values wrote nothing"
check "--only-rank 0-1 at tp 8 (a range)" "$TPSHARD" split "$SRC" --tp 8 --preset llama --config "$L/config.json" -o part -q --only-rank 0-1
[ "$(ls part | grep -c safetensors)" = 2 ] && ok "the partial set holds exactly ranks 0 and 1" || notok "partial set: $(ls part)"
check "check of the partial set passes" "$TPSHARD" check part
grep -qF "ranks 0-1 of 8 (partial set)" "$T/.out" && ok "check says it checked ranks 0-1 of 8 (partial set)" ||
    { notok "check of a partial set does not say so"; sed 's/^/#   /' "$T/.out" | head -3; }

# ---- names never collide ----
expect_exit 2 "the manifest's name" "--name-template tpshard.json at tp 1: exit 2" \
    "$TPSHARD" split "$SRC" --tp 1 --preset llama --config "$L/config.json" -o nm --name-template tpshard.json
expect_exit 2 "lacks {rank}" "a template without {rank} at tp 2: exit 2" \
    "$TPSHARD" split "$SRC" --tp 2 --preset llama --config "$L/config.json" -o nm --name-template same.safetensors
expect_exit 2 "lacks {part}" "a size cap with a template without {part}: exit 2" \
    "$TPSHARD" split "$SRC" --tp 2 --preset llama --config "$L/config.json" -o nm --name-template 'r{rank}.safetensors' \
    --max-shard-size 10KB
expect_exit 2 "not a plain file name" "a template that leaves the directory: exit 2" \
    "$TPSHARD" split "$SRC" --tp 2 --preset llama --config "$L/config.json" -o nm --name-template '../r{rank}.safetensors'
# '{rank}{part}' at tp 12 with a part per tensor: rank 1's part 11 and rank 11's part 1 are
# both "111.safetensors" (rank 1's part 10 and rank 11's part 0 "110", first in order).  A layout that replicates everything lets tiny-llama go to tp 12.
printf 'default:\n  split: replicate\n' >all.yaml
expect_exit 2 "gives two files the same name, '110.safetensors'" "a template giving two files one name: exit 2 naming it" \
    "$TPSHARD" split "$SRC" --tp 12 --layout all.yaml -o nm --max-shard-size 1 --name-template '{rank}{part}.safetensors'
nothing_left nm "the refused templates wrote nothing"
[ ! -e "$T/../r0.safetensors" ] && ok "no file was written outside the output directory" || notok "a template wrote outside"

# ---- outputs never overwrite inputs ----
before=$(sum_of s4)
expect_exit 2 "must not be, contain or lie inside the input" "merge -o a file inside the set it reads: exit 2" \
    "$TPSHARD" merge s4 -o s4/model-rank-0-of-4.safetensors --force
expect_exit 2 "must not be, contain or lie inside the input" "merge -o the set's own directory: exit 2" \
    "$TPSHARD" merge s4 -o s4 --force
expect_exit 2 "must not be, contain or lie inside the input" "split -o the source file itself: exit 2" \
    "$TPSHARD" split "$SRC" --tp 2 --preset llama --config "$L/config.json" -o "$SRC" --force
[ "$(sum_of s4)" = "$before" ] && ok "the refused outputs left the input set untouched" || notok "the input set changed"
expect_exit 2 "name a FILE.safetensors" "merge -o model.bin: exit 2 with a hint" "$TPSHARD" merge s4 -o model.bin
nothing_left model.bin "merge -o model.bin created nothing"
check "merge -o DIR/ creates a Hugging Face checkpoint directory" "$TPSHARD" merge s4 -o hf/ -q
[ -f hf/model.safetensors ] && ok "merge -o hf/ wrote hf/model.safetensors" || notok "merge -o hf/: $(ls hf)"
check "merge --force replaces an earlier merged directory" "$TPSHARD" merge s8 -o hf --force -q
check "merge into parts (model-0000N-of-0000M.safetensors and the index)" "$TPSHARD" merge s4 -o hf --force -q --max-shard-size 100KB
[ -f hf/model-00001-of-00004.safetensors ] && [ -f hf/model.safetensors.index.json ] && ok "hf/ holds 4 parts and the index" ||
    notok "hf/ after a merge into parts: $(ls hf | tr '\n' ' ')"
check "merge --force replaces an earlier merge in parts" "$TPSHARD" merge s8 -o hf --force -q
[ "$(ls hf)" = model.safetensors ] && ok "only the new merge is left" || notok "hf/ after replacing parts: $(ls hf | tr '\n' ' ')"
echo notes >hf/README.md
expect_exit 3 "'README.md' is not part of a merged checkpoint" "merge --force refuses a directory with a file of the user's" \
    "$TPSHARD" merge s8 -o hf --force
[ -f hf/README.md ] && [ -f hf/model.safetensors ] && ok "that refusal left the directory as it was" || notok "hf/ changed"

# ---- a failed replace puts the previous set back ----
split_into 2 keep2
before=$(sum_of keep2)
TPS_TEST_FAIL_PUBLISH=1 "$TPSHARD" split "$SRC" --tp 4 --preset llama --config "$L/config.json" -o keep2 --force \
    >"$T/.out" 2>"$T/.err"
rc=$?
if [ $rc -eq 4 ] && grep -qF "the previous set is back in place" "$T/.err" && [ "$(sum_of keep2)" = "$before" ] &&
    [ -z "$(ls -A | grep -F .keep2.)" ]; then
    ok "a replace whose final rename fails: exit 4, the previous set back in place, no temporary left"
else
    notok "a replace whose final rename fails (exit $rc)"
    sed 's/^/#   /' "$T/.err" | head -3
    ls -A | sed 's/^/#   /'
fi
check "the restored set still checks" "$TPSHARD" check keep2 -q

# ---- reshard refuses a tp the model cannot take once, grouped, with what would work ----
expect_exit 3 "tp values that fit: 1, 2, 4, 8" "reshard to tp 6: one grouped refusal ending with the tp values that fit" \
    "$TPSHARD" reshard s8 --tp 6 -o r6
[ -z "$(sort "$T/.err" | uniq -d)" ] && ok "reshard prints each refusal once" || notok "reshard repeats a refusal"
nothing_left r6 "the refused reshard to tp 6 wrote nothing"
