#!/bin/sh
# Sources are whole: one file of a multi-file checkpoint is refused by split and plan (exit 3,
# naming the index beside it or the part pattern of its name, nothing written), whether the
# index lies beside it or only its name says so, for safetensors and torch .bin parts;
# inspect still shows the part and says what it is part of; the whole set still splits.
. "$TPS_TOP/tests/cli/lib.sh"
ST="$FIX/models/tiny-llama-split"
BIN="$FIX/torch/multi"
STCFG="$ST/config.json"
BINCFG="$FIX/torch/llama_config.json"

# nothing_written NAME: no output directory, no temporary directory beside it.
nothing_written() {
    left=$(ls -A out-parent)
    if [ -z "$left" ]; then ok "$1: nothing written"; else notok "$1: left behind: $left"; fi
}

# refused NAME FRAGMENT SRC CONFIG: split and plan both exit 3 naming FRAGMENT; split writes
# nothing.
refused() {
    what=$1 frag=$2 src=$3 cfg=$4 # expect_exit sets $name
    rm -rf out-parent && mkdir out-parent
    expect_exit 3 "$frag" "$what: split refused, naming $frag" \
        "$TPSHARD" split "$src" --tp 2 --preset llama --config "$cfg" -o out-parent/out
    grep -qF "pass the checkpoint's directory or its index file" "$T/.err" &&
        ok "$what: split says to pass the directory or the index" ||
        notok "$what: split does not say what to pass instead: $(cat "$T/.err")"
    nothing_written "$what"
    expect_exit 3 "$frag" "$what: plan refused" "$TPSHARD" plan "$src" --tp 2 --preset llama --config "$cfg"
}

# 1. One safetensors part with model.safetensors.index.json beside it.
refused "safetensors part, index beside" "$ST/model.safetensors.index.json" "$ST/model-00001-of-00002.safetensors" "$STCFG"
grep -qF "one of the 2 files" "$T/.err" && ok "safetensors part: the message counts the set's files" ||
    notok "safetensors part: no file count: $(cat "$T/.err")"

# 2. The same part alone (no index anywhere near): its Hugging Face name gives it away.
mkdir lone && cp "$ST/model-00001-of-00002.safetensors" lone/
refused "safetensors part, no index" "*-00001-of-00002.*" lone/model-00001-of-00002.safetensors "$STCFG"

# 3. A torch .bin part, with pytorch_model.bin.index.json beside it, then alone.
refused "torch .bin part, index beside" "$BIN/pytorch_model.bin.index.json" "$BIN/pytorch_model-00001-of-00002.bin" "$BINCFG"
mkdir lonebin && cp "$BIN/pytorch_model-00002-of-00002.bin" lonebin/pytorch_model-00002-of-00003.bin
refused "torch .bin part, no index" "*-00002-of-00003.*" lonebin/pytorch_model-00002-of-00003.bin "$BINCFG"

# 4. An index beside that names other files only, or a name like tpshard's own rank files or a
#    1-of-1 "set", is no reason to refuse.
mkdir other && cp "$ST/model-00001-of-00002.safetensors" other/model-00001-of-00001.safetensors &&
    printf '{"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}\n' >other/model.safetensors.index.json
check "a 1-of-1 file beside an unrelated index splits" \
    "$TPSHARD" plan other/model-00001-of-00001.safetensors --tp 2 --preset llama --config "$STCFG" -q
mkdir rankname && cp "$ST/model-00001-of-00002.safetensors" rankname/model-rank-1-of-2.safetensors
check "a name like model-rank-1-of-2 is not taken for a part" \
    "$TPSHARD" plan rankname/model-rank-1-of-2.safetensors --tp 2 --preset llama --config "$STCFG" -q

# 5. inspect shows the part (exit 0, its own tensors) and notes the set on stderr.
expect_exit 0 "" "inspect of a part exits 0" "$TPSHARD" inspect "$ST/model-00001-of-00002.safetensors"
grep -qF "note: $ST/model-00001-of-00002.safetensors is one of the 2 files of the checkpoint indexed by $ST/model.safetensors.index.json" "$T/.err" &&
    ok "inspect of a part says which set it belongs to" || notok "inspect of a part: no note: $(cat "$T/.err")"
n_part=$(grep -c '^  model\.' "$T/.out")
"$TPSHARD" inspect "$ST" >whole.txt 2>whole.err
n_whole=$(grep -c '^  model\.' whole.txt)
if [ "$n_part" -gt 0 ] && [ "$n_part" -lt "$n_whole" ] && [ ! -s whole.err ]; then
    ok "inspect: the part lists $n_part of the set's $n_whole tensors; the directory gets no note"
else
    notok "inspect: part $n_part tensors, whole $n_whole, whole's stderr: $(cat whole.err)"
fi
"$TPSHARD" inspect --json "$ST/model-00001-of-00002.safetensors" 2>/dev/null >part.json
if [ -n "${TPS_PYTHON:-}" ]; then
    "$TPS_PYTHON" -c 'import json,sys; json.load(open(sys.argv[1]))' part.json &&
        ok "inspect --json of a part stays valid JSON (the note goes to stderr)" ||
        notok "inspect --json of a part is not JSON"
fi

# 6. The whole set, by directory or by index, splits as before.
check "the directory of the set splits" "$TPSHARD" split "$ST" --tp 2 --preset llama -o whole-dir -q
check "the index of the set splits" "$TPSHARD" split "$ST/model.safetensors.index.json" --tp 2 --preset llama \
    --config "$ST/config.json" -o whole-idx -q
