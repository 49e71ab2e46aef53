#!/bin/sh
# The layers' include rules.  Between the tops: lib/ is the engine and includes only lib/;
# formats/ (the file formats) builds on lib/ and never includes cmd/ or verify/; verify/
# never includes cmd/ (libtpshard.a, which holds all three, does not depend on the command
# line).  Inside each of lib/, verify/ and formats/, the folders stand in the order the
# Makefile writes down once (LIB_LAYERS, VERIFY_LAYERS, FORMATS_LAYERS, bottom first), and a
# file of a folder includes only its own folder and the folders below it, so the folders
# include each other without a cycle (a cycle needs an arrow up somewhere, and that arrow is
# reported).  The top's own files are the face, above every folder, unless the order names
# them as "." (formats/: the reader interface and the writers' plumbing, below every format).
# A header at the top named after a folder (lib/layout.h, formats/open.h) is that folder's
# face to cmd/ (tests/lint/thin_cmd.sh) and stands with its folder, not with the top.
# A folder the order does not name is reported, and so is a top with more files than it may
# keep (lib/ a dozen, verify/ and formats/ 8, faces not counted: the rest lives in the
# folders).  Each #include "..." of a .c, .h or .cu file is resolved the way the compiler
# resolves it (beside the including file first, then from the top of the tree, -I.), so a
# relative "../formats/x.h" counts as formats/ too.
#   sh tests/lint/layering.sh [ROOT]    prints each breach as FILE:LINE: ... and exits 1 if any
set -u
cd "${1:-$(dirname "$0")/../..}" || exit 2
# layers_of TOP: its order from the Makefile (TPS_<TOP>_LAYERS overrides, for the selftest)
layers_of() {
    var=$(echo "$1" | tr a-z A-Z)_LAYERS
    eval "over=\${TPS_$var:-}"
    if [ -n "$over" ]; then echo "$over"; else sed -n "s/^$var *:= *//p" Makefile 2>/dev/null; fi
}
# rank LAYERS FOLDER: its place in the order (1 = bottom); the top's files (".") not named
# in the order are the face, above all; 0 for a folder the order does not name
rank() {
    i=0
    for l in $1; do
        i=$((i + 1))
        [ "$l" = "$2" ] && echo $i && return
    done
    [ "$2" = . ] && echo $((i + 1)) && return
    echo 0
}
# below LAYERS RANK: what a file of that rank may include, for the message
below() {
    i=0 out=
    for l in $1; do
        i=$((i + 1))
        [ $i -le "$2" ] && out="$out${out:+, }$l/"
    done
    echo "$out" | sed 's|\./|its top files|'
}
forbidden() { # top of the including file -> the tops it may not include, as a pattern
    case "$1" in
    lib) echo 'formats|cmd|verify' ;;
    formats) echo 'cmd|verify' ;;
    verify) echo 'cmd' ;;
    *) echo '' ;;
    esac
}
# folder_of TOP RELATIVE-PATH: the folder a file stands with: its own, "." at the top, or the
# folder a top header is named after (its face)
folder_of() {
    d=$(dirname "$2")
    d=${d%%/*}
    if [ "$d" = . ]; then
        b=$(basename "$2" .h)
        case "$2" in *.h) [ -d "$1/$b" ] && d=$b ;; esac
    fi
    echo "$d"
}
bad=0
n=0
for t in lib verify formats; do
    [ -d "$t" ] || continue
    layers=$(layers_of "$t")
    for d in $(find "$t" -mindepth 1 -maxdepth 1 -type d | sort); do
        name=${d#"$t"/}
        [ "$t/$name" = lib/presets ] && continue # data (the preset YAML files), not a module
        if [ "$(rank "$layers" "$name")" -eq 0 ]; then
            echo "$d/: a folder of $t/ that $(echo "$t" | tr a-z A-Z)_LAYERS (Makefile) does not place: add it to the order"
            bad=$((bad + 1))
        fi
    done
    most=8
    [ "$t" = lib ] && most=12
    top=$(for f in $(find "$t" -maxdepth 1 -type f \( -name '*.[ch]' \)); do
        [ "$(folder_of "$t" "${f#"$t"/}")" = . ] && echo "$f"
    done | wc -l)
    if [ "$top" -gt $most ]; then
        echo "$t/: $top files at its top (at most $most: the rest lives in its folders)"
        bad=$((bad + 1))
    fi
done
for f in $(find lib formats verify -type f \( -name '*.[ch]' -o -name '*.cu' \) | sort); do
    from=${f%%/*}
    deny=$(forbidden "$from")
    layers=$(layers_of "$from")
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
        elif [ "$from" = "$to" ]; then
            fdir=$(folder_of "$from" "${f#"$from"/}") tdir=$(folder_of "$to" "${target#"$to"/}")
            [ "$fdir" = "$tdir" ] && continue
            fr=$(rank "$layers" "$fdir") tr=$(rank "$layers" "$tdir")
            [ "$fr" -eq 0 ] && continue # an unplaced folder: reported above
            if [ "$tr" -gt "$fr" ]; then
                what=$from/$fdir/
                [ "$fdir" = . ] && what="$from/'s top"
                echo "$f:$line: $what includes $target ($what may include only $(below "$layers" "$fr"))"
                bad=$((bad + 1))
            fi
        fi
    done <<EOT
$out
EOT
done
echo "layering: $n includes in lib/ formats/ verify/ (bottom up: lib/ $(layers_of lib); verify/ $(layers_of verify); formats/ $(layers_of formats)), $bad across a forbidden boundary"
[ "$bad" -eq 0 ]
