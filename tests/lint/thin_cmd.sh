#!/bin/sh
# cmd/ is the library's face to the command line, thin: each command parses its options, calls
# one library entry and prints what it returns (issue 43).  Three limits hold it so:
#   - no cmd/*.c over 260 lines;
#   - no function of cmd/*.c or cmd/*.h over 80 lines, counted from the first line of its
#     definition to its closing brace (the project's style puts a function's opening and
#     closing braces, and the first line of its definition, at column 0);
#   - cmd/ includes the library only through its faces, at most 12 distinct headers in all.
#     A face is the header beside a library folder named after it: lib/NAME.h for lib/NAME/,
#     formats/NAME.h for formats/NAME/ (each includes what cmd/ may use of its folder), and
#     verify/verify.h for the whole of verify/.  An include is resolved as the compiler does
#     (beside the including file first, then from the top of the tree, -I.); cmd/'s own
#     headers are not the library's.
#   sh tests/lint/thin_cmd.sh [ROOT]    prints each breach as FILE:LINE: ... and exits 1 if any
set -u
cd "${1:-$(dirname "$0")/../..}" || exit 2
MAX_LINES=260
MAX_FUNCTION=80
MAX_HEADERS=12
bad=0
files=$(ls cmd/*.c 2>/dev/null)
all=$(ls cmd/*.c cmd/*.h 2>/dev/null)
# files over the limit: the first line past it
for f in $files; do
    n=$(wc -l <"$f")
    if [ "$n" -gt $MAX_LINES ]; then
        echo "$f:$((MAX_LINES + 1)): $n lines (at most $MAX_LINES: move what it computes into the library)"
        bad=$((bad + 1))
    fi
done
# functions over the limit: a definition's first line is the last line at column 0 starting an
# identifier before a '{' alone at column 0; it ends at the next '}' at column 0
long=$(awk -v max=$MAX_FUNCTION '
    FNR == 1 { infn = 0; cand = 0 }
    !infn && /^[A-Za-z_]/ { cand = FNR; sig = $0 }
    !infn && /^\{/ { infn = 1; start = cand; next }
    infn && /^\}/ {
        infn = 0
        n = FNR - start + 1
        if (n > max) {
            name = sig
            if (match(sig, /[A-Za-z_][A-Za-z_0-9]*[ ]*\(/)) name = substr(sig, RSTART, RLENGTH - 1)
            printf "%s:%d: %s: %d lines (at most %d: move what it computes into the library, or split it)\n",
                FILENAME, start, name, n, max
        }
    }' $all)
if [ -n "$long" ]; then
    echo "$long"
    bad=$((bad + $(echo "$long" | wc -l)))
fi
# the library's headers cmd/ includes: faces only, and few
is_face() {
    case "$1" in
    verify/verify.h) return 0 ;;
    lib/*/* | formats/*/*) return 1 ;;
    lib/*.h | formats/*.h) [ -d "${1%.h}" ] ;;
    *) return 1 ;;
    esac
}
used=$(mktemp)
trap 'rm -f "$used"' EXIT
for f in $all; do
    out=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
        sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1 \2/') || continue
    while read -r line inc; do
        [ -n "$inc" ] || continue
        here=$(dirname "$f")/$inc
        if [ -e "$here" ]; then target=$(realpath -m --relative-to=. "$here"); else target=$inc; fi
        case "$target" in cmd/* | */*) ;; *) continue ;; esac # a system header, or cmd/'s own
        case "$target" in cmd/*) continue ;; esac
        echo "$target" >>"$used"
        if ! is_face "$target"; then
            echo "$f:$line: includes $target, not a face (include lib/NAME.h, formats/NAME.h or verify/verify.h)"
            bad=$((bad + 1))
        fi
    done <<EOT
$out
EOT
done
headers=$(sort -u "$used" | wc -l)
if [ "$headers" -gt $MAX_HEADERS ]; then
    echo "cmd/: includes $headers distinct library headers (at most $MAX_HEADERS): $(sort -u "$used" | tr '\n' ' ')"
    bad=$((bad + 1))
fi
longest=$(wc -l $files | awk '$2 != "total"' | sort -n | tail -n 1 | awk '{ print $2 " at " $1 }')
echo "thin-cmd: $(echo "$files" | wc -w) files of cmd/ (the longest $longest lines), $headers library headers included, $bad breaches"
[ "$bad" -eq 0 ]
