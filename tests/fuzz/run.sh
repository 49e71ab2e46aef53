#!/bin/sh
# Runs libFuzzer targets one after another:  sh tests/fuzz/run.sh FUZZ_BUILD SECONDS TARGET...
# Each target starts from its seed corpus (tests/fuzz/corpus/<t>, read only) plus what earlier
# runs found (FUZZ_BUILD/corpus/<t>); a crash, leak, timeout or sanitizer report leaves the
# input in FUZZ_BUILD/artifacts/<t>/ and makes the script exit 1 after the remaining targets.
# tests/fuzz/<t>.dict, when present, is the target's libFuzzer dictionary.
# Extra libFuzzer flags: FUZZ_FLAGS (e.g. FUZZ_FLAGS=-jobs=2).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
build=$1 seconds=$2
shift 2
failed=
for t in "$@"; do
    bin=$build/fuzz/fuzz_$t
    dict=
    [ -f "tests/fuzz/$t.dict" ] && dict=-dict=tests/fuzz/$t.dict
    mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
    echo "fuzz: $t for ${seconds}s"
    # -timeout: an input taking 20 s is a hang to report; -rss_limit_mb: memory must stay
    # bounded whatever a header claims.
    # shellcheck disable=SC2086
    if ! "$bin" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$t/" $dict ${FUZZ_FLAGS:-} "$build/corpus/$t" "tests/fuzz/corpus/$t" \
        >"$build/fuzz-$t.log" 2>&1; then
        failed="$failed $t"
        echo "fuzz: $t FAILED; log $build/fuzz-$t.log, inputs in $build/artifacts/$t/"
        grep -m 5 -E 'ERROR|SUMMARY|runtime error' "$build/fuzz-$t.log"
    fi
    grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "$build/fuzz-$t.log" | tail -n 2
done
if [ -n "$failed" ]; then
    echo "fuzz: failed:$failed"
    exit 1
fi
echo "fuzz: all targets ran ${seconds}s without a finding"
