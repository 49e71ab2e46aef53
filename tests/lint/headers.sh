#!/bin/sh
# Every header of lib/, formats/, verify/ and cmd/ compiles on its own, included first and
# twice (it includes what it uses, and its include guard holds), with warnings as errors.
#   CC=cc CFLAGS='...' sh tests/lint/headers.sh [ROOT]   (make lint passes the build's flags)
# A template header, made to be included several times by one .c file with different
# macros defined (verify/math/ops_tmpl.h), says "No include guard" in its opening comment; it
# is checked where it is instantiated, by the build, not here.
set -u
cd "${1:-$(dirname "$0")/../..}" || exit 2
cc=${CC:-cc}
flags=${CFLAGS:--std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla}
bad=0
n=0
for h in $(find lib formats verify cmd -type f -name '*.h' | sort); do
    head -n 8 "$h" | grep -q 'No include guard' && continue
    n=$((n + 1))
    twice="#include \"$h\"
#include \"$h\""
    # shellcheck disable=SC2086
    if ! out=$(printf '%s\n' "$twice" | $cc $flags -I. -Werror -fsyntax-only -x c - 2>&1); then
        echo "$h: does not compile on its own:"
        printf '%s\n' "$out" | head -n 8 | sed 's/^/    /'
        bad=$((bad + 1))
    fi
done
echo "headers: $n compiled alone, $bad failed"
[ "$bad" -eq 0 ]
