#!/bin/sh
# split, plan, reshard, merge and check on the preset fixtures, through the CLI.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"
preset_of() { # fixture directory name -> preset
    case "$1" in tiny-llama4) echo llama4 ;; tiny-llama*|tiny-qwen2*) echo llama ;; tiny-gpt2) echo gpt2 ;; tiny-neox) echo neox ;;
                 tiny-phi3) echo phi3 ;; tiny-mixtral) echo mixtral ;; *) echo "" ;; esac
}

# reshard(split(S, N), M) == split(S, M), byte for byte, for every preset and N, M in {1,2,4,8}
for d in "$M"/tiny-*; do
    f=$(basename "$d")
    p=$(preset_of "$f")
    [ -n "$p" ] || continue
    src="$d/model.safetensors"
    [ -f "$src" ] || src="$d"
    ok_tps=""
    for tp in 1 2 4 8; do
        if "$TPSHARD" split "$src" --tp $tp --preset "$p" --config "$d/config.json" -o "s-$f-$tp" -q 2>"err-$f-$tp"; then
            ok_tps="$ok_tps $tp"
        fi
    done
    [ -n "$ok_tps" ] || { notok "$f: split at no tp of 1 2 4 8"; cat "err-$f-1" | sed 's/^/#   /'; continue; }
    all=ok
    for n in $ok_tps; do
        "$TPSHARD" check "s-$f-$n" -q >/dev/null 2>&1 || { all="check of tp $n failed"; break; }
        for m in $ok_tps; do
            [ "$n" = "$m" ] && continue
            rm -rf r
            if ! "$TPSHARD" reshard "s-$f-$n" --tp $m -o r -q 2>rerr; then all="reshard $n->$m failed: $(head -1 rerr)"; break 2; fi
            for x in "s-$f-$m"/*; do
                cmp -s "$x" "r/$(basename "$x")" || { all="reshard $n->$m differs from split $m in $(basename "$x")"; break 3; }
            done
        done
    done
    if [ "$all" = ok ]; then ok "$f ($p): reshard between tp$ok_tps equals split, and check passes"; else notok "$f: $all"; fi
    rm -rf s-"$f"-*
done

L="$M/tiny-llama"
SRC="$L/model.safetensors"
before=$(cksum <"$SRC")
"$TPSHARD" split "$SRC" --tp 4 --preset llama --config "$L/config.json" -o base -q

# a non-prime, non-power-of-two pair where heads allow: 8 heads, 2 kv heads -> tp 2 and 6 are not
# both valid; check that reshard refuses with the numbers instead.
expect_exit 3 "tp 6" "reshard to tp 6 refused naming the tensor and numbers" "$TPSHARD" reshard base --tp 6 -o r6
grep -qF "; rule model.layers.*." "$T/.err" && ok "the reshard refusal names the recorded layout rule" ||
    { notok "the reshard refusal names the recorded layout rule"; sed 's/^/#   /' "$T/.err" | head -3; }
[ ! -e r6 ] && ok "refused reshard leaves no output" || notok "refused reshard left r6"

mkdir full && echo x >full/keep
expect_exit 3 "not empty" "non-empty output refused" "$TPSHARD" split "$SRC" --tp 2 --preset llama --config "$L/config.json" -o full
[ "$(cat full/keep)" = x ] && [ "$(ls full)" = keep ] && ok "refused output directory left untouched" || notok "output dir changed"
# --force replaces only an empty directory or an earlier shard set, never what is not ours.
expect_exit 3 "'keep' is not part of the shard set" "--force refuses a directory with a foreign file, naming it" \
    "$TPSHARD" split "$SRC" --tp 2 --preset llama --config "$L/config.json" -o full --force
[ "$(cat full/keep)" = x ] && [ "$(ls -A full)" = keep ] && ok "the refused --force left the directory untouched" ||
    notok "the refused --force changed full/"
rm -rf full && mkdir full
check "--force replaces an empty directory" "$TPSHARD" split "$SRC" --tp 2 --preset llama --config "$L/config.json" -o full --force -q
check "--force replaces an earlier shard set" "$TPSHARD" split "$SRC" --tp 4 --preset llama --config "$L/config.json" -o full --force -q
[ "$(ls full | grep -c safetensors)" = 4 ] && "$TPSHARD" check full -q >/dev/null &&
    ok "forced output is the new tp 4 set, nothing of the old one left" || notok "forced output"
echo x >full/notes.txt
expect_exit 3 "'notes.txt' is not part of the shard set" "--force refuses a shard set with a file of the user's beside it" \
    "$TPSHARD" split "$SRC" --tp 2 --preset llama --config "$L/config.json" -o full --force
[ -f full/notes.txt ] && [ "$(ls full | grep -c safetensors)" = 4 ] && ok "that refusal left the set and the file" ||
    notok "that refusal changed full/"
rm full/notes.txt && mkdir full/sub
expect_exit 3 "'sub' is not part of the shard set" "--force refuses a shard set with a subdirectory in it" \
    "$TPSHARD" split "$SRC" --tp 2 --preset llama --config "$L/config.json" -o full --force
rmdir full/sub

"$TPSHARD" split "$SRC" --tp 2 --preset llama --config "$L/config.json" -o dry --dry-run >dry.out 2>&1
[ $? = 0 ] && [ ! -e dry ] && grep -q "rank 1:" dry.out && ok "--dry-run plans and writes nothing" || notok "--dry-run"

"$TPSHARD" split "$SRC" --tp 4 --preset llama --config "$L/config.json" -o only --only-rank 1,3 -q
# The manifest is the full set's, plus the ranks this directory holds.
same_but_held=$(/usr/bin/python3 -c "
import json
a = json.load(open('only/tpshard.json')); b = json.load(open('base/tpshard.json'))
held = a.pop('ranks_held', None)
print(a == b and held == [1, 3])")
if [ -f only/model-rank-1-of-4.safetensors ] && [ -f only/model-rank-3-of-4.safetensors ] &&
   [ ! -e only/model-rank-0-of-4.safetensors ] && [ "$same_but_held" = True ] &&
   cmp -s only/model-rank-3-of-4.safetensors base/model-rank-3-of-4.safetensors; then
    ok "--only-rank writes only those ranks, with the full set's manifest plus ranks_held [1, 3]"
else notok "--only-rank (manifest equal but for ranks_held: $same_but_held)"; fi

expect_exit 3 "" "plan at tp 3 is refused" "$TPSHARD" plan "$SRC" --tp 3 --preset llama --config "$L/config.json"
# one line per cause (5: q, k/v, o, gate/up, down), not one per tensor, then what would work
n=$(grep -c "tensors\{0,1\}: model" "$T/.err")
[ "$n" -eq 5 ] && [ "$(wc -l <"$T/.err")" -eq 6 ] && ok "plan lists every cause at once, grouped ($n lines)" ||
    { notok "plan listed $n causes"; sed 's/^/#   /' "$T/.err" | head -8; }
# the divisibility refusal names the numbers, the tensors and the rule that chose the cut, with its place
grep -qF "intermediate size 176 along dimension 1: tp 3 neither divides nor is a multiple of 176; 2 tensors: model.layers.{0..1}.mlp.down_proj.weight; rule model.layers.*.mlp.down_proj.weight (preset:llama:" "$T/.err" &&
    grep -qF "tp values that fit: 1, 2, 4, 8" "$T/.err" &&
    ok "plan at tp 3: the refusal names units, dimension, tp, the tensors and the rule with its line; and the tp values that fit" ||
    { notok "plan at tp 3: the refusal names units, dimension, tp, the tensors and the rule with its line; and the tp values that fit"; sed 's/^/#   /' "$T/.err" | head -3; }
[ ! -e "s3" ] && ok "nothing written by a refused plan" || notok "plan wrote"

# vocabulary 1003 at tp 8: padded rows recorded, merge strips them
"$TPSHARD" split "$SRC" --tp 8 --preset llama --config "$L/config.json" -o s8 -q
grep -q '"pad": true' s8/tpshard.json && ok "vocabulary padding recorded in the manifest" || notok "no padding in manifest"
check "merge of a padded tp 8 set" "$TPSHARD" merge s8 -o merged.safetensors -q
check "merged file passes check --source against the original" "$TPSHARD" check s8 --source merged.safetensors -q
"$TPSHARD" merge s8 -o mdir/ --max-shard-size 100KB -q
[ -f mdir/model.safetensors.index.json ] && [ -f mdir/model-00001-of-0000$(ls mdir | grep -c 'model-0')".safetensors" ] &&
    "$TPSHARD" check s8 --source mdir -q >/dev/null && ok "merge into a Hugging Face multi-file set" || notok "merge to dir"

[ "$(cksum <"$SRC")" = "$before" ] && ok "the source file is unchanged" || notok "source changed"

# check catches damage, each in its own test
cp -r s8 d && sz=$(wc -c <d/model-rank-5-of-8.safetensors) && printf "\377" | dd of=d/model-rank-5-of-8.safetensors bs=1 seek=$((sz - 100)) conv=notrunc 2>/dev/null
expect_exit 1 "CRC" "check: a flipped byte in a shard" "$TPSHARD" check d
rm -rf d && cp -r s8 d && truncate -s -7 d/model-rank-2-of-8.safetensors
expect_exit 1 "rank 2" "check: a truncated shard" "$TPSHARD" check d
rm -rf d && cp -r s8 d && rm d/model-rank-7-of-8.safetensors
expect_exit 1 "rank 7" "check: a missing rank file" "$TPSHARD" check d
rm -rf d && cp -r s8 d && mv d/model-rank-1-of-8.safetensors x && mv d/model-rank-2-of-8.safetensors d/model-rank-1-of-8.safetensors && mv x d/model-rank-2-of-8.safetensors
expect_exit 1 "tp_rank" "check: two rank files swapped" "$TPSHARD" check d
rm -rf d && cp -r s8 d && sed -i '0,/"shape": \[/s//"shape": [7, /' d/tpshard.json
expect_exit 1 "" "check: a manifest edited to a wrong shape" "$TPSHARD" check d
rm -rf d && cp -r s8 d
# kv heads are replicated at tp 8 (2 kv heads): damage one replica's k_proj slice only
"$TPSHARD" inspect --json d/model-rank-1-of-8.safetensors >insp.json
off=$(/usr/bin/python3 -c "
import json,struct
d=json.load(open('insp.json'))
f=open('d/model-rank-1-of-8.safetensors','rb'); n=struct.unpack('<Q',f.read(8))[0]
h=json.loads(f.read(n))
print(8+n+h['model.layers.0.self_attn.k_proj.weight']['data_offsets'][0]+3)")
printf '\001' | dd of=d/model-rank-1-of-8.safetensors bs=1 seek="$off" conv=notrunc 2>/dev/null
expect_exit 1 "replicas differ" "check: replicas that differ" "$TPSHARD" check d
expect_exit 1 "replicas differ" "merge refuses replicas that differ" "$TPSHARD" merge d -o bad.safetensors
[ ! -e bad.safetensors ] && ok "merge wrote nothing from an inconsistent set" || notok "merge left bad.safetensors"

# Non-power-of-two pairs: a Llama-shaped model with 12 heads and 6 KV heads (made here with
# the standard library) reshards 2 -> 6 -> 3 -> 2 and 6 <-> 12 byte-identically to direct
# splits; at tp 12 each KV head is replicated on two ranks.
/usr/bin/python3 - <<'PY'
import json, struct, random
random.seed(7)
H, NH, KV, HD, I, V = 48, 12, 6, 4, 96, 101
t = {"model.embed_tokens.weight": [V, H], "lm_head.weight": [V, H], "model.norm.weight": [H]}
for l in range(2):
    p = f"model.layers.{l}."
    t.update({p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
              p + "self_attn.q_proj.weight": [NH * HD, H], p + "self_attn.k_proj.weight": [KV * HD, H],
              p + "self_attn.v_proj.weight": [KV * HD, H], p + "self_attn.o_proj.weight": [H, NH * HD],
              p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H], p + "mlp.down_proj.weight": [H, I]})
hdr, data, off = {"__metadata__": {"format": "pt"}}, bytearray(), 0
for name, shape in t.items():
    n = 1
    for s in shape: n *= s
    data += bytes(random.getrandbits(8) for _ in range(2 * n))
    hdr[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + 2 * n]}
    off += 2 * n
h = json.dumps(hdr).encode()
open("twelve.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data)
json.dump({"hidden_size": H, "num_attention_heads": NH, "num_key_value_heads": KV, "head_dim": HD,
           "intermediate_size": I, "vocab_size": V, "num_hidden_layers": 2}, open("twelve.json", "w"))
PY
for tp in 2 3 6 12; do "$TPSHARD" split twelve.safetensors --tp $tp --preset llama --config twelve.json -o w$tp -q; done
same=ok
for pair in "2 6" "6 3" "3 2" "6 12" "12 6"; do
    set -- $pair
    rm -rf r && "$TPSHARD" reshard w$1 --tp $2 -o r -q || { same="reshard $1->$2 failed"; break; }
    for x in w$2/*; do cmp -s "$x" "r/$(basename "$x")" || { same="reshard $1->$2 differs in $(basename "$x")"; break 2; }; done
done
[ "$same" = ok ] && ok "12 heads / 6 KV heads: reshard 2->6->3->2 and 6<->12 equal direct splits" || notok "$same"
"$TPSHARD" plan twelve.safetensors --tp 12 --preset llama --config twelve.json | grep -q "layers.0.self_attn.k_proj.weight .*\[24, 48\] *-> \[4, 48\]" &&
    "$TPSHARD" check w12 -q >/dev/null && ok "tp 12 replicates the 6 KV heads and checks clean" || notok "tp 12 replication"

# Without --config, the config.json beside the checkpoint gives the sizes; elsewhere they are missing.
check "config.json beside the source is read without --config" "$TPSHARD" plan "$SRC" --tp 8 --preset llama -q
cp "$SRC" alone.safetensors
expect_exit 3 "head_dim" "without any config.json, the unknown size is named" "$TPSHARD" plan alone.safetensors --tp 8 --preset llama
