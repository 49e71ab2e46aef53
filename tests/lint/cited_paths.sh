#!/bin/sh
# Every repository path a comment cites exists.  Reads the comments of the C, CUDA, shell,
# Python, make and YAML files (C: /* */ and //; Python: # and docstrings; the others: # to
# the end of the line, where # starts a line or follows a blank), outside string literals,
# and takes from them:
#   - paths under the tree's own top directories (lib/, formats/, verify/, cmd/, tests/,
#     testdata/, .ci/), where a <name> or {a,b} part, or the placeholder word NAME, FILE or
#     DIR, stands for anything (cmd/cmd_NAME.c);
#   - every file name ending in .md, with or without a directory;
#   - a section of README.md or of a page of docs/ cited by its title in double quotes right
#     after the page's name (README.md, "Commands"; docs/layouts.md, "Layout schema";
#     docs/formats.md's "The set"): some heading of that page must start with the title (a
#     page that is not there is reported once, as a path).
# Not checked: paths under build/ (what the build writes), and a path in another
# repository, written after that repository's name and a colon (facebook/zstd:tests/x.c).
#   sh tests/lint/cited_paths.sh [ROOT]     prints each dangling citation as FILE:LINE: ...
#                                           and exits 1 if there is any
set -u
cd "${1:-$(dirname "$0")/../..}" || exit 2

find . \( -path ./build -o -path ./.git \) -prune -o -type f \
    \( -name '*.[ch]' -o -name '*.cu' -o -name '*.sh' -o -name '*.py' -o -name '*.mk' -o -name Makefile \
    -o -name '*.yaml' -o -path './.ci/*' \) -print | sed 's|^\./||' | sort >"${TMPDIR:-/tmp}/cited.$$.files"
trap 'rm -f "${TMPDIR:-/tmp}/cited.$$".*' EXIT
list="${TMPDIR:-/tmp}/cited.$$.files"
headings="${TMPDIR:-/tmp}/cited.$$.headings"

# One line per citation: "FILE:LINE<TAB>KIND<TAB>WHAT" (KIND path or section).
# shellcheck disable=SC2046
awk '
function lit_end(s, i, q,   n, e) {   # index just past the literal opened by q at i
    n = length(s)
    for (i++; i <= n; i++) {
        e = substr(s, i, 1)
        if (e == "\\") { i++; continue }
        if (e == q) return i + 1
    }
    return n + 1
}
function c_comments(s,   out, i, n, j, c) {
    out = ""; i = 1; n = length(s)
    while (i <= n) {
        if (incom) {
            j = index(substr(s, i), "*/")
            if (j == 0) return out substr(s, i)
            out = out substr(s, i, j - 1) " "; i += j + 1; incom = 0; continue
        }
        c = substr(s, i, 2)
        if (c == "/*") { incom = 1; i += 2; continue }
        if (c == "//") return out substr(s, i + 2)
        c = substr(s, i, 1)
        if (c == "\"" || c == "\047") { i = lit_end(s, i, c); continue }
        i++
    }
    return out
}
function hash_comment(s,   i, n, c, p) {
    n = length(s)
    for (i = 1; i <= n; i++) {
        c = substr(s, i, 1)
        if (c == "\"" || c == "\047") { i = lit_end(s, i, c) - 1; continue }
        p = i > 1 ? substr(s, i - 1, 1) : " "
        if (c == "#" && (p == " " || p == "\t")) return substr(s, i + 1)
    }
    return ""
}
function py_comments(s,   out, j) {   # docstrings ("""...""") and # comments
    out = ""
    while (s != "") {
        j = index(s, "\"\"\"")
        if (indoc) {
            if (j == 0) return out s
            out = out substr(s, 1, j - 1) " "; s = substr(s, j + 3); indoc = 0; continue
        }
        if (j == 0) return out hash_comment(s)
        out = out hash_comment(substr(s, 1, j - 1)); s = substr(s, j + 3); indoc = 1
    }
    return out
}
function emit(kind, what) { printf "%s:%d\t%s\t%s\n", FILENAME, FNR, kind, what }
function scan(t,   rest, m, pre, what) {
    rest = t
    while (match(rest, /(\.ci|cmd|formats|lib|tests|testdata|verify)\/([A-Za-z0-9_.*\/-]|<[A-Za-z_]+>|\{[A-Za-z0-9_,.*-]*\})+/)) {
        pre = RSTART > 1 ? substr(rest, RSTART - 1, 1) : " "
        what = substr(rest, RSTART, RLENGTH)
        rest = substr(rest, RSTART + RLENGTH)
        if (pre ~ /[A-Za-z0-9_.\/$):-]/) continue
        sub(/[.-]+$/, "", what)
        emit("path", what)
    }
    rest = t
    while (match(rest, /[A-Za-z0-9_.\/-]*[A-Za-z0-9_-]\.md/)) {
        pre = RSTART > 1 ? substr(rest, RSTART - 1, 1) : " "
        what = substr(rest, RSTART, RLENGTH)
        rest = substr(rest, RSTART + RLENGTH)
        if (pre ~ /[A-Za-z0-9_.\/$):-]/ || substr(rest, 1, 1) ~ /[A-Za-z0-9_]/) continue
        if (what ~ /^build\//) continue
        emit("path", what)
    }
    rest = t
    while (match(rest, /(README|docs\/[A-Za-z0-9_.-]+)\.md(\047s)?( section)?[ ,(]*"[^"]+"/)) {
        what = substr(rest, RSTART, RLENGTH)
        pre = RSTART > 1 ? substr(rest, RSTART - 1, 1) : " "
        rest = substr(rest, RSTART + RLENGTH)
        if (pre ~ /[A-Za-z0-9_.\/$):-]/) continue
        page = what
        sub(/\.md.*$/, ".md", page)
        sub(/^[^"]*"/, "", what); sub(/"$/, "", what)
        emit("section", page "\t" what)
    }
}
FNR == 1 { incom = indoc = 0; kind = FILENAME ~ /\.(c|h|cu)$/ ? "c" : FILENAME ~ /\.py$/ ? "py" : "hash" }
{ t = kind == "c" ? c_comments($0) : kind == "py" ? py_comments($0) : hash_comment($0); if (t != "") scan(t) }
' $(cat "$list") | sort -u >"${TMPDIR:-/tmp}/cited.$$.all"

bad=0
checked=0
tab=$(printf '\t')
while IFS="$tab" read -r where kind what; do
    checked=$((checked + 1))
    if [ "$kind" = section ]; then
        page=${what%%"$tab"*}
        title=${what#*"$tab"}
        [ -f "$page" ] || continue # the path check reports it
        sed -n 's/^#\{1,6\} \{1,\}//p' "$page" >"$headings"
        awk -v t="$title" 'index($0, t) == 1 { found = 1 } END { exit !found }' "$headings" && continue
        echo "$where: cites $page section \"$title\", which $page has no heading for"
        bad=$((bad + 1))
        continue
    fi
    pat=$(printf '%s\n' "$what" | sed 's/<[A-Za-z_]*>/*/g; s/{[^}]*}/*/g; s/\(^\|[^A-Za-z]\)\(NAME\|FILE\|DIR\)\([^A-Za-z]\|$\)/\1*\3/g')
    # shellcheck disable=SC2086
    set -- $pat
    [ -e "$1" ] && continue
    echo "$where: cites $what, which is not in the repository"
    bad=$((bad + 1))
done <"${TMPDIR:-/tmp}/cited.$$.all"
echo "cited paths: $checked citations in $(wc -l <"$list") files, $bad dangling"
[ "$bad" -eq 0 ]
