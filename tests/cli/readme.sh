#!/bin/sh
# Types README.md's runnable examples.  The convention: a fenced code block whose info string
# is `sh runnable` (```sh runnable ... ```) runs as written, from the root of a checkout that
# has been built (`make`), on the bundled fixtures, and exits 0.  Each such block is run here
# with `sh -e` in a scratch directory of its own that holds only ./tpshard and a copy of
# testdata/ (so a fresh clone's layout, and the fixtures cannot be changed), with no tpshard
# on the PATH: a block must say itself how it reaches the binary.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"
README="$TPS_TOP/README.md"

# The blocks, one file each (block.1.sh, ...), and for each the heading it stands under.
awk '/^#+ / { head = $0; sub(/^#+ /, "", head) }
     on && /^```[ \t]*$/ { on = 0; next }
     on { print > file; next }
     /^```sh runnable[ \t]*$/ { on = 1; n++; file = "block." n ".sh"; printf "" > file; print head > ("block." n ".head") }
     END { if (on) print "unterminated runnable block " n > "/dev/stderr" }' "$README" 2>extract.err
blocks=$(ls block.*.sh 2>/dev/null | wc -l)
[ "$blocks" -gt 0 ] && [ ! -s extract.err ] && ok "README.md: $blocks runnable block(s) found" ||
    { notok "README.md: no runnable blocks, or one unterminated"; sed 's/^/#   /' extract.err; }
grep -qx "A first session" block.*.head 2>/dev/null && ok "README.md: \"A first session\" is marked runnable" ||
    notok "README.md: \"A first session\" has no runnable block"

# The PATH a fresh shell has, less any directory that holds a tpshard (an installed one would
# stand in for a block that never puts ./tpshard on the PATH).
clean_path=
old_ifs=$IFS
IFS=:
for d in $PATH; do
    [ -n "$d" ] && [ -x "$d/tpshard" ] && continue
    clean_path="${clean_path:+$clean_path:}$d"
done
IFS=$old_ifs
to=
command -v timeout >/dev/null 2>&1 && to="timeout 300"

i=1
while [ "$i" -le "$blocks" ]; do
    head=$(cat "block.$i.head")
    dir="$T/run.$i"
    mkdir "$dir" && cp "$TPSHARD" "$dir/tpshard" && cp -R "$FIX" "$dir/testdata"
    (cd "$dir" && PATH=$clean_path $to sh -e "$T/block.$i.sh") >"out.$i" 2>&1
    rc=$?
    diff -r "$FIX" "$dir/testdata" >"diff.$i" 2>&1
    if [ $rc -eq 0 ] && [ ! -s "diff.$i" ]; then
        ok "README.md block $i (\"$head\") runs as written: exit 0, fixtures untouched"
    else
        notok "README.md block $i (\"$head\"): exit $rc"
        sed 's/^/#   /' "out.$i" | tail -10
        sed 's/^/#   changed: /' "diff.$i" | head -5
    fi
    i=$((i + 1))
done
