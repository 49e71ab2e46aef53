#!/bin/sh
# make lint's own checks, on planted trees: each must report exactly the breaches planted in
# it (file and line) and pass once they are gone.  Prints "ok - ..." / "not ok - ..." lines
# and a last line counting them; exits 1 if any failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/tpshard-lint.XXXXXX")
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 2
pass=0
fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
notok() { echo "not ok - $*"; fail=$((fail + 1)); }
# expect NAME WANT-FILE COMMAND...: COMMAND exits 1 and its breach lines (all but the last,
# cut at the second colon) are exactly those of WANT-FILE.
expect() {
    name=$1 want=$2
    shift 2
    "$@" >got.out 2>&1
    rc=$?
    sed '$d' got.out | grep -o '^[^ :]*:[0-9]*' | sort >got.lines
    sort "$want" | diff - got.lines >got.diff
    if [ $rc -eq 1 ] && [ ! -s got.diff ]; then ok "$name"; else
        notok "$name (exit $rc)"
        sed 's/^/#   /' got.diff got.out | head -20
    fi
}

mkdir -p tree/lib tree/formats tree/verify tree/cmd tree/tests/cli tree/docs
cd tree
printf '# T\n## Real section\n' >README.md
printf '# Ref\n\n## Ref section, in full\n' >docs/ref.md

# layering: four breaches, one of them through a relative path, and the allowed includes
printf '#include "x.h"\n#include "formats/f.h"\n#include "../cmd/c.h"\n#include <stdio.h>\n' >lib/a.c
printf '#include "../lib/x.h"\n#include "lib/x.h"\n#include "f.h"\n' >formats/ok.c
printf '#ifndef F_H\n#define F_H\n#include "../verify/v.h"\n#endif\n' >formats/f.h
printf '  #  include "cmd/c.h"\n#include "../lib/x.h"\n' >verify/v.c
printf '#ifndef V_H\n#define V_H\n#endif\n' >verify/v.h
printf '#ifndef C_H\n#define C_H\n#include "../verify/v.h"\n#include "formats/f.h"\n#endif\n' >cmd/c.h
printf 'lib/a.c:2\nlib/a.c:3\nformats/f.h:3\nverify/v.c:1\n' >../layering.want
expect "layering.sh reports each include across a forbidden boundary" ../layering.want sh "$here/layering.sh" .

# lib/'s folders: an arrow up the order (here closing a cycle set <-> engine, by a relative
# and by a top-relative path), an include of the top from a folder, a folder the order lacks
mkdir -p ../folders/lib/base ../folders/lib/set ../folders/lib/engine ../folders/lib/odd ../folders/formats ../folders/verify
cd ../folders
printf 'LIB_LAYERS := base set engine\n' >Makefile
printf '#ifndef T\n#define T\n#endif\n' >lib/x.h
for h in base/b set/s engine/e odd/o; do printf '#ifndef H\n#define H\n#endif\n' >lib/$h.h; done
printf '#include "../engine/e.h"\n#include "../base/b.h"\n#include "s.h"\n' >lib/set/s.c
printf '#include "../set/s.h"\n#include "lib/base/b.h"\n#include "e.h"\n' >lib/engine/e.c
printf '#include "lib/set/s.h"\n#include "../x.h"\n' >lib/base/b.c
printf 'lib/set/s.c:1\nlib/base/b.c:1\nlib/base/b.c:2\nlib/odd/:\n' >../folders.want
expect "layering.sh reports an arrow up lib/'s folder order and a folder it does not place" ../folders.want \
    sh "$here/layering.sh" .
rm -r lib/odd lib/set/s.c lib/base/b.c
sh "$here/layering.sh" . >clean.out 2>&1 && ok "layering.sh passes lib/ folders that include only down the order" ||
    { notok "layering.sh on ordered folders"; sed 's/^/#   /' clean.out | head -10; }
cd ../tree

# verify/'s and formats/'s folders: formats/ names its top files "." at the bottom of its order
# (the reader interface every format builds on), verify/ keeps them as the face on top; an
# arrow up each order (one closing a cycle safetensors <-> torch), a folder including verify/'s
# face, formats/'s top reaching up into a format
mkdir -p ../folders2/verify/math ../folders2/verify/load ../folders2/formats/safetensors ../folders2/formats/torch ../folders2/lib
cd ../folders2
printf 'LIB_LAYERS :=\nVERIFY_LAYERS := math load\nFORMATS_LAYERS := . safetensors torch\n' >Makefile
for h in verify/v verify/math/m verify/load/l formats/checkpoint formats/safetensors/s formats/torch/t; do
    printf '#ifndef H\n#define H\n#endif\n' >$h.h
done
printf '#include "../load/l.h"\n#include "m.h"\n' >verify/math/m.c
printf '#include "verify/v.h"\n#include "../math/m.h"\n' >verify/load/l.c
printf '#include "load/l.h"\n#include "math/m.h"\n' >verify/v.c
printf '#include "torch/t.h"\n#include "checkpoint.h"\n' >formats/checkpoint.c
printf '#include "../torch/t.h"\n#include "../checkpoint.h"\n' >formats/safetensors/s.c
printf '#include "formats/safetensors/s.h"\n#include "formats/checkpoint.h"\n' >formats/torch/t.c
# faces beside their folders (not counted among the top's files): each stands with its folder,
# so formats/safetensors.h may not reach up into torch/, formats/torch.h may include its own
printf '#include "torch/t.h"\n#include "safetensors/s.h"\n' >formats/safetensors.h
printf '#include "torch/t.h"\n#include "safetensors/s.h"\n' >formats/torch.h
printf 'verify/math/m.c:1\nverify/load/l.c:1\nformats/checkpoint.c:1\nformats/safetensors/s.c:1\nformats/safetensors.h:1\n' >../folders2.want
expect "layering.sh reports arrows up verify/'s and formats/'s folder orders, into verify/'s face and from a folder's face" \
    ../folders2.want sh "$here/layering.sh" .
sed -i 1d verify/math/m.c verify/load/l.c formats/checkpoint.c formats/safetensors/s.c formats/safetensors.h
sh "$here/layering.sh" . >clean.out 2>&1 && ok "layering.sh passes verify/ and formats/ folders that include only down their orders" ||
    { notok "layering.sh on ordered verify/ and formats/ folders"; sed 's/^/#   /' clean.out | head -10; }

# thin-cmd: a cmd/ file of 261 lines, a function of 81, an include of a header that is not a
# face, and fourteen faces; then the same at the limits (260, 80, twelve faces) passes
mkdir -p ../thin/cmd ../thin/lib/base ../thin/verify
cd ../thin
printf '#ifndef B_H\n#define B_H\n#endif\n' >lib/base/buf.h
printf '#ifndef V_H\n#define V_H\n#endif\n' >verify/verify.h
i=1
while [ $i -le 13 ]; do
    mkdir -p lib/f$i && printf '#include "f%s/x.h"\n' $i >lib/f$i.h
    i=$((i + 1))
done
# lines N: N lines of C
lines() { i=0; while [ $i -lt "$1" ]; do echo "int v$i;"; i=$((i + 1)); done; }
# fn NAME N: a function of N lines, its definition's first line to its closing brace
fn() { printf 'static int %s(int a,\n                int b)\n{\n' "$1"; lines $(($2 - 4)) | sed 's/^/    /'; echo '}'; }
lines 261 >cmd/fat.c
{ echo '/* planted */'; echo; fn run 81; fn ok 80; } >cmd/long.c
printf '#include "own.h"\n#include "lib/base/buf.h"\n#include "verify/verify.h"\n#include <stdio.h>\n' >cmd/inc.c
printf '#ifndef O_H\n#define O_H\n#include "../lib/f1.h"\n#endif\n' >cmd/own.h
i=2
while [ $i -le 13 ]; do printf '#include "lib/f%s.h"\n' $i >>cmd/faces.c; i=$((i + 1)); done
printf 'cmd/fat.c:261\ncmd/long.c:3\ncmd/inc.c:2\ncmd/:\n' >../thin.want
expect "thin_cmd.sh reports a file over 260 lines, a function over 80, an include that is no face, over 12 headers" \
    ../thin.want sh "$here/thin_cmd.sh" .
lines 260 >cmd/fat.c
{ echo '/* planted */'; echo; fn run 80; } >cmd/long.c
sed -i '/lib\/base\/buf.h/d' cmd/inc.c
sed -i '/f1[23]/d' cmd/faces.c
sh "$here/thin_cmd.sh" . >clean.out 2>&1 && ok "thin_cmd.sh passes 260 lines, 80-line functions and twelve faces" ||
    { notok "thin_cmd.sh at its limits"; sed 's/^/#   /' clean.out | head -10; }
cd ../tree

# circles: a call circle with no include between them (lib/), an include circle (verify/), a
# circle a comment allows (formats/), and a one-way pair (cmd/)
mkdir -p ../circles/lib ../circles/verify ../circles/formats ../circles/cmd ../circles/obj
cd ../circles
printf 'int a(void);\nint b(void);\nint a(void) { return b(); }\n' >lib/a.c
printf 'int a(void);\nint b(void);\nint b(void) { return a() + 1; }\n' >lib/b.c
printf '#include "y.h"\nint x(void) { return 1; }\n' >verify/x.c
printf 'int x(void);\n' >verify/x.h
printf '#include "x.h"\nint y(void) { return 2; }\n' >verify/y.c
printf 'int y(void);\n' >verify/y.h
printf '/* circle-ok: formats/q  planted: the lint must let it be */\nint q(void);\nint p(void) { return q(); }\n' >formats/p.c
printf 'int p(void);\nint q(void) { return p(); }\n' >formats/q.c
printf 'int d(void);\nint c(void) { return d(); }\n' >cmd/c.c
printf 'int d(void) { return 0; }\n' >cmd/d.c
compile() {
    for c in lib/a lib/b verify/x verify/y formats/p formats/q cmd/c cmd/d; do
        mkdir -p obj/$(dirname $c) && ${CC:-cc} -c -I. -o obj/$c.o $c.c || return 1
    done
}
if compile; then
    sh "$here/circles.sh" . obj >got.out 2>&1
    rc=$?
    grep '^circle of' got.out >got.lines
    printf 'circle of 2: lib/a lib/b\ncircle of 2: verify/x verify/y\n' >want.lines
    if [ $rc -eq 1 ] && diff want.lines got.lines >/dev/null && grep -q 'lib/a -> lib/b  (calls:b)' got.out &&
        grep -q 'verify/x -> verify/y  (includes:verify/y.h(verify/x.c:1))' got.out; then
        ok "circles.sh reports a call circle and an include circle, not the one a comment allows nor a one-way pair"
    else
        notok "circles.sh on planted circles (exit $rc)"
        sed 's/^/#   /' got.out | head -20
    fi
    printf 'int b(void) { return 1; }\n' >lib/b.c
    printf 'int y(void) { return 2; }\n' >verify/y.c
    compile && sh "$here/circles.sh" . obj >clean.out 2>&1 && ok "circles.sh passes once the circles are gone" ||
        { notok "circles.sh on a tree without circles"; sed 's/^/#   /' clean.out | head -10; }
else
    notok "circles.sh: the planted tree does not compile with ${CC:-cc}"
fi
cd ../tree

# headers: one uses a type it does not include, one has no guard; the template is skipped
printf '#ifndef X_H\n#define X_H\n#include <stdint.h>\ntypedef uint64_t x_t;\n#endif\n' >lib/x.h
printf '#ifndef N_H\n#define N_H\nstatic inline size_t n(void) { return 0; }\n#endif\n' >lib/needs.h
printf 'struct s { int a; };\n' >lib/noguard.h
printf '/* No include guard: included once per type. */\nstatic T F(void);\n' >verify/t_tmpl.h
printf 'lib/needs.h:\nlib/noguard.h:\n' >../headers.want
sh "$here/headers.sh" . >headers.out 2>&1
rc=$?
grep -o '^[^ :]*\.h:' headers.out | sort >headers.got
if [ $rc -eq 1 ] && diff ../headers.want headers.got >/dev/null && tail -n 1 headers.out | grep -q '^headers: 6 compiled alone, 2 failed$'; then
    ok "headers.sh reports the header missing an include and the one without a guard, skips the template"
else
    notok "headers.sh (exit $rc)"
    sed 's/^/#   /' headers.out | head -20
fi

# cited paths: in every comment form, not in strings; placeholders, other repositories and
# build/ are not citations of this tree
touch lib/real.h
cat >lib/cite.c <<'C'
/* cites lib/missing1.h and lib/real.h
 * and across lines tests/cli/missing2.sh */
int x; // see formats/missing3.c
const char *s = "lib/notacomment.h /* lib/instring.h */";
char c = '"'; /* after a char literal: DESIGN.md */
/* README.md, "Real section" is there; README.md's "No such section" is not */
/* build/lib/x.c; facebook/zstd:tests/fuzz/regression_driver.c; lib/NAME.h; lib/{real,x}.h */
/* docs/ref.md, "Ref section" is there, by the start of its title, and docs/ref.md ("Ref") */
/* docs/ref.md's "Real section" is README's, not this page's */
/* docs/gone.md, "Any" names a page that is not there: one breach, the path */
C
# (the shell and Python comments are written with \043 for '#', so that this file's own
# comments cite nothing)
printf '\043 cites reference/formats.md\necho "\043 lib/instring2.h" $\043 ${\043x}  \043 trailing: testdata/missing4\n' >tests/cli/t.sh
printf '"""Docstring: lib/missing5.h\nand perf.md"""\nx = "lib/instring3.h"  \043 lib/missing6.h\n' >tests/cli/t.py
printf 'lib/cite.c:1\nlib/cite.c:2\nlib/cite.c:3\nlib/cite.c:5\nlib/cite.c:6\nlib/cite.c:9\nlib/cite.c:10\ntests/cli/t.py:1\ntests/cli/t.py:2\ntests/cli/t.py:3\ntests/cli/t.sh:1\ntests/cli/t.sh:2\n' >../cited.want
expect "cited_paths.sh reports each dangling citation, in comments only" ../cited.want sh "$here/cited_paths.sh" .

# and each passes once the breaches are gone
rm lib/a.c formats/f.h verify/v.c lib/needs.h lib/noguard.h lib/cite.c tests/cli/t.sh tests/cli/t.py
sed -i '/formats\/f.h/d' cmd/c.h
for s in layering headers cited_paths; do
    sh "$here/$s.sh" . >clean.out 2>&1 && ok "$s.sh passes a clean tree" ||
        { notok "$s.sh on a clean tree"; sed 's/^/#   /' clean.out | head -10; }
done
echo "selftest: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
