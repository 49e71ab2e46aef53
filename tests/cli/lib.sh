# Shared helpers for CLI tests (POSIX sh).  Source it first:  . "$TPS_TOP/tests/cli/lib.sh"
# It makes a scratch directory $T (removed on exit) and cds into it.
set -u
: "${TPS_TOP:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${TPSHARD:=$TPS_TOP/tpshard}"
T=$(mktemp -d "${TMPDIR:-/tmp}/tpshard-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
FIX="$TPS_TOP/testdata"

ok() { echo "ok - $*"; }
notok() { echo "not ok - $*"; }
skip() { echo "skip - $*"; }

# check NAME COMMAND...: ok when the command succeeds.
check() {
    name=$1
    shift
    if "$@" >"$T/.out" 2>&1; then ok "$name"; else
        notok "$name"
        sed 's/^/#   /' "$T/.out" | head -20
    fi
}

# expect_exit CODE FRAGMENT NAME COMMAND...: ok when COMMAND exits with CODE and its stderr
# contains FRAGMENT (empty FRAGMENT: any message).
expect_exit() {
    code=$1 frag=$2 name=$3
    shift 3
    "$@" >"$T/.out" 2>"$T/.err"
    rc=$?
    if [ "$rc" -eq "$code" ] && { [ -z "$frag" ] || grep -qF -- "$frag" "$T/.err"; }; then
        ok "$name"
    else
        notok "$name"
        echo "#   expected exit $code with '$frag', got exit $rc:"
        sed 's/^/#   /' "$T/.err" | head -10
    fi
}
