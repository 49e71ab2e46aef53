#!/bin/sh
# Types the runnable examples of README.md and docs/*.md.  The convention: a fenced code
# block whose info string is `sh runnable` (```sh runnable ... ```) runs as written, from the
# root of a checkout that has been built (`make`), on the bundled fixtures, and exits 0.  Each
# such block is run here with `sh -e` in a scratch directory of its own that holds only
# ./tpshard and a copy of testdata/ (so a fresh clone's layout, and the fixtures cannot be
# changed), with no tpshard on the PATH: a block must say itself how it reaches the binary.
# (Their links are doc_links.sh's.)
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

# The blocks, one file each (block.1.sh, ...), and for each the heading it stands under
# (block.N.head) and the page it is on (block.N.page), numbered across the pages.
: >extract.err
for f in "$TPS_TOP/README.md" "$TPS_TOP"/docs/*.md; do
    [ -f "$f" ] || continue
    page=${f#"$TPS_TOP/"}
    n0=$(ls block.*.sh 2>/dev/null | wc -l)
    awk -v n="$n0" -v page="$page" '
         fence && /^```[ \t]*$/ { fence = on = 0; next }
         fence { if (on) print > file; next }
         /^```/ { fence = 1
                  if ($0 ~ /^```sh runnable[ \t]*$/) {
                      on = 1; n++; file = "block." n ".sh"; printf "" > file
                      print head > ("block." n ".head"); print page > ("block." n ".page") } }
         /^#+ / { head = $0; sub(/^#+ /, "", head) }
         END { if (on) print page ": unterminated runnable block " n > "/dev/stderr" }' \
        "$f" 2>>extract.err
done
blocks=$(ls block.*.sh 2>/dev/null | wc -l)
[ "$blocks" -gt 0 ] && [ ! -s extract.err ] && ok "README.md and docs/*.md: $blocks runnable block(s) found" ||
    { notok "README.md and docs/*.md: no runnable blocks, or one unterminated"; sed 's/^/#   /' extract.err; }
first=$(grep -lx "A first session" block.*.head 2>/dev/null | head -1)
[ -n "$first" ] && [ "$(cat "${first%.head}.page")" = README.md ] &&
    ok "README.md: \"A first session\" is marked runnable" ||
    notok "README.md: \"A first session\" has no runnable block"

# The PATH a fresh shell has, less any directory that holds a tpshard (an installed one would
# stand in for a block that never puts ./tpshard on the PATH).
clean_path=$(path_without_tpshard)
to=
command -v timeout >/dev/null 2>&1 && to="timeout 300"

i=1
while [ "$i" -le "$blocks" ]; do
    head=$(cat "block.$i.head")
    page=$(cat "block.$i.page")
    dir="$T/run.$i"
    mkdir "$dir" && cp "$TPSHARD" "$dir/tpshard" && cp -R "$FIX" "$dir/testdata"
    (cd "$dir" && PATH=$clean_path $to sh -e "$T/block.$i.sh") >"out.$i" 2>&1
    rc=$?
    diff -r "$FIX" "$dir/testdata" >"diff.$i" 2>&1
    if [ $rc -eq 0 ] && [ ! -s "diff.$i" ]; then
        ok "$page block $i (\"$head\") runs as written: exit 0, fixtures untouched"
    else
        notok "$page block $i (\"$head\"): exit $rc"
        sed 's/^/#   /' "out.$i" | tail -10
        sed 's/^/#   changed: /' "diff.$i" | head -5
    fi
    i=$((i + 1))
done
