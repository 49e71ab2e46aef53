#!/bin/sh
# What verify runs its products on, said once (issue 46): the text report's "ranks' GEMM: ...;
# reference: ..." line and --json's gemm / reference_kernel; the BLAS found at run time
# (verify/math/blas.h) on every path it looks: the system's OpenBLAS, $TPSHARD_BLAS,
# scipy-openblas32 (its scipy_-prefixed symbols) beside the executable; and a run on the plain
# loops of a build that looks for a BLAS warns once on stderr and still verifies.
# The system's BLAS is hidden in a mount namespace of this test's own (unshare -m, bind-mounting
# /dev/null over its files), where the machine allows it; elsewhere those cases skip, saying so.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models/tiny-llama"
"$TPSHARD" split "$M/model.safetensors" --tp 2 -q -o "$T/tp2" || { notok "split of the tiny llama"; exit 0; }

json_field() { # FILE KEY -> the string value of KEY in a --json report
    sed -n "s/.*\"$2\": *\"\\([^\"]*\\)\".*/\\1/p" "$1" | head -n 1
}

"$TPSHARD" verify "$T/tp2" --json >"$T/v.json" 2>"$T/v.err"
gemm=$(json_field "$T/v.json" gemm)
kernel=$(json_field "$T/v.json" reference_kernel)
[ -n "$gemm" ] && [ -n "$kernel" ] && ok "verify --json names the GEMM ($gemm) and the reference kernel ($kernel)" ||
    notok "verify --json names the GEMM and the reference kernel: '$gemm' '$kernel'"

# The text report says the same, once.
"$TPSHARD" verify "$T/tp2" --layer all >"$T/v.txt" 2>&1
n=$(grep -c "^ranks' GEMM: $gemm; reference: $kernel\$" "$T/v.txt")
[ "$n" = 1 ] && ok "the text report says once which GEMM and which reference kernel ran" ||
    notok "the text report says once which GEMM and which reference kernel ran ($n lines)"

# The kernel named is the one that ran: forced, the report follows (tests/unit's
# test_verify_ref_kernels checks the kernels' results).
TPS_VREF_KERNEL=portable "$TPSHARD" verify "$T/tp2" --json >"$T/p.json" 2>/dev/null
[ "$(json_field "$T/p.json" reference_kernel)" = "host float64 kernel portable" ] &&
    ok "TPS_VREF_KERNEL=portable: the report names the portable kernel" ||
    notok "TPS_VREF_KERNEL=portable: the report says '$(json_field "$T/p.json" reference_kernel)'"

case "$gemm" in "plain loops (built with HAVE_BLAS=0)")
    skip "the BLAS cases: $TPSHARD was built with HAVE_BLAS=0 (the plain loops only)"
    exit 0 ;;
esac

if ldconfig -p 2>/dev/null | grep -q 'libopenblas.so.0'; then
    case "$gemm" in *"(libopenblas.so.0)") ok "the system's OpenBLAS is found: $gemm" ;;
    *) notok "the system has libopenblas.so.0, verify runs on: $gemm" ;; esac
    [ -s "$T/v.err" ] && notok "a run with a BLAS prints nothing on stderr: $(head -n 1 "$T/v.err")" ||
        ok "a run with a BLAS prints nothing on stderr"
else
    skip "the system's OpenBLAS: no libopenblas.so.0 in ldconfig's cache"
fi

# The scipy-openblas32 wheel the pip tier downloads (tests/interop/wheel/setup_wheel.sh).
whl=$(ls "$TPS_TOP"/build/wheelhouse/scipy_openblas32-*.whl 2>/dev/null | head -n 1)
sob=
if [ -n "$whl" ]; then
    site="$T/prefix/lib/python3.99/site-packages"
    mkdir -p "$T/prefix/bin" "$site"
    cp "$TPSHARD" "$T/prefix/bin/tpshard"
    /usr/bin/python3 -m zipfile -e "$whl" "$site" &&
        sob=$(ls "$site"/scipy_openblas32/lib/libscipy_openblas*.so | head -n 1)
fi

if ! blas_hidden true 2>/dev/null; then
    skip "the plain-loop and scipy-openblas32 cases: this machine does not let the test hide its BLAS (unshare -m, mount --bind)"
    exit 0
fi

blas_hidden "$TPSHARD" verify "$T/tp2" --json >"$T/h.json" 2>"$T/h.err"
rc=$?
[ $rc = 0 ] && [ "$(json_field "$T/h.json" gemm)" = "plain loops (no BLAS found)" ] &&
    ok "no BLAS to be found: verify passes on the plain loops, and says so" ||
    notok "no BLAS to be found: exit $rc, gemm '$(json_field "$T/h.json" gemm)'"
[ "$(grep -c 'warning: no BLAS found' "$T/h.err")" = 1 ] && grep -q 'apt-get install libopenblas0' "$T/h.err" &&
    ok "no BLAS to be found: one warning on stderr, saying how to get one" ||
    { notok "no BLAS to be found: one warning on stderr, saying how to get one"; sed 's/^/#   /' "$T/h.err"; }

if [ -z "$sob" ]; then
    skip "scipy-openblas32's cases: no wheel in build/wheelhouse (sh tests/interop/wheel/setup_wheel.sh)"
    exit 0
fi
TPSHARD_BLAS=$sob blas_hidden "$TPSHARD" verify "$T/tp2" --json >"$T/s.json" 2>"$T/s.err"
case "$(json_field "$T/s.json" gemm)" in *"(libscipy_openblas.so)") ok "TPSHARD_BLAS names scipy-openblas32's library: found under its scipy_ prefix" ;;
*) notok "TPSHARD_BLAS names scipy-openblas32's library: gemm '$(json_field "$T/s.json" gemm)'" ;; esac
# As pip lays it out: PREFIX/bin/tpshard and PREFIX/lib/python3.X/site-packages/scipy_openblas32.
blas_hidden "$T/prefix/bin/tpshard" verify "$T/tp2" --json >"$T/b.json" 2>"$T/b.err"
case "$(json_field "$T/b.json" gemm)" in *"(libscipy_openblas.so)") ok "scipy-openblas32 beside the executable (a pip install's layout) is found" ;;
*) notok "scipy-openblas32 beside the executable: gemm '$(json_field "$T/b.json" gemm)'"; sed 's/^/#   /' "$T/b.err" ;; esac
[ -s "$T/b.err" ] && notok "found beside the executable: no warning ($(head -n 1 "$T/b.err"))" ||
    ok "found beside the executable: no warning"
