#!/bin/sh
# The layers' include rules: lib/ is the engine and includes only lib/; formats/ (the file
# formats) builds on lib/ and never includes cmd/ or verify/; verify/ never includes cmd/
# (libtpshard.a, which holds all three, does not depend on the command line).  Each
# #include "..." of a .c, .h or .cu file is resolved the way the compiler resolves it
# (beside the including file first, then from the top of the tree, -I.), so a relative
# "../formats/x.h" counts as formats/ too.
#   sh tests/lint/layering.sh [ROOT]    prints each breach as FILE:LINE: ... and exits 1 if any
set -u
cd "${1:-$(dirname "$0")/../..}" || exit 2
forbidden() { # layer of the including file -> the layers it may not include, as a pattern
    case "$1" in
    lib) echo 'formats|cmd|verify' ;;
    formats) echo 'cmd|verify' ;;
    verify) echo 'cmd' ;;
    *) echo '' ;;
    esac
}
bad=0
n=0
for f in $(find lib formats verify -type f \( -name '*.[ch]' -o -name '*.cu' \) | sort); do
    from=${f%%/*}
    deny=$(forbidden "$from")
    # FILE:LINE:path for every quoted include
    out=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
        sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1 \2/') || continue
    while read -r line inc; do
        [ -n "$inc" ] || continue
        n=$((n + 1))
        here=$(dirname "$f")/$inc
        if [ -e "$here" ]; then target=$(realpath -m --relative-to=. "$here"); else target=$inc; fi
        to=${target%%/*}
        [ "$target" = "$to" ] && continue
        if printf '%s\n' "$to" | grep -Eqx "$deny"; then
            echo "$f:$line: $from/ includes $target ($from/ may include none of $(echo "$deny" | sed 's|[|]|/, |g')/)"
            bad=$((bad + 1))
        fi
    done <<EOT
$out
EOT
done
echo "layering: $n includes in lib/ formats/ verify/, $bad across a forbidden boundary"
[ "$bad" -eq 0 ]
