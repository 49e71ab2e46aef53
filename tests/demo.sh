#!/bin/sh
# The main job on the bundled tiny Llama-style model (GQA with 2 KV heads, vocabulary 1003):
# inspect it, split it at tp 2, 4 and 8, check each shard set, verify one at tp 8, and
# reshard 8 -> 4.  Every step's command line is printed first, as it would be typed from the
# repository root (out/ standing for the scratch directory).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
T="$top/tpshard"
model="$top/testdata/models/tiny-llama"
out=$(mktemp -d "${TMPDIR:-/tmp}/tpshard-demo.XXXXXX")
trap 'rm -rf "$out"' EXIT
say() {
    echo "\$ $*" | sed "s|$out|out|g; s|$top/tpshard|./tpshard|g; s|$top/||g"
}
run() {
    say "$@"
    "$@"
}
say "$T" inspect "$model/model.safetensors" "| tail -n 4"
"$T" inspect "$model/model.safetensors" | tail -n 4
for tp in 2 4 8; do
    run "$T" split "$model/model.safetensors" --tp "$tp" --preset llama --config "$model/config.json" -o "$out/tp$tp"
    run "$T" check "$out/tp$tp"
done
if "$T" help verify >/dev/null 2>&1; then
    run "$T" verify "$out/tp8" --source "$model/model.safetensors" --layer all
fi
run "$T" reshard "$out/tp8" --tp 4 -o "$out/tp8to4"
for r in 0 1 2 3; do
    run cmp "$out/tp8to4/model-rank-$r-of-4.safetensors" "$out/tp4/model-rank-$r-of-4.safetensors"
done
echo "demo: reshard 8->4 is byte-identical to split at 4"
