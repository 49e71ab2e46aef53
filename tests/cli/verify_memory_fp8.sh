#!/bin/sh
# verify holds an FP8 layer's weights at one byte an element (issue 36): a DeepSeek-V3-shaped
# FP8 block-scaled layer (tests/bench/gen_moe.py --fp8; hidden 2048, 128 MLA heads: o_proj
# 2048 x 16384, 128 MiB as float32) split at tp 8; the peak resident memory of `verify --layer
# all` stays under three times that one matrix widened to float32.  Measured: 218 MiB.  With
# the attention projections widened to float32 by the reference and by each of the 8 ranks,
# as verify did before, it peaked at 723 MiB: the test fails then.
. "$TPS_TOP/tests/cli/lib.sh"
PY=/usr/bin/python3
GEN="$TPS_TOP/tests/bench/gen_moe.py"
if sanitized; then
    skip "verify's memory on an FP8 layer: a sanitizer build's resident memory holds its shadow and quarantine"
    exit 0
fi
if ! "$PY" -c "import numpy" 2>/dev/null; then
    skip "verify's memory on an FP8 layer: needs numpy for $PY (tests/bench/gen_moe.py)"
    exit 0
fi
"$PY" "$GEN" "$T/src" 8 --fp8 --layers 1 --dense 0 --hidden 2048 --heads 128 --q-lora 512 --moe-inter 1024 \
    --vocab 1024 || notok "gen_moe.py --fp8"
"$TPSHARD" split "$T/src" --tp 8 -o "$T/set" -q || notok "split of the FP8 layer"
# the child's peak resident set in KiB (Linux ru_maxrss)
peak=$("$PY" -c 'import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if rc == 0 else "rc%d" % rc)' \
    "$TPSHARD" verify "$T/set" --layer all -q)
o_f32=$((2048 * 16384 * 4 / 1024)) # KiB: o_proj as float32
case "$peak" in
*rc*) notok "verify --layer all of the FP8 layer: $peak" ;;
*)
    if [ "$peak" -lt $((3 * o_f32)) ]; then
        ok "verify --layer all of an FP8 layer: peak RSS $peak KiB, under 3x o_proj as float32 ($o_f32 KiB)"
    else
        notok "verify --layer all of an FP8 layer: peak RSS $peak KiB, not under 3x o_proj as float32 ($o_f32 KiB): weights widened whole?"
    fi
    ;;
esac
