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

# expect_mismatch STAGE FRAG NAME CMD...: CMD (a verify) exits 1 naming "STAGE stage" and
# saying FRAG (which names the rank).
expect_mismatch() {
    em_stage=$1 em_frag=$2 em_name=$3
    shift 3
    "$@" >"$T/.out" 2>"$T/.err"
    rc=$?
    if [ $rc -eq 1 ] && grep -qF -- "$em_stage stage" "$T/.err" && grep -qF -- "$em_frag" "$T/.err"; then
        ok "$em_name"
    else
        notok "$em_name"
        echo "#   expected exit 1 with '$em_stage stage' and '$em_frag', got exit $rc:"
        sed 's/^/#   /' "$T/.err" | head -5
    fi
}

# expect_wrong_cut FRAG NAME VERIFY-ARGS...: a set cut the wrong way makes verify exit 1 (FRAG
# in its message) on the CPU ranks and on the device path (devsim: the GPU backend's
# primitives in host memory), so that no wrong cut passes on either.
expect_wrong_cut() {
    ewc_frag=$1 ewc_name=$2
    shift 2
    for ewc_backend in cpu devsim; do
        expect_exit 1 "$ewc_frag" "$ewc_name [$ewc_backend]" "$TPSHARD" verify "$@" --backend "$ewc_backend"
    done
}

# split_wrong NAME PRESET MODEL-DIR TP RULE OUT: splits MODEL-DIR at TP into OUT with PRESET's
# layout plus RULE (YAML lines) inserted as its first rule, which wins over the preset's own:
# how the verify tests make a set whose bytes are intact and whose cut is wrong.  Fails
# (saying so) when split refuses.
split_wrong() {
    sw_name=$1 sw_preset=$2 sw_model=$3 sw_tp=$4 sw_rule=$5 sw_out=$6
    "$TPSHARD" layout --preset "$sw_preset" >"$T/$sw_name.base.yaml" || { notok "$sw_name: layout --preset"; return 1; }
    awk -v rule="$sw_rule" '{ print } /^rules:/ { print rule }' "$T/$sw_name.base.yaml" >"$T/$sw_name.yaml"
    if ! "$TPSHARD" split "$sw_model" --tp "$sw_tp" --layout "$T/$sw_name.yaml" --config "$sw_model/config.json" \
        -o "$sw_out" -q >"$T/.out" 2>&1; then
        notok "$sw_name: split with the wrong layout"
        sed 's/^/#   /' "$T/.out" | head -5
        return 1
    fi
}

# path_without_tpshard: $PATH less every directory that holds a tpshard, so that a test of
# what a fresh shell finds (the README's blocks, an installed wheel) never runs an installed
# one by accident.
path_without_tpshard() {
    pwt_out= pwt_ifs=$IFS
    IFS=:
    for pwt_d in $PATH; do
        [ -n "$pwt_d" ] && [ -x "$pwt_d/tpshard" ] && continue
        pwt_out="${pwt_out:+$pwt_out:}$pwt_d"
    done
    IFS=$pwt_ifs
    printf '%s\n' "$pwt_out"
}

# sanitized: true when $TPSHARD was built with a sanitizer (SANITIZE=...): its resident memory
# then holds shadow memory and a quarantine of freed blocks, so peak-memory bounds mean nothing.
sanitized() {
    ldd "$TPSHARD" 2>/dev/null | grep -Eq 'lib(a|t|ub)san'
}

# same_tensors A B: every tensor of safetensors file B is in A with the same dtype, shape and bytes,
# and A holds no other.
same_tensors() {
    /usr/bin/python3 - "$1" "$2" <<'PY'
import json, struct, sys
def read(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n)); h.pop("__metadata__", None); base = 8 + n
        return {k: (v["dtype"], v["shape"], (f.seek(base + v["data_offsets"][0]), f.read(v["data_offsets"][1] - v["data_offsets"][0]))[1]) for k, v in h.items()}
a, b = read(sys.argv[1]), read(sys.argv[2])
bad = [k for k in b if a.get(k) != b[k]] + sorted(set(a) - set(b))
sys.exit("differ: %s" % bad[:5] if bad else 0)
PY
}

# blas_hidden COMMAND...: runs COMMAND where the system's BLAS libraries (those verify looks for
# by name: verify/math/blas.h) read as empty files, in a mount namespace of its own; fails
# without running it where the machine does not allow one (unshare -m, mount --bind).
blas_hidden() {
    _files=$(for _n in libopenblas.so.0 libopenblas.so libcblas.so.3; do
        ldconfig -p 2>/dev/null | sed -n "s/.*$_n .*=> //p"
    done | xargs -r readlink -f | sort -u)
    # shellcheck disable=SC2016
    unshare -m sh -c 'for f in $0; do mount --bind /dev/null "$f" || exit 99; done; exec "$@"' "$_files" "$@"
}
