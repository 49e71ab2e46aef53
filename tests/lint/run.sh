#!/bin/sh
# make lint: every check below runs, even after one fails; each prints one line (and, when it
# fails, what it found), and the last line is the verdict:
#   lint: passed (7 checks)        or        lint: FAILED: werror layering
# Checks:
#   werror       what make test compiles with $(CC) (library, tpshard's objects, unit tests,
#                fuzz replays), built with -Werror in $LINT_BUILD (build/lint), so build/
#                and ./tpshard stay as they are; incremental like any build
#   headers      every header of lib/ formats/ verify/ cmd/ compiles alone (headers.sh)
#   layering     lib/ includes only lib/, formats/ no cmd/ or verify/, and inside lib/, verify/
#                and formats/ a folder only those below it in the Makefile's order (layering.sh)
#   circles      no include or call circle between the files of lib/ formats/ verify/ cmd/,
#                calls read from the -Werror build's objects (circles.sh)
#   thin-cmd     cmd/ is thin: no cmd/*.c over 260 lines, no function of cmd/ over 80, and
#                the library included only through its faces (lib/NAME.h, formats/NAME.h,
#                verify/verify.h), at most 12 headers: a command parses, calls one library
#                entry and prints what it returns (thin_cmd.sh; issues 34, 43)
#   cited-paths  every repository path a comment cites exists (cited_paths.sh)
#   selftest     the layering, circles, thin-cmd, headers and cited-paths checks catch what
#                they are for, on planted trees (selftest.sh)
# Run through make (make -j2 lint), which passes MAKE, CC, the build's flags and LINT_BUILD.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=
n=0
check() { # NAME COMMAND...: its last line on success, everything it said on failure
    name=$1
    shift
    n=$((n + 1))
    if "$@" >"$out" 2>&1; then
        echo "ok - $(tail -n 1 "$out")"
    else
        echo "not ok - $name"
        grep -v '^  [A-Z][A-Z]*  ' "$out" | tail -n 40 | sed 's/^/    /'
        failed="$failed $name"
    fi
}
werror() {
    ${MAKE:-make} --no-print-directory BUILD="${LINT_BUILD:-build/lint}" CFLAGS="${LINT_CFLAGS:--O2 -g -Werror}" \
        HAVE_CUDA=0 HAVE_MPI=0 lint-build && echo "werror: built with -Werror in ${LINT_BUILD:-build/lint}"
}
check werror werror
check circles sh tests/lint/circles.sh . "${LINT_BUILD:-build/lint}"
check thin-cmd sh tests/lint/thin_cmd.sh
check headers env CFLAGS="${HDR_CFLAGS:-}" sh tests/lint/headers.sh
check layering sh tests/lint/layering.sh
check cited-paths sh tests/lint/cited_paths.sh
check selftest sh tests/lint/selftest.sh
if [ -z "$failed" ]; then
    echo "lint: passed ($n checks)"
else
    echo "lint: FAILED:$failed"
    exit 1
fi
