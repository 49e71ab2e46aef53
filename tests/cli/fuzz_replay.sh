#!/bin/sh
# Replays every fuzz corpus file (tests/fuzz/corpus/<target>/) through its fuzz target's
# entry point, built with the ordinary compiler ($TPS_TOP/build/fuzz/replay_<target>, a
# prerequisite of make test): each seed and each input that once crashed must now pass
# without crashing.  Under SANITIZE=address,undefined (BUILD=...) the same run is checked by
# the sanitizers; TPS_FUZZ_REPLAY_DIR overrides where the replay binaries are.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

bindir=${TPS_FUZZ_REPLAY_DIR:-$TPS_TOP/build/fuzz}
n=0
for dir in "$TPS_TOP"/tests/fuzz/corpus/*/; do
    t=$(basename "$dir")
    n=$((n + 1))
    bin=$bindir/replay_$t
    if [ ! -x "$bin" ]; then
        notok "fuzz replay $t: $bin is missing (make builds it as a test prerequisite)"
        continue
    fi
    files=$(find "$dir" -type f ! -name '.*' | wc -l)
    if [ "$files" -eq 0 ]; then
        notok "fuzz replay $t: empty corpus"
        continue
    fi
    "$bin" "$dir" >"$T/out" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && grep -qx "$files inputs" "$T/out"; then
        ok "fuzz replay $t: $files inputs"
    else
        notok "fuzz replay $t: exit $rc after some of $files inputs"
        tail -n 15 "$T/out" | sed 's/^/#   /'
    fi
done
[ "$n" -gt 0 ] || notok "fuzz replay: no corpus under $TPS_TOP/tests/fuzz/corpus"
