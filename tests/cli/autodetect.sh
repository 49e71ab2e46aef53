#!/bin/sh
# Auto-detection (split and plan choose the preset from config.json), --preset aliases, and
# the non-persistent buffers the presets skip.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"
M="$FIX/models"

# same_sets A B: every file of A is in B byte for byte, and B has no other file.
same_sets() {
    [ "$(ls "$1")" = "$(ls "$2")" ] || return 1
    for same_f in "$1"/*; do cmp -s "$same_f" "$2/$(basename "$same_f")" || return 1; done
}

# Each fixture's config.json names its architecture; split without --preset or --layout must
# announce that preset and cut exactly as --preset NAME does, manifest included.
for case in tiny-llama:llama:LlamaForCausalLM tiny-qwen2:llama:Qwen2ForCausalLM tiny-gpt2:gpt2:GPT2LMHeadModel \
            tiny-neox:neox:GPTNeoXForCausalLM tiny-phi3:phi3:Phi3ForCausalLM tiny-mixtral:mixtral:MixtralForCausalLM \
            tiny-gemma:gemma:GemmaForCausalLM tiny-gemma2:gemma2:Gemma2ForCausalLM; do
    f=${case%%:*} rest=${case#*:}
    p=${rest%%:*} arch=${rest#*:}
    src="$M/$f/model.safetensors"
    "$TPSHARD" split "$src" --tp 2 -o "auto-$f" >/dev/null 2>"auto-$f.err"
    rc=$?
    "$TPSHARD" split "$src" --tp 2 --preset "$p" -o "named-$f" -q >/dev/null 2>&1
    if [ "$rc" -eq 0 ] && grep -qx "tpshard split: layout: preset $p, from $M/$f/config.json architectures $arch" "auto-$f.err" &&
        grep -q "\"name\": \"preset:$p\"" "auto-$f/tpshard.json" && same_sets "auto-$f" "named-$f"; then
        ok "$f: split without --preset says 'preset $p' ($arch) and cuts byte-identically to --preset $p"
    else
        notok "$f: split without --preset says 'preset $p' ($arch) and cuts byte-identically to --preset $p"
        echo "#   exit $rc"
        sed 's/^/#   /' "auto-$f.err" | head -5
    fi
done

# The README's headline, as typed, from the directory that holds the checkpoint.
mkdir head && cp "$M/tiny-llama/model.safetensors" "$M/tiny-llama/config.json" head/
check "split model.safetensors --tp 2 -o out/ works as typed beside config.json" \
    sh -c 'cd head && "$0" split model.safetensors --tp 2 -o out/ -q && test -f out/tpshard.json' "$TPSHARD"

# -q silences the announcement; plan announces it too.
"$TPSHARD" split "$M/tiny-llama/model.safetensors" --tp 2 -o quiet -q >/dev/null 2>quiet.err
[ ! -s quiet.err ] && ok "split -q says nothing about the chosen layout" ||
    { notok "split -q says nothing about the chosen layout"; sed 's/^/#   /' quiet.err; }
expect_exit 0 "tpshard plan: layout: preset neox, from" "plan announces the detected preset" \
    "$TPSHARD" plan "$M/tiny-neox/model.safetensors" --tp 2

# --config FILE names the config.json for a checkpoint that has none beside it.
mkdir lone && cp "$M/tiny-phi3/model.safetensors" lone/
expect_exit 0 "layout: preset phi3, from $M/tiny-phi3/config.json architectures Phi3ForCausalLM" \
    "--config FILE chooses the preset for a lone checkpoint" "$TPSHARD" plan lone/model.safetensors --tp 2 \
    --config "$M/tiny-phi3/config.json"
expect_exit 2 "pass --preset NAME, --layout FILE or --config FILE" \
    "no config.json and no --preset/--layout: exit 2 naming the three options" \
    "$TPSHARD" split lone/model.safetensors --tp 2 -o x

# model_type decides when no architecture is known to a preset (a fork's class name).
mkdir fork && cp "$M/tiny-llama/model.safetensors" fork/
printf '{"architectures": ["MyLlamaFork"], "model_type": "mistral", "num_key_value_heads": 2, "head_dim": 8}\n' \
    >fork/config.json
expect_exit 0 "layout: preset llama, from fork/config.json model_type mistral" \
    "an unknown architecture with a known model_type picks the preset by model_type" \
    "$TPSHARD" plan fork/model.safetensors --tp 2

# An architecture no preset serves: exit 3 naming it, the supported ones, and where to start.
printf '{"architectures": ["MambaForCausalLM"], "model_type": "mamba"}\n' >fork/config.json
"$TPSHARD" split fork/model.safetensors --tp 2 -o x >/dev/null 2>unknown-arch.err
rc=$?
if [ "$rc" -eq 3 ] && grep -q "no built-in layout serves architectures MambaForCausalLM" unknown-arch.err &&
    grep -q "supported architectures: .*LlamaForCausalLM.*MistralForCausalLM.*GPTNeoXForCausalLM" unknown-arch.err &&
    grep -qF "tpshard layout --preset NAME > mine.yaml" unknown-arch.err && [ ! -e x ]; then
    ok "an unknown architecture: exit 3 naming it, the supported ones and 'tpshard layout --preset NAME > mine.yaml'"
else
    notok "an unknown architecture: exit 3 naming it, the supported ones and 'tpshard layout --preset NAME > mine.yaml'"
    echo "#   exit $rc"
    sed 's/^/#   /' unknown-arch.err
fi
printf '{"hidden_size": 64}\n' >fork/config.json
expect_exit 2 "names no \"architectures\" and no \"model_type\"" \
    "a config.json naming no architecture: exit 2" "$TPSHARD" plan fork/model.safetensors --tp 2
expect_exit 2 "give one of --layout FILE or --preset NAME, not both" "--preset and --layout together: exit 2" \
    "$TPSHARD" plan "$M/tiny-llama/model.safetensors" --tp 2 --preset llama --layout "$TPS_TOP/lib/presets/llama.yaml"

# --preset takes the names users know: model_type spellings, any case, '-' for '_'; each
# cuts as the preset it names and records the preset's own name.
for case in mistral:llama:tiny-llama Qwen2:llama:tiny-qwen2 QWEN2:llama:tiny-qwen2 gpt-neox:neox:tiny-neox \
            GPT_NeoX:neox:tiny-neox Phi3:phi3:tiny-phi3 MIXTRAL:mixtral:tiny-mixtral; do
    a=${case%%:*} rest=${case#*:}
    p=${rest%%:*} f=${rest#*:}
    if "$TPSHARD" split "$M/$f/model.safetensors" --tp 2 --preset "$a" -o "alias-$a" -q >/dev/null 2>"alias-$a.err" &&
        same_sets "alias-$a" "named-$f"; then
        ok "--preset $a cuts $f as --preset $p, byte for byte"
    else
        notok "--preset $a cuts $f as --preset $p, byte for byte"
        sed 's/^/#   /' "alias-$a.err" | head -5
    fi
done
# The list grows with every family: it is every file of lib/presets, in name order.
presets=$(cd "$TPS_TOP/lib/presets" && ls -- *.yaml | sed 's/\.yaml$//' | LC_ALL=C sort | tr '\n' ' ')
expect_exit 2 "unknown preset 'mixtrl' (presets: $(echo $presets | sed 's/ /, /g'))" \
    "an unknown --preset: exit 2 listing the presets" "$TPSHARD" plan "$M/tiny-qwen2" --tp 2 --preset mixtrl
expect_exit 2 "; did you mean 'mixtral'?" \
    "an unknown --preset: exit 2 with a did-you-mean" "$TPSHARD" plan "$M/tiny-qwen2" --tp 2 --preset mixtrl
# Aliases follow their presets' order, so others join between these as families are added.
expect_exit 2 ". Also accepted: " "an unknown --preset lists the aliases too" \
    "$TPSHARD" plan "$M/tiny-qwen2" --tp 2 --preset t5
expect_exit 2 "mistral, qwen2, gpt_neox, phi4" "the aliases listed are the llama, neox and phi3 presets'" \
    "$TPSHARD" plan "$M/tiny-qwen2" --tp 2 --preset t5
check "layout --preset takes an alias and prints the preset's YAML" \
    sh -c '"$0" layout --preset Gpt-NeoX | cmp -s - "$1"' "$TPSHARD" "$TPS_TOP/lib/presets/neox.yaml"

# layout --list: the architectures and aliases each preset serves, within 80 columns.
"$TPSHARD" layout --list >list.out 2>&1
tr -s ' \n' '  ' <list.out >list.flat # the names as one line, wherever the wrapping fell
if grep -q "architectures: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM" list.flat &&
    grep -q "aliases: mistral, qwen2" list.flat && grep -q "architectures: GPTNeoXForCausalLM" list.flat &&
    grep -q "aliases: gpt_neox" list.flat && grep -q "architectures: GPT2LMHeadModel" list.flat &&
    grep -q "architectures: Phi3ForCausalLM" list.flat && grep -q "architectures: MixtralForCausalLM" list.flat &&
    ! awk 'length($0) > 80 {bad=1} END {exit !bad}' list.out; then
    ok "layout --list shows each preset's architectures and aliases, within 80 columns"
else
    notok "layout --list shows each preset's architectures and aliases, within 80 columns"
    sed 's/^/#   /' list.out
fi

# Non-persistent buffers.  tiny-llama-bin is tiny-llama's weights as a torch .bin plus each
# layer's rotary_emb.inv_freq: split skips the 2 buffers, says so, records them, and writes
# rank files identical to those of tiny-llama (which never had them).
for tp in 1 2 4; do
    "$TPSHARD" split "$M/tiny-llama-bin/pytorch_model.bin" --tp $tp -o "bin-$tp" >/dev/null 2>"bin-$tp.err"
    rc=$?
    "$TPSHARD" split "$M/tiny-llama/model.safetensors" --tp $tp -o "st-$tp" -q >/dev/null 2>&1
    same=yes
    for f in "st-$tp"/*.safetensors; do cmp -s "$f" "bin-$tp/$(basename "$f")" || same=no; done
    if [ "$rc" -eq 0 ] && [ "$same" = yes ] &&
        grep -qx "tpshard split: skipped 2 tensors: model.layers.\*.self_attn.rotary_emb.inv_freq (not weights)" "bin-$tp.err" &&
        ! grep -q inv_freq "bin-$tp"/*.safetensors; then
        ok "tiny-llama-bin at tp $tp: inv_freq skipped with one line, rank files identical to tiny-llama's"
    else
        notok "tiny-llama-bin at tp $tp: inv_freq skipped with one line, rank files identical to tiny-llama's"
        echo "#   exit $rc, same rank files: $same"
        sed 's/^/#   /' "bin-$tp.err" | head -5
    fi
done
# The manifest records them (read back by an independent JSON parser when there is one).
if command -v python3 >/dev/null 2>&1; then
    check "the manifest records skipped: [{glob, count 2, reason}]" python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
assert m["skipped"] == [{"glob": "model.layers.*.self_attn.rotary_emb.inv_freq", "count": 2, "reason": "not weights"}], m.get("skipped")
assert not any("inv_freq" in t["name"] for t in m["tensors"])
' bin-2/tpshard.json
else
    skip "python3 not found: the manifest's skipped key is not read back independently"
fi
check "check --source accepts a set whose skipped buffers the source has" \
    "$TPSHARD" check bin-2 --source "$M/tiny-llama-bin/pytorch_model.bin" -q
# reshard keeps the record; merge says the buffers are not restored, and restores the rest.
"$TPSHARD" reshard bin-2 --tp 4 -o bin-r4 -q 2>/dev/null
check "reshard keeps the manifest's skipped record" grep -q '"skipped": \[' bin-r4/tpshard.json
"$TPSHARD" merge bin-2 -o merged-bin.safetensors >/dev/null 2>merge.err
rc=$?
"$TPSHARD" merge st-2 -o merged-st.safetensors -q 2>/dev/null
if [ "$rc" -eq 0 ] && grep -q "tpshard merge: not restored: 2 tensors model.layers.\*.self_attn.rotary_emb.inv_freq (not weights)" merge.err &&
    cmp -s merged-bin.safetensors merged-st.safetensors; then
    ok "merge says the skipped buffers are not restored, and restores every weight"
else
    notok "merge says the skipped buffers are not restored, and restores every weight"
    sed 's/^/#   /' merge.err
fi
"$TPSHARD" merge st-2 -o merged-q.safetensors -q >/dev/null 2>mq.err
check "merge of a set that skipped nothing says nothing of buffers" test ! -s mq.err

# GPT-2's attn.bias (the causal mask) and attn.masked_bias: one line per glob, absent from
# every rank, rank files identical to tiny-gpt2's.
"$TPSHARD" split "$M/tiny-gpt2-buffers/model.safetensors" --tp 2 -o gpt2b >/dev/null 2>gpt2b.err
rc=$?
"$TPSHARD" split "$M/tiny-gpt2/model.safetensors" --tp 2 -o gpt2p -q >/dev/null 2>&1
same=yes
for f in gpt2p/*.safetensors; do cmp -s "$f" "gpt2b/$(basename "$f")" || same=no; done
if [ "$rc" -eq 0 ] && [ "$same" = yes ] &&
    grep -qx "tpshard split: skipped 2 tensors: {transformer.,}h.\*.attn.bias (not weights)" gpt2b.err &&
    grep -qx "tpshard split: skipped 2 tensors: {transformer.,}h.\*.attn.masked_bias (not weights)" gpt2b.err; then
    ok "tiny-gpt2-buffers: attn.bias and attn.masked_bias skipped, one line each, ranks as tiny-gpt2's"
else
    notok "tiny-gpt2-buffers: attn.bias and attn.masked_bias skipped, one line each, ranks as tiny-gpt2's"
    echo "#   exit $rc, same rank files: $same"
    sed 's/^/#   /' gpt2b.err
fi
expect_exit 0 "tpshard plan: skipped 2 tensors: {transformer.,}h.*.attn.masked_bias (not weights)" \
    "plan prints the skipped lines too" "$TPSHARD" plan "$M/tiny-gpt2-buffers/model.safetensors" --tp 2
check "plan --json lists the skipped globs" sh -c \
    '"$0" plan "$1" --tp 2 --json -q | grep -q "\"glob\": \"{transformer.,}h.\*.attn.bias\""' \
    "$TPSHARD" "$M/tiny-gpt2-buffers/model.safetensors"

# A layout's skip: is data: a custom layout skips what it names, and the parser checks it.
printf 'skip:\n  - match: "model.layers.*.mlp.*.weight"\n    reason: dropped for this test\ndefault: {split: replicate}\n' >skip.yaml
expect_exit 0 "skipped 6 tensors: model.layers.*.mlp.*.weight (dropped for this test)" \
    "a custom layout's skip: drops what it matches" "$TPSHARD" plan "$M/tiny-llama/model.safetensors" --tp 2 --layout skip.yaml
printf 'skip:\n  - match: "a.b"\ndefault: {split: replicate}\n' >skip-bad.yaml
expect_exit 3 "skip-bad.yaml:2:5: a skip entry needs match (one glob) and reason" "skip: without a reason: exit 3" \
    "$TPSHARD" layout --check skip-bad.yaml
printf 'architectures: [LlamaForCausalLM, LlamaForCausalLM]\ndefault: {split: replicate}\n' >arch-bad.yaml
expect_exit 3 "arch-bad.yaml:1:35: architectures lists 'LlamaForCausalLM' twice" "architectures: with a repeat: exit 3" \
    "$TPSHARD" layout --check arch-bad.yaml

# The manifest's skipped key is read strictly: an empty list or a count of 0 is exit 3.
for bad in empty:'"skipped": [],' zero:'"skipped": [{"glob": "x", "count": 0, "reason": "r"}],'; do
    name=${bad%%:*} text=${bad#*:}
    cp -R bin-2 "man-$name"
    awk -v t="$text" '/^  "skipped": \[/ {print "  " t; skip=1; next} skip && /^  \],/ {skip=0; next} !skip' \
        bin-2/tpshard.json >"man-$name/tpshard.json"
    expect_exit 3 "skipped" "a manifest whose skipped is $name: exit 3" "$TPSHARD" inspect "man-$name"
done
