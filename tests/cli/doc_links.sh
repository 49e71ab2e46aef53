#!/bin/sh
# Every relative link of README.md and docs/*.md leads somewhere: the file (or directory) it
# names exists, and a #anchor names a heading of the Markdown page it points into (its own
# page when the link is only #anchor), as GitHub makes anchors of headings: the heading's
# text (code spans and links reduced to their text, * dropped) lower-cased, every character
# other than a-z, 0-9, space, _ and - dropped, each space a -, and -1, -2, ... on the second,
# third, ... heading of the same anchor.  (GitHub keeps non-ASCII letters such as é, which
# are dropped here: no heading of this tree has one.)  Links in fenced code blocks and code
# spans are not links; http:, https:, mailto: and other schemes are not checked.  A
# self-test first: a planted tree's broken links must be reported, each at its line, and
# nothing else.  Last, the table make bench replaces in docs/benchmarks.md (its markers, and
# tests/bench/bench.py --docs on a sample of build/bench/results.md).  The runnable examples
# of the same pages are readme.sh's.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

cat >links.awk <<'AWK'
function slug(h,   t, s) {
    s = h
    while (match(s, /\[[^]]*\]\([^)]*\)/)) {             # [text](url) -> text
        t = substr(s, RSTART, RLENGTH)
        sub(/\]\([^)]*\)$/, "", t)
        s = substr(s, 1, RSTART - 1) substr(t, 2) substr(s, RSTART + RLENGTH)
    }
    s = tolower(s)
    gsub(/[^a-z0-9 _-]/, "", s)
    gsub(/ /, "-", s)
    return s
}
function heading_text(line) {
    sub(/^ *#+[ \t]*/, "", line)
    sub(/[ \t]+#+[ \t]*$/, "", line)                      # a closing sequence
    sub(/[ \t]+$/, "", line)
    return line
}
function is_fence(line) { return line ~ /^ ? ? ?(```|~~~)/ }   # (mawk has no {m,n})
# load(path): the anchors of path's headings into anchor[path, slug]; once per path
function load(path,   line, fence, base, n) {
    if (path in loaded) return
    loaded[path] = 1
    fence = 0
    while ((getline line < path) > 0) {
        if (is_fence(line)) { fence = !fence; continue }
        if (fence || line !~ /^ ? ? ?#+([ \t]|$)/ || line ~ /^ *#######/) continue
        base = slug(heading_text(line))
        n = seen[path, base]++
        anchor[path, n ? base "-" n : base] = 1
    }
    close(path)
}
function dirname(p) { return p ~ /\// ? substr(p, 1, match(p, /\/[^\/]*$/) - 1) : "." }
# norm(p): p with its . and .. parts resolved; "" when it climbs out of the tree
function norm(p,   parts, n, i, out, k) {
    n = split(p, parts, "/")
    k = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] == "" || parts[i] == ".") continue
        if (parts[i] == "..") { if (k == 0) return ""; k--; continue }
        out[++k] = parts[i]
    }
    p = ""
    for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") out[i]
    return p
}
function bad(what) { printf "%s:%d: %s\n", FILENAME, FNR, what; nbad++ }
FNR == 1 { fence = 0 }
is_fence($0) { fence = !fence; next }
fence { next }
{
    line = $0
    gsub(/`[^`]*`/, "", line)                             # code spans are not links
    while (match(line, /\]\([^) \t]+\)/)) {
        target = substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
        if (target ~ /^[A-Za-z][A-Za-z0-9+.-]*:/) continue   # another scheme: not ours
        nlinks++
        path = target; frag = ""
        if ((h = index(target, "#")) > 0) { path = substr(target, 1, h - 1); frag = substr(target, h + 1) }
        file = path == "" ? FILENAME : norm(dirname(FILENAME) "/" path)
        if (file == "" || system("test -e '" file "'") != 0) { bad("(" target "): no such file"); continue }
        if (frag == "") continue
        if (file !~ /\.md$/) { bad("(" target "): an anchor into a file that is not Markdown"); continue }
        load(file)
        if (!((file, frag) in anchor)) bad("(" target "): " file " has no heading whose anchor is #" frag)
    }
}
END { printf "links: %d checked, %d broken\n", nlinks, nbad; exit nbad > 0 }
AWK

# links ROOT: the check over ROOT's README.md and docs/*.md, from ROOT
links() {
    (cd "$1" && set -- README.md docs/*.md && awk -f "$T/links.awk" "$@")
}

# The self-test: a planted tree, each broken link on a line of its own.
mkdir -p plant/docs plant/testdata
cd plant || exit 1
touch testdata/x.yaml
cat >README.md <<'MD'
# Title

## Same name
## Same name
See [a](docs/a.md), [its part](docs/a.md#code-and-punct-xy), [here](#same-name-1), [x](testdata/x.yaml).
[broken file](docs/missing.md)
[broken anchor](docs/a.md#no-such-heading)
[broken here](#same-name-2)
![broken image](docs/none.png)
`[not a link](nowhere.md)` and [web](https://example.com/x.md) and [mail](mailto:a@b)
```sh
[in a fence](nowhere.md)
```
[climbs out](../outside.md)
MD
cat >docs/a.md <<'MD'
# Page A

## `code` and Punct: x/y
Back to [the title](../README.md#title), [the second](../README.md#same-name-1).
[missing anchor](../README.md#missing)
[anchor in yaml](../testdata/x.yaml#L1)
MD
printf 'README.md:6\nREADME.md:7\nREADME.md:8\nREADME.md:9\nREADME.md:14\ndocs/a.md:5\ndocs/a.md:6\n' >../want
cd "$T" || exit 1
links plant >plant.out 2>&1
rc=$?
sed '$d' plant.out | grep -o '^[^:]*:[0-9]*' | sort >got
if [ $rc -eq 1 ] && sort want | diff - got >diff.out && tail -1 plant.out | grep -q '^links: 13 checked, 7 broken$'; then
    ok "doc links self-test: each planted broken link (file, anchor, image, out of the tree, non-Markdown anchor) is reported at its line, and nothing else"
else
    notok "doc links self-test (exit $rc)"
    sed 's/^/#   /' diff.out plant.out | head -20
fi

# The real pages.
links "$TPS_TOP" >real.out 2>&1
if [ $? -eq 0 ]; then
    ok "README.md and docs/*.md: every relative link's file exists and every #anchor is a heading ($(tail -1 real.out))"
else
    notok "README.md and docs/*.md: broken links"
    sed 's/^/#   /' real.out | head -20
fi

# docs/benchmarks.md's table is make bench's: one begin and one end marker, and bench.py
# --docs puts a build/bench/results.md between them, keeping the rest of the page byte for
# byte.
page="$TPS_TOP/docs/benchmarks.md"
[ "$(grep -cx '<!-- bench:begin -->' "$page")" = 1 ] && [ "$(grep -cx '<!-- bench:end -->' "$page")" = 1 ] &&
    ok "docs/benchmarks.md has one bench:begin and one bench:end line" ||
    notok "docs/benchmarks.md: wants one <!-- bench:begin --> and one <!-- bench:end --> line"
PY=/usr/bin/python3
if [ -x "$PY" ]; then
    cp "$page" page.md
    printf 'tpshard bench: sample; 5 interleaved runs per case, medians\n\n| case | median s |\n|---|---:|\n| split tp8 | 4.920 |\n\nNote: sample\n' >results.md
    sed '/<!-- bench:begin -->/q' page.md >want.md
    printf '\n' >>want.md
    cat results.md >>want.md
    printf '\n' >>want.md
    sed -n '/<!-- bench:end -->/,$p' page.md >>want.md
    if "$PY" "$TPS_TOP/tests/bench/bench.py" --docs results.md page.md >docs.out 2>&1 && cmp -s want.md page.md &&
        "$PY" "$TPS_TOP/tests/bench/bench.py" --docs results.md page.md >>docs.out 2>&1 && cmp -s want.md page.md; then
        ok "bench.py --docs puts a sample results.md between the markers, the rest of the page unchanged, twice the same"
    else
        notok "bench.py --docs on a sample results.md"
        sed 's/^/#   /' docs.out | head -5
        diff want.md page.md | sed 's/^/#   /' | head -10
    fi
    printf 'no markers\n' >nomark.md
    "$PY" "$TPS_TOP/tests/bench/bench.py" --docs results.md nomark.md >nomark.out 2>&1
    rc=$?
    [ $rc -ne 0 ] && [ "$(cat nomark.md)" = "no markers" ] && grep -q 'bench:begin' nomark.out &&
        ok "bench.py --docs refuses a page without the markers and leaves it as it was" ||
        notok "bench.py --docs on a page without markers (exit $rc)"
else
    skip "bench.py --docs: no $PY"
fi
