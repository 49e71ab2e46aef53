#!/bin/sh
# torch.save .bin, .npz and .npy inputs through the CLI: every good fixture inspects, hostile
# pickles are refused without running their payload, and a split of a .bin (single or
# multi-file) is byte-identical to the split of the same model saved as safetensors.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"
TD="$FIX/torch"
MARKER=tpshard_pwned_marker # what the hostile payloads would create in the cwd

for f in "$TD"/*.bin "$TD"/*.npz "$TD"/*.npy "$TD"/multi; do
    n=$(awk 'END { print NR }' "$f.expect" 2>/dev/null || awk 'END { print NR }' "$TD/multi/pytorch_model.bin.index.json.expect")
    if "$TPSHARD" inspect --json "$f" >out.json 2>err.txt; then
        got=$(grep -c '"dtype"' out.json)
        if [ "$got" -eq "$n" ]; then ok "inspect $(basename "$f"): $n tensors"; else
            notok "inspect $(basename "$f"): $got tensors, expected $n"
        fi
    else
        notok "inspect $(basename "$f")"
        sed 's/^/#   /' err.txt
    fi
done

# Same names, dtypes and shapes from the .bin and the safetensors copy written independently.
"$TPSHARD" inspect --json "$TD/llama_bf16.bin" | grep -E '"(name|dtype)"|^ *[0-9]+,?$' >bin.txt
"$TPSHARD" inspect --json "$TD/llama_bf16.safetensors" | grep -E '"(name|dtype)"|^ *[0-9]+,?$' >st.txt
if [ -s bin.txt ] && cmp -s bin.txt st.txt; then ok "llama .bin and .safetensors list the same tensors"; else
    notok "llama .bin and .safetensors list the same tensors"
    diff bin.txt st.txt | head -10 | sed 's/^/#   /'
fi

for f in global_os_system global_posix_system builtins_eval stack_global inst_opcode; do
    rm -f "$MARKER"
    expect_exit 3 "refused" "hostile pickle $f refused" "$TPSHARD" inspect "$FIX/bad/torch/$f.bin"
    if [ -e "$MARKER" ]; then notok "hostile pickle $f ran its payload"; else ok "hostile pickle $f: no marker file"; fi
done
expect_exit 3 "expected a quoted string" "npy header with a call expression refused" \
    "$TPSHARD" inspect "$FIX/bad/npy/call_expression.npy"
[ -e "$MARKER" ] && notok "npy call expression ran" || ok "npy call expression: no marker file"
expect_exit 3 "torch.save(torch.load(f, weights_only=True), \"model.bin\")" "legacy format refused with re-save advice" \
    "$TPSHARD" inspect "$FIX/bad/torch/legacy_format.bin"
expect_exit 3 "convert it to safetensors" "TorchScript archive refused with re-save advice" \
    "$TPSHARD" inspect "$FIX/bad/torch/torchscript.bin"

# Split equality: .bin, multi-file .bin index and safetensors give identical rank files.
cfg="$TD/llama_config.json"
if "$TPSHARD" layout --help >/dev/null 2>&1 && "$TPSHARD" split --help >/dev/null 2>&1; then
    for tp in 2 4; do
        "$TPSHARD" split -q "$TD/llama_bf16.safetensors" --tp $tp --preset llama --config "$cfg" -o "st$tp" 2>err.txt ||
            sed 's/^/#   /' err.txt
        for src in llama_bf16.bin multi; do
            out="$src-$tp"
            if "$TPSHARD" split -q "$TD/$src" --tp $tp --preset llama --config "$cfg" -o "$out" 2>err.txt; then
                same=yes
                for r in "st$tp"/*.safetensors; do
                    cmp -s "$r" "$out/$(basename "$r")" || same=no
                done
                [ -n "$(ls "st$tp"/*.safetensors 2>/dev/null)" ] || same=no
                if [ $same = yes ]; then ok "split $src --tp $tp equals the safetensors split byte for byte"; else
                    notok "split $src --tp $tp equals the safetensors split byte for byte"
                fi
            else
                notok "split $src --tp $tp"
                sed 's/^/#   /' err.txt
            fi
        done
    done
else
    skip "split equality: this build has no split/layout command"
fi
