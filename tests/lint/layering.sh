#!/bin/sh
# The layers' include rules: lib/ is the engine and includes only lib/; formats/ (the file
# formats) builds on lib/ and never includes cmd/ or verify/; verify/ never includes cmd/
# (libtpshard.a, which holds all three, does not depend on the command line).  Inside lib/,
# the folders stand in the order the Makefile's LIB_LAYERS writes down (bottom first), and a
# file of a folder includes only its own folder and the folders below it, so the folders include each
# other without a cycle (a cycle needs an arrow up somewhere, and that arrow is reported); a
# folder of lib/ the order does not name is reported too, and so is a top of lib/ with more
# than a dozen files (the library's face; the rest lives in the folders).  Each
# #include "..." of a .c, .h or .cu file is resolved the way the compiler resolves it
# (beside the including file first, then from the top of the tree, -I.), so a relative
# "../formats/x.h" counts as formats/ too.
#   sh tests/lint/layering.sh [ROOT]    prints each breach as FILE:LINE: ... and exits 1 if any
set -u
cd "${1:-$(dirname "$0")/../..}" || exit 2
layers=${TPS_LIB_LAYERS:-$(sed -n 's/^LIB_LAYERS *:= *//p' Makefile 2>/dev/null)}
# lib_rank FOLDER: its place in the order (1 = bottom), 0 when the order does not name it
lib_rank() {
    i=0
    for l in $layers; do
        i=$((i + 1))
        [ "$l" = "$1" ] && echo $i && return
    done
    echo 0
}
# lib_below RANK: the folders a file of that rank may include, for the message
lib_below() {
    i=0 out=
    for l in $layers; do
        i=$((i + 1))
        [ $i -le "$1" ] && out="$out${out:+, }$l/"
    done
    echo "$out"
}
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
for d in $(find lib -mindepth 1 -maxdepth 1 -type d | sort); do
    name=${d#lib/}
    [ "$name" = presets ] && continue # data (the preset YAML files), not a module
    if [ "$(lib_rank "$name")" -eq 0 ]; then
        echo "$d/: a folder of lib/ that LIB_LAYERS (Makefile) does not place: add it to the order"
        bad=$((bad + 1))
    fi
done
top=$(find lib -maxdepth 1 -type f \( -name '*.[ch]' \) | wc -l)
if [ "$top" -gt 12 ]; then
    echo "lib/: $top files at its top (at most 12: the rest lives in its folders)"
    bad=$((bad + 1))
fi
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
        elif [ "$from" = lib ] && [ "$to" = lib ]; then
            fdir=$(dirname "${f#lib/}") tdir=$(dirname "${target#lib/}")
            fdir=${fdir%%/*} tdir=${tdir%%/*}
            [ "$fdir" = . ] && continue # the library's face may include any folder
            fr=$(lib_rank "$fdir") tr=$(lib_rank "$tdir")
            if [ "$tdir" = . ] || { [ "$fr" -gt 0 ] && [ "$tr" -gt "$fr" ]; }; then
                echo "$f:$line: lib/$fdir/ includes $target (lib/$fdir/ may include only $(lib_below "$fr"))"
                bad=$((bad + 1))
            fi
        fi
    done <<EOT
$out
EOT
done
echo "layering: $n includes in lib/ formats/ verify/ (lib/ folders bottom up: $layers), $bad across a forbidden boundary"
[ "$bad" -eq 0 ]
